package cli

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"
)

// zstdMagic starts a zstd frame.
var zstdMagic = []byte{0x28, 0xb5, 0x2f, 0xfd}

// Issue 27, problem 8, through the binary: --out picks the format from the
// name and refuses any other (before, x.tar.gz and x.zst got an
// uncompressed tar); an existing file is kept unless --force (before, it
// was overwritten); the default name is .tar.zst, compressed (before, an
// uncompressed .tar); `backup verify -` and `restore -` read standard
// input (before, they looked for a file named "-").
func TestBackupFormatsAndStandardInput(t *testing.T) {
	h := newHarness(t)
	h.createDB()
	env := serverEnv(h)
	dir := t.TempDir()
	for _, name := range []string{"x.tar.gz", "x.zst", "x.tgz", "x"} {
		out := filepath.Join(dir, name)
		code, _, errOut := runBinary(t, env, "backup", "create", "--out", out)
		if code != exitUsage || !strings.Contains(errOut, "--out") || !strings.Contains(errOut, ".tar.zst") {
			t.Errorf("--out %s: exit %d, want 2 naming --out and the formats\n%s", name, code, errOut)
		}
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Fatalf("refused names left %d files", len(entries))
	}

	plain, packed := filepath.Join(dir, "b.tar"), filepath.Join(dir, "b.tar.zst")
	for _, out := range []string{plain, packed} {
		if code, _, errOut := runBinary(t, env, "backup", "create", "--out", out); code != exitOK {
			t.Fatalf("--out %s: exit %d\n%s", out, code, errOut)
		}
	}
	first, err := os.ReadFile(plain)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.HasPrefix(first, zstdMagic) {
		t.Error("b.tar is compressed")
	}
	if data, _ := os.ReadFile(packed); !bytes.HasPrefix(data, zstdMagic) {
		t.Error("b.tar.zst is not compressed")
	}
	if code, _, _ := runBinary(t, env, "backup", "create", "--out", plain, "--zstd"); code != exitUsage {
		t.Errorf("--zstd with a .tar name: exit %d, want 2", code)
	}

	// An existing file is kept without --force, replaced with it.
	code, _, errOut := runBinary(t, env, "backup", "create", "--out", plain)
	if code != exitUsage || !strings.Contains(errOut, "exists") || !strings.Contains(errOut, "--force") {
		t.Fatalf("--out over an existing file: exit %d, want 2 naming --force\n%s", code, errOut)
	}
	if now, _ := os.ReadFile(plain); !bytes.Equal(now, first) {
		t.Fatal("the existing file changed")
	}
	if code, _, errOut := runBinary(t, env, "backup", "create", "--out", plain, "--force"); code != exitOK {
		t.Fatalf("--force: exit %d\n%s", code, errOut)
	}
	if now, _ := os.ReadFile(plain); bytes.Equal(now, first) {
		t.Fatal("--force did not replace the file")
	}

	// The default name and format.
	backups := filepath.Join(t.TempDir(), "backups")
	code, out, errOut := runBinary(t, append(env, "PROGRESSDB_BACKUP_PATH="+backups), "backup", "create", "--json")
	var rep backupReport
	if code != exitOK || json.Unmarshal([]byte(out), &rep) != nil {
		t.Fatalf("default backup: exit %d\n%s%s", code, out, errOut)
	}
	if !strings.HasSuffix(rep.File, ".tar.zst") || filepath.Dir(rep.File) != backups {
		t.Errorf("default file %s, want a .tar.zst in %s", rep.File, backups)
	}
	if data, _ := os.ReadFile(rep.File); !bytes.HasPrefix(data, zstdMagic) {
		t.Error("the default backup is not compressed")
	}

	// Standard input, plain and compressed.
	for _, archive := range []string{plain, packed} {
		f, err := os.Open(archive)
		if err != nil {
			t.Fatal(err)
		}
		code, out, errOut := runBinaryStdin(t, env, f, "backup", "verify", "-")
		f.Close()
		if code != exitOK || !strings.Contains(out, "standard input: valid") {
			t.Errorf("backup verify - < %s: exit %d\n%s%s", archive, code, out, errOut)
		}
	}
	f, err := os.Open(packed)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	restored, trail := filepath.Join(t.TempDir(), "restored"), t.TempDir()
	code, out, errOut = runBinaryStdin(t, env, f, "restore", "-", "--db", restored, "--audit", trail)
	if code != exitOK || !strings.Contains(out, "restored:") {
		t.Fatalf("restore -: exit %d\n%s%s", code, out, errOut)
	}
	if manifests, _ := filepath.Glob(filepath.Join(restored, "MANIFEST-*")); len(manifests) == 0 {
		entries, _ := os.ReadDir(restored)
		t.Fatalf("restore - wrote no database: %v", entries)
	}
}

