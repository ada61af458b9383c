package faults

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/progressdb/progressdb/server/internal/backup"
)

// verifyBackup fails the test unless the archive at path verifies.
func verifyBackup(t testing.TB, path string) backup.Report {
	t.Helper()
	rep, err := backup.Verify(context.Background(), path, nil, t.TempDir())
	if err != nil || !rep.Valid {
		t.Fatalf("backup %s does not verify: %v %v", path, err, rep.Problems)
	}
	return rep
}

// A backup taken through a running server, while writers keep writing,
// holds every write acknowledged before it was asked for; --out - streams
// the same archive to standard output.
func TestFaultBackupThroughServer(t *testing.T) {
	t.Parallel()
	s := newSite(t.TempDir())
	backups := filepath.Join(s.dir, "backups")
	env := s.env().with("PROGRESSDB_ADMIN_TOKEN", adminToken, "PROGRESSDB_BACKUP_PATH", backups)
	srv := startServer(t, env)
	env = env.with("PROGRESSDB_ADDR", strings.TrimPrefix(srv.url, "http://"))

	var mu sync.Mutex
	var acked []string
	stop := make(chan struct{})
	var wg sync.WaitGroup
	srv.mustCall(t, "POST", "/v1/threads", map[string]string{"id": "busy", "title": "t", "author": "a"}, "", http.StatusCreated, nil)
	for g := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				id := fmt.Sprintf("w%d-%d", g, i)
				status, body := srv.call(t, "POST", "/v1/threads/busy/messages", map[string]any{"id": id, "author": "a", "body": id}, "")
				if status != http.StatusCreated {
					t.Errorf("write %s: %d %s", id, status, body)
					return
				}
				mu.Lock()
				acked = append(acked, id)
				mu.Unlock()
			}
		}()
	}
	waitFor(t, time.Minute, "writes to be acknowledged", func() bool { mu.Lock(); defer mu.Unlock(); return len(acked) >= 50 })
	mu.Lock()
	before := append([]string(nil), acked...)
	mu.Unlock()
	out := filepath.Join(s.dir, "b.tar.zst")
	p := runCLI(t, env, "backup", "create", "--out", out, "--json")
	close(stop)
	wg.Wait()
	if p.code != 0 {
		t.Fatalf("backup create: %d\n%s", p.code, p.output())
	}
	rep := verifyBackup(t, out)

	// Restore the files by hand into a new folder and read them.
	dir := filepath.Join(s.dir, "unpacked")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if _, err := backup.Unpack(context.Background(), out, dir, "", nil); err != nil {
		t.Fatal(err)
	}
	st := openStore(t, dir)
	defer st.Close()
	for _, id := range before {
		if _, err := st.GetMessage(context.Background(), "busy", id); err != nil {
			t.Fatalf("message %s, acknowledged before the backup, is not in it: %v", id, err)
		}
	}
	if rep.Manifest.Threads != 1 {
		t.Errorf("manifest threads %d, want 1", rep.Manifest.Threads)
	}

	// --out - writes the archive to standard output.
	p = runCLI(t, env, "backup", "create", "--out", "-")
	if p.code != 0 {
		t.Fatalf("backup create --out -: %d\n%s", p.code, p.output())
	}
	streamed := filepath.Join(s.dir, "streamed.tar")
	if err := os.WriteFile(streamed, []byte(p.stdout.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	verifyBackup(t, streamed)

	// Without --out, the server writes it into its BACKUP_PATH.
	p = runCLI(t, env, "backup", "create", "--json")
	if p.code != 0 {
		t.Fatalf("backup create: %d\n%s", p.code, p.output())
	}
	var made struct {
		Manifest backup.Manifest `json:"manifest"`
	}
	must(t, json.Unmarshal([]byte(p.stdout.String()), &made))
	verifyBackup(t, filepath.Join(backups, backup.FileName(made.Manifest.CreatedAt, made.Manifest.BackupID)))
	srv.stop(t)
}

// A backup killed part way leaves no archive under its final name, and
// its staging checkpoint (hard links to the live tables) is gone: removed
// before the archive's first byte is written, and, for a backup killed
// before that, once the database is opened again.
func TestFaultBackupKilled(t *testing.T) {
	t.Parallel()
	s := newSite(t.TempDir())
	env := s.env()
	if p := runCLI(t, env, "seed", "--threads", "1000", "--messages", "40"); p.code != 0 {
		t.Fatalf("seed: %d\n%s", p.code, p.output())
	}
	out := filepath.Join(s.dir, "b.tar")
	caught := false
	for attempt := 0; attempt < 10 && !caught; attempt++ {
		p := start(t, env, "backup", "create", "--out", out)
		waitFor(t, time.Minute, "the backup to start writing or end", func() bool {
			// Killed while it writes the archive.
			tmp, _ := filepath.Glob(filepath.Join(s.dir, ".b.tar.tmp-*"))
			if len(tmp) > 0 {
				if info, err := os.Stat(tmp[0]); err == nil && info.Size() > 0 {
					p.kill()
					caught = true
					return true
				}
			}
			return p.exited()
		})
		p.kill()
		if !caught {
			if p.code != 0 {
				t.Fatalf("backup create: %d\n%s", p.code, p.output())
			}
			if err := os.Remove(out); err != nil {
				t.Fatal(err)
			}
		}
	}
	if !caught {
		t.Fatal("every backup ended before it could be killed")
	}
	if _, err := os.Stat(out); !os.IsNotExist(err) {
		t.Fatalf("a killed backup left %s (%v)", out, err)
	}
	if tmp, _ := filepath.Glob(filepath.Join(s.dir, ".b.tar.tmp-*")); len(tmp) != 1 {
		t.Fatalf("temporary archives %v, want the killed one", tmp)
	}
	if staging, _ := filepath.Glob(filepath.Join(s.db, ".backup-checkpoint-*")); len(staging) > 0 {
		t.Fatalf("a backup killed while it wrote the archive left its staging checkpoint: %v", staging)
	}
	openStore(t, s.db).Close()
	if staging, _ := filepath.Glob(filepath.Join(s.db, ".backup-checkpoint-*")); len(staging) > 0 {
		t.Fatalf("staging checkpoint left after reopening: %v", staging)
	}
	// The next backup works and verifies.
	if p := runCLI(t, env, "backup", "create", "--out", out); p.code != 0 {
		t.Fatalf("backup create: %d\n%s", p.code, p.output())
	}
	verifyBackup(t, out)
}

// writeKeys writes an ed25519 key pair as PEM files and returns their paths.
func writeKeys(t testing.TB, dir, name string) (priv, pub string) {
	t.Helper()
	pk, sk, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	skDER, err := x509.MarshalPKCS8PrivateKey(sk)
	if err != nil {
		t.Fatal(err)
	}
	pkDER, err := x509.MarshalPKIXPublicKey(pk)
	if err != nil {
		t.Fatal(err)
	}
	priv, pub = filepath.Join(dir, name+".pem"), filepath.Join(dir, name+".pub.pem")
	if err := os.WriteFile(priv, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: skDER}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(pub, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pkDER}), 0o600); err != nil {
		t.Fatal(err)
	}
	return priv, pub
}

