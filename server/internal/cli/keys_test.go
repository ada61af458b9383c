package cli

import (
	"context"
	"encoding/base64"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/progressdb/progressdb/server/pkg/keystore"
)

// generate-kek prints one base64key:// URL of 32 fresh random bytes and
// nothing else, so that $(progressdb keys generate-kek) is the key; the
// keeper it names opens; two runs never print the same key.
func TestKeysGenerateKEK(t *testing.T) {
	seen := map[string]bool{}
	for range 2 {
		code, out, errOut := runBinary(t, nil, "keys", "generate-kek")
		if code != exitOK || errOut != "" {
			t.Fatalf("exit %d, stderr %q", code, errOut)
		}
		url, ok := strings.CutSuffix(out, "\n")
		if !ok || strings.ContainsAny(url, "\n \t") {
			t.Fatalf("stdout is not one line holding the URL alone: %q", out)
		}
		key, ok := strings.CutPrefix(url, "base64key://")
		if !ok {
			t.Fatalf("not a base64key:// URL: %q", url)
		}
		raw, err := base64.StdEncoding.DecodeString(key)
		if err != nil || len(raw) != 32 {
			t.Fatalf("key is not the standard base64 of 32 bytes: %d bytes, %v", len(raw), err)
		}
		if _, err := keystore.OpenKEK(context.Background(), url); err != nil {
			t.Fatalf("the printed URL does not open: %v", err)
		}
		if seen[url] {
			t.Fatal("two runs printed the same key")
		}
		seen[url] = true
	}
	code, out, errOut := runBinary(t, nil, "keys", "generate-kek", "extra")
	if code != exitUsage || out != "" || !strings.Contains(errOut, `unexpected argument "extra"`) {
		t.Fatalf("with an argument: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
}

// generate-kek --out writes the KEK to a new file readable by its owner
// only, which serve reads with PROGRESSDB_KEK_FILE, shows no key on its
// output, and never overwrites a file: it may hold the only copy of a key.
func TestKeysGenerateKEKOut(t *testing.T) {
	out := filepath.Join(t.TempDir(), "kek")
	code, stdout, errOut := runBinary(t, nil, "keys", "generate-kek", "--out", out)
	if code != exitOK || !strings.Contains(stdout, "PROGRESSDB_KEK_FILE="+out) {
		t.Fatalf("exit %d\nstdout %q\nstderr %q", code, stdout, errOut)
	}
	st, err := os.Stat(out)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("the KEK file: %v, mode %v, want 0600", err, st.Mode())
	}
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	url := strings.TrimSuffix(string(data), "\n")
	if _, err := keystore.OpenKEK(context.Background(), url); err != nil {
		t.Fatalf("the file's URL does not open: %v", err)
	}
	if strings.Contains(stdout+errOut, strings.TrimPrefix(url, "base64key://")) {
		t.Fatal("the output shows the key")
	}
	code, _, errOut = runBinary(t, nil, "keys", "generate-kek", "--out", out)
	if again, _ := os.ReadFile(out); code != exitUsage || !strings.Contains(errOut, "never overwritten") || string(again) != string(data) {
		t.Fatalf("a second run onto the same file: exit %d, stderr %q, file changed %v", code, errOut, string(again) != string(data))
	}
}