// bombManifest is a valid manifest for one 1 KiB file.
const bombManifest = `{"format":1,"backup_id":"b0b0b0b0b0b0","created_at":"2026-01-01T00:00:00Z","version":"x",` +
	`"pebble_format":1,"threads":0,"messages":0,"audit_head":{"run_id":"","file":"","sha256":""},"erased":true,` +
	`"files":[{"name":"db/000001.log","size":1024,"sha256":"0000000000000000000000000000000000000000000000000000000000000000"}]}`

// bombHead is a tar stream whose manifest gives db/000001.log 1 KiB and
// whose entry header declares 2 GiB; the entry's bytes follow it.
func bombHead(t *testing.T) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range []struct {
		name string
		size int64
	}{{"manifest.json", int64(len(bombManifest))}, {"db/000001.log", 2 << 30}} {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: e.name, Size: e.size, Mode: 0o600,
			ModTime: time.Unix(0, 0), Format: tar.FormatPAX}); err != nil {
			t.Fatal(err)
		}
		if e.name == "manifest.json" {
			if _, err := tw.Write([]byte(bombManifest)); err != nil {
				t.Fatal(err)
			}
		}
	}
	return buf.Bytes() // the second entry's header, none of its bytes
}

// Issue 27, problem 7, through the binary: an archive whose entry
// declares 2 GiB while the manifest gives it 1 KiB stops at its header,
// exit 1, leaving nothing in the temporary folder or in --db. Before,
// extractFile copied the entry and compared sizes after: backup verify
// wrote what the archive held into the temporary folder, and restore into
// --db, before refusing; read from standard input, the bomb is consumed
// no further than the header.
func TestUntrustedArchiveStopsAtTheManifestSize(t *testing.T) {
	h := newHarness(t)
	tmp := t.TempDir()
	env := append(serverEnv(h), "TMPDIR="+tmp)
	const want = "declares 2147483648 bytes, the manifest says 1024"

	// A .tar.zst of 64 KiB: the header and 8 MiB of the entry's zeros.
	var zbuf bytes.Buffer
	zw, err := zstd.NewWriter(&zbuf)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = zw.Write(bombHead(t))
	_, _ = zw.Write(make([]byte, 8<<20))
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	bomb := filepath.Join(t.TempDir(), "bomb.tar.zst")
	if err := os.WriteFile(bomb, zbuf.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	empty := func(what string) {
		t.Helper()
		if entries, _ := os.ReadDir(tmp); len(entries) != 0 {
			t.Errorf("%s left %d entries in the temporary folder", what, len(entries))
		}
	}
	code, out, errOut := runBinary(t, env, "backup", "verify", bomb)
	if code != exitFailed || !strings.Contains(out, want) {
		t.Errorf("backup verify: exit %d, want 1 naming %q\n%s%s", code, want, out, errOut)
	}
	empty("backup verify")
	db := filepath.Join(t.TempDir(), "restored")
	code, out, errOut = runBinary(t, env, "restore", bomb, "--db", db, "--audit", t.TempDir())
	if code != exitFailed || !strings.Contains(errOut, want) {
		t.Errorf("restore: exit %d, want 1 naming %q\n%s%s", code, want, out, errOut)
	}
	if _, err := os.Stat(db); !os.IsNotExist(err) {
		t.Errorf("restore left %s (%v)", db, err)
	}
	empty("restore")

	// From standard input: an endless entry, read no further than the
	// reader's buffer past its header.
	cmd := exec.Command(binary(t), "backup", "verify", "-")
	cmd.Env = env
	var stdout bytes.Buffer
	cmd.Stdout = &stdout
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sent := 0
	zeros := make([]byte, 64<<10)
	n, err := in.Write(bombHead(t))
	for sent = n; err == nil && sent < 2<<30; sent += n {
		n, err = in.Write(zeros)
	}
	in.Close()
	err = cmd.Wait()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != exitFailed || !strings.Contains(stdout.String(), want) {
		t.Errorf("backup verify -: %v, want exit 1 naming %q\n%s", err, want, stdout.String())
	}
	if sent > 32<<20 {
		t.Errorf("backup verify - read %d bytes of the bomb before it stopped", sent)
	}
	empty("backup verify -")
}