// backup verify exits 0 for a whole, signed backup and 1, naming what
// failed, for a tampered one, a cut one and a signature by another key.
func TestFaultBackupVerify(t *testing.T) {
	t.Parallel()
	s := newSite(t.TempDir())
	priv, pub := writeKeys(t, s.dir, "signing")
	_, otherPub := writeKeys(t, s.dir, "other")
	env := s.env().with("PROGRESSDB_AUDIT_SIGNING_KEY", priv)
	if p := runCLI(t, env, "seed", "--threads", "20", "--messages", "5"); p.code != 0 {
		t.Fatalf("seed: %d\n%s", p.code, p.output())
	}
	good := filepath.Join(s.dir, "good.tar")
	if p := runCLI(t, env, "backup", "create", "--out", good); p.code != 0 {
		t.Fatalf("backup create: %d\n%s", p.code, p.output())
	}
	plain := s.env() // no signing key configured
	if p := runCLI(t, plain, "backup", "verify", good, "--public-key", pub); p.code != 0 {
		t.Fatalf("verify a good backup: %d\n%s", p.code, p.output())
	}
	data, err := os.ReadFile(good)
	if err != nil {
		t.Fatal(err)
	}
	flipped := bytes.Clone(data)
	flipped[len(flipped)/2] ^= 0x20
	edited := bytes.Replace(bytes.Clone(data), []byte(`"threads":20`), []byte(`"threads":21`), 1)
	cases := []struct {
		name string
		data []byte
		args []string
		want string
	}{
		{"other key", data, []string{"--public-key", otherPub}, "signature does not verify"},
		{"byte flipped", flipped, []string{"--public-key", pub}, "problem:"},
		{"manifest edited", edited, []string{"--public-key", pub}, "signature does not verify"},
		{"cut short", data[:len(data)/3], []string{"--public-key", pub}, "cut short"},
	}
	for _, c := range cases {
		path := filepath.Join(s.dir, strings.ReplaceAll(c.name, " ", "-")+".tar")
		if err := os.WriteFile(path, c.data, 0o600); err != nil {
			t.Fatal(err)
		}
		p := runCLI(t, plain, append([]string{"backup", "verify", path}, c.args...)...)
		if p.code != 1 || !strings.Contains(p.stdout.String(), c.want) {
			t.Errorf("%s: exit %d, want 1 naming %q\n%s", c.name, p.code, c.want, p.output())
		}
	}
	// Without --public-key, the configured signing key's public half is used.
	if p := runCLI(t, env, "backup", "verify", good, "--json"); p.code != 0 || !strings.Contains(p.stdout.String(), `"signature_checked": true`) {
		t.Fatalf("verify with the configured key: %d\n%s", p.code, p.output())
	}
}
