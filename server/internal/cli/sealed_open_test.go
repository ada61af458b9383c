package cli

import (
	"bytes"
	"context"
	"encoding/base64"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
)

// runBounded runs the built binary with environ for at most 30s: a serve
// that should have refused to start is killed (exit -1) instead of
// hanging the test.
func runBounded(t *testing.T, environ []string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return runCommand(t, exec.CommandContext(ctx, binary(t), args...), environ)
}

// sealedEnv is the environment of a database at dir/name sealed under the
// key store dir/name-keys with kek.
func sealedEnv(dir, name, kek string) []string {
	return []string{"PROGRESSDB_DB_PATH=" + filepath.Join(dir, name), "PROGRESSDB_ADDR=127.0.0.1:0",
		"PROGRESSDB_KEK=base64key://" + kek, "PROGRESSDB_KEYSTORE_PATH=" + filepath.Join(dir, name+"-keys")}
}

// withoutVar is environ without the variable name, or with it set to value.
func withVar(environ []string, name, value string) []string {
	var out []string
	for _, kv := range environ {
		if !strings.HasPrefix(kv, name+"=") {
			out = append(out, kv)
		}
	}
	if value != "" {
		out = append(out, name+"="+value)
	}
	return out
}

// A sealed database opens only with its KEK and its own key store (spec
// §12): serve and the commands exit 2 naming PROGRESSDB_KEK when it is
// unset, and PROGRESSDB_KEYSTORE_PATH when the key store is missing,
// empty or another database's, creating nothing; with both it opens.
func TestSealedDatabaseRefusesWithoutItsKEKAndKeyStore(t *testing.T) {
	dir := t.TempDir()
	kek := base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{0x42}, 32))
	env := sealedEnv(dir, "data", kek)
	other := sealedEnv(dir, "other", kek)
	for _, e := range [][]string{env, other} {
		if code, out, errOut := runBinary(t, e, "seed", "--threads", "2", "--messages", "1"); code != exitOK {
			t.Fatalf("seed: exit %d\n%s%s", code, out, errOut)
		}
	}
	empty := filepath.Join(dir, "empty")
	if err := os.Mkdir(empty, 0o700); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "missing")
	for _, tt := range []struct {
		name, names string
		env         []string
	}{
		{"no KEK", "PROGRESSDB_KEK", withVar(withVar(env, "PROGRESSDB_KEK", ""), "PROGRESSDB_KEYSTORE_PATH", "")},
		{"no KEK, key store set", "PROGRESSDB_KEK", withVar(env, "PROGRESSDB_KEK", "")},
		{"key store missing", "PROGRESSDB_KEYSTORE_PATH", withVar(env, "PROGRESSDB_KEYSTORE_PATH", missing)},
		{"key store empty", "PROGRESSDB_KEYSTORE_PATH", withVar(env, "PROGRESSDB_KEYSTORE_PATH", empty)},
		{"another database's key store", "PROGRESSDB_KEYSTORE_PATH", withVar(env, "PROGRESSDB_KEYSTORE_PATH", filepath.Join(dir, "other-keys"))},
	} {
		for _, cmd := range [][]string{{"serve"}, {"retention", "run"}, {"backup", "create", "--out", filepath.Join(dir, "b.tar")}} {
			code, out, errOut := runBounded(t, tt.env, cmd...)
			if code != exitUsage || !strings.Contains(errOut, tt.names) {
				t.Errorf("%s, %s: exit %d, stderr %q; want 2 naming %s", tt.name, cmd[0], code, errOut, tt.names)
			}
			if strings.Contains(out+errOut, kek) {
				t.Errorf("%s, %s: the output shows the key", tt.name, cmd[0])
			}
		}
		if _, err := os.Stat(missing); !os.IsNotExist(err) {
			t.Errorf("%s: the missing key store was created (%v)", tt.name, err)
		}
		if ents, _ := os.ReadDir(empty); len(ents) != 0 {
			t.Errorf("%s: the empty key-store folder was written to: %v", tt.name, ents)
		}
		if _, err := os.Stat(filepath.Join(dir, "b.tar")); err == nil {
			t.Fatalf("%s: a backup was written", tt.name)
		}
	}
	// With its KEK and its own key store it opens.
	if code, out, errOut := runBounded(t, env, "retention", "run"); code != exitOK {
		t.Fatalf("retention run with the KEK and key store: exit %d\n%s%s", code, out, errOut)
	}
}

// A database in a format newer than the binary's is refused before
// anything is read or written: exit 2 naming both formats; version names
// the formats the binary reads.
func TestNewerDatabaseFormatIsRefused(t *testing.T) {
	dir := t.TempDir()
	env := []string{"PROGRESSDB_DB_PATH=" + filepath.Join(dir, "data"), "PROGRESSDB_ADDR=127.0.0.1:0"}
	if code, out, errOut := runBinary(t, env, "seed", "--threads", "1", "--messages", "1"); code != exitOK {
		t.Fatalf("seed: exit %d\n%s%s", code, out, errOut)
	}
	db, err := pebble.Open(filepath.Join(dir, "data"), &pebble.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Set([]byte("sys:format"), []byte("99"), pebble.Sync); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	for _, cmd := range [][]string{{"serve"}, {"retention", "run"}} {
		code, _, errOut := runBounded(t, env, cmd...)
		if code != exitUsage || !strings.Contains(errOut, "PROGRESSDB_DB_PATH") ||
			!strings.Contains(errOut, `format "99"`) || !strings.Contains(errOut, "formats 1 to 3") {
			t.Errorf("%s: exit %d, stderr %q; want 2 naming format 99 and this binary's 1 to 3", cmd[0], code, errOut)
		}
	}
	// The formats the binary reads are what version says.
	if code, out, _ := runBinary(t, env, "version"); code != exitOK || !strings.Contains(out, "formats: database 1 to 3, key store 1 to 2") {
		t.Errorf("version: exit %d\n%s; want the formats it reads", code, out)
	}
}

// keys encrypt-existing seals the database it seals: its key store is
// created bound to it, and from then on the database opens only with the
// KEK and that key store.
func TestEncryptExistingBindsItsKeyStore(t *testing.T) {
	dir := t.TempDir()
	kek := base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{0x42}, 32))
	env := sealedEnv(dir, "data", kek)
	plain := withVar(withVar(env, "PROGRESSDB_KEK", ""), "PROGRESSDB_KEYSTORE_PATH", "")
	if code, out, errOut := runBinary(t, plain, "seed", "--threads", "2", "--messages", "1"); code != exitOK {
		t.Fatalf("seed: exit %d\n%s%s", code, out, errOut)
	}
	if code, out, errOut := runBinary(t, env, "keys", "encrypt-existing"); code != exitOK {
		t.Fatalf("encrypt-existing: exit %d\n%s%s", code, out, errOut)
	}
	if code, _, errOut := runBounded(t, plain, "retention", "run"); code != exitUsage || !strings.Contains(errOut, "PROGRESSDB_KEK") {
		t.Errorf("without the KEK after encrypt-existing: exit %d, stderr %q; want 2 naming PROGRESSDB_KEK", code, errOut)
	}
	if code, out, errOut := runBounded(t, env, "retention", "run"); code != exitOK {
		t.Errorf("with the KEK and its key store: exit %d\n%s%s", code, out, errOut)
	}
}
