package cli

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2"

	"github.com/progressdb/progressdb/server/internal/app"
	"github.com/progressdb/progressdb/server/pkg/config"
	"github.com/progressdb/progressdb/server/pkg/keystore"
	"github.com/progressdb/progressdb/server/pkg/store"
	"github.com/progressdb/progressdb/server/pkg/store/storetest"
)

// testKEK is a local KEK URL of 32 bytes of fill.
func testKEK(fill byte) string {
	return "base64key://" + base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{fill}, 32))
}

// sealedHarness is a harness whose environment seals (PROGRESSDB_KEK,
// PROGRESSDB_KEYSTORE_PATH beside the database), with its audit trail
// outside the database.
func sealedHarness(t *testing.T, kek string, extra ...string) (*harness, string) {
	t.Helper()
	h := newHarness(t, extra...)
	root := filepath.Dir(h.dbPath)
	ksPath := filepath.Join(root, "keys")
	h.environ = append(h.environ, "PROGRESSDB_KEK="+kek, "PROGRESSDB_KEYSTORE_PATH="+ksPath,
		"PROGRESSDB_RETENTION_AUDIT_PATH="+filepath.Join(root, "audit"))
	return h, ksPath
}

// withEnv returns environ with name set to value.
func withEnv(environ []string, name, value string) []string {
	out := []string{}
	for _, kv := range environ {
		if !strings.HasPrefix(kv, name+"=") {
			out = append(out, kv)
		}
	}
	return append(out, name+"="+value)
}

// openSealed opens the harness's database with its key store, as the
// commands do.
func openSealed(t *testing.T, environ []string) *store.Store {
	t.Helper()
	cfg, err := config.Load(environ)
	if err != nil {
		t.Fatal(err)
	}
	st, err := app.OpenStore(context.Background(), cfg, nil, store.Options{}, app.MaySeal)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// withBlobs pairs st with its blob store, as the commands do; the blob
// store closes with the test.
func withBlobs(t *testing.T, cfg config.Config, st *store.Store) app.Stores {
	t.Helper()
	sts, err := app.WithBlobs(context.Background(), cfg, st)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sts.Blobs.Close() })
	return sts
}

// writeSealed writes threads t0..t(n-1), each with two messages by two
// authors, whose bodies are markers; it returns body by message ID.
func writeSealed(t *testing.T, environ []string, n int) map[string]string {
	t.Helper()
	ctx := context.Background()
	st := openSealed(t, environ)
	defer st.Close()
	bodies := map[string]string{}
	for i := range n {
		tid := fmt.Sprintf("t%d", i)
		if _, err := st.CreateThread(ctx, store.Thread{ID: tid, Title: "title-marker-" + tid, Author: "alice"}); err != nil {
			t.Fatal(err)
		}
		for j, author := range []string{"alice", "bob"} {
			mid := fmt.Sprintf("%s-m%d", tid, j)
			body := "body-marker-" + mid
			raw, _ := json.Marshal(body)
			if _, err := st.AppendMessage(ctx, tid, store.Message{ID: mid, Author: author, Body: raw}); err != nil {
				t.Fatal(err)
			}
			bodies[mid] = body
		}
	}
	return bodies
}

// readBodies reads every message of bodies' threads through a store with
// the environment's key store: the body, or "" when unreadable.
func readBodies(t *testing.T, environ []string, bodies map[string]string) map[string]string {
	t.Helper()
	st := openSealed(t, environ)
	defer st.Close()
	got := map[string]string{}
	for mid := range bodies {
		tid, _, _ := strings.Cut(mid, "-")
		m, err := st.GetMessage(context.Background(), tid, mid)
		if err != nil {
			t.Fatalf("get %s: %v", mid, err)
		}
		var body string
		if !m.Unreadable {
			_ = json.Unmarshal(m.Body, &body)
		}
		got[mid] = body
	}
	return got
}

// wrappedValues returns every value the KEK wrapped in the key store at
// dir (data keys, secrets, the check value), without the generation
// byte: the keeper's own ciphertext, random, so found nowhere else.
func wrappedValues(t *testing.T, dir string) []string {
	t.Helper()
	db, err := pebble.Open(dir, &pebble.Options{ReadOnly: true, Logger: storetest.Quiet{}})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	it, err := db.NewIter(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer it.Close()
	var out []string
	for valid := it.First(); valid; valid = it.Next() {
		k, v := string(it.Key()), it.Value()
		switch {
		case strings.HasPrefix(k, "k:") && strings.Contains(k, ":k:") && len(v) > 34:
			out = append(out, string(v[33:]))
		case strings.HasPrefix(k, "ks:secret:") || k == "ks:kek":
			out = append(out, string(v[1:]))
		}
	}
	return out
}

// After keys rotate-kek the old KEK opens nothing (the key store refuses
// it, so a server started with it exits), the new one reads every sealed
// record, and no value the old KEK wrapped is left in any file of the key
// store (tables decoded, logs read raw). The command prints no key; run
// again it finds the rotation done.
func TestKeysRotateKEK(t *testing.T) {
	oldKEK, newKEK := testKEK(1), testKEK(2)
	h, ksPath := sealedHarness(t, oldKEK)
	bodies := writeSealed(t, h.environ, 5)
	old := wrappedValues(t, ksPath)
	if len(old) != 5*2+3 {
		t.Fatalf("%d wrapped values before the rotation, want 13 (10 keys, 2 secrets, the check)", len(old))
	}
	rep, err := storetest.Scan(ksPath, old)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Found()) != len(old) {
		t.Fatalf("the scan finds %d of the %d wrapped values before the rotation: it could not see them go", len(rep.Found()), len(old))
	}

	// The new key comes from a file, never from argv (ps, shell history).
	newFile := writeSecretFile(t, newKEK+"\n", 0o600)
	code, out, errOut := h.run("keys", "rotate-kek", "--to-file", newFile, "--json")
	if code != exitOK {
		t.Fatalf("rotate-kek: exit %d\n%s\n%s", code, out, errOut)
	}
	var r rotateReport
	if err := json.Unmarshal([]byte(out), &r); err != nil || r.Rewrapped != 12 {
		t.Fatalf("report %+v (%v), want 12 values re-wrapped:\n%s", r, err, out)
	}
	for _, k := range []string{oldKEK, newKEK, strings.TrimPrefix(oldKEK, "base64key://"), strings.TrimPrefix(newKEK, "base64key://")} {
		if strings.Contains(out+errOut, k) {
			t.Fatal("the output holds a KEK")
		}
	}

	rep, err = storetest.Scan(ksPath, old)
	if err != nil {
		t.Fatal(err)
	}
	if found := rep.Found(); len(found) > 0 {
		t.Fatalf("%d values wrapped by the old KEK are still in the key store's files: %v", len(found), rep[found[0]])
	}
	newEnv := withEnv(h.environ, "PROGRESSDB_KEK", newKEK)
	for mid, body := range readBodies(t, newEnv, bodies) {
		if body != bodies[mid] {
			t.Fatalf("%s reads %q with the new KEK, want %q", mid, body, bodies[mid])
		}
	}
	k, err := keystore.OpenKEK(context.Background(), oldKEK)
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	if _, err := keystore.Open(context.Background(), ksPath, keystore.Options{Keeper: k}); !errors.Is(err, keystore.ErrWrongKEK) {
		t.Fatalf("the old KEK opens the key store after the rotation: %v", err)
	}
	code, _, errOut = h.run("thread", "get", "t0")
	if code != exitFailed || !strings.Contains(errOut, "KEK") {
		t.Fatalf("a command with the old KEK after the rotation: exit %d, stderr %q", code, errOut)
	}
	// The message sends the operator to the KEK rotated to, not to "the
	// KEK this key store was made with", which is the old one.
	if !strings.Contains(errOut, "rotated to") || strings.Contains(errOut, "made with") {
		t.Errorf("the old KEK after a rotation: %q, want the KEK rotated to named", errOut)
	}

	// Again with the old KEK in the environment, the new one on standard
	// input: already done, nothing to re-wrap.
	code, out, errOut = h.runStdin(strings.NewReader(newKEK+"\n"), "keys", "rotate-kek", "--to-file", "-", "--json")
	if err := json.Unmarshal([]byte(out), &r); code != exitOK || err != nil || !r.AlreadyDone || r.Rewrapped != 0 {
		t.Fatalf("rotate-kek again: exit %d, %+v\n%s", code, r, errOut)
	}
}

// Every error of rotate-kek's flags and settings exits 2 naming it, and
// touches nothing.
func TestKeysRotateKEKUsage(t *testing.T) {
	h, _ := sealedHarness(t, testKEK(1))
	h.createDB()
	newFile := writeSecretFile(t, testKEK(2), 0o600)
	for _, tt := range []struct {
		environ []string
		args    []string
		want    string
	}{
		{h.environ, []string{}, "--to-file FILE"},
		{h.environ, []string{"--to", ""}, "--to-file FILE"},
		{h.environ, []string{"--to", testKEK(2)}, "--to takes a KMS key URL only"},
		{h.environ, []string{"--to", "nonsense"}, "not a usable KEK URL"},
		{h.environ, []string{"--to-file", writeSecretFile(t, "base64key://c2hvcnQ=", 0o600)}, "not a usable KEK URL"},
		{h.environ, []string{"--to-file", filepath.Join(t.TempDir(), "absent")}, "--to-file"},
		{h.environ, []string{"--to-file", "-"}, "standard input holds no KEK URL"},
		{h.environ, []string{"--to-file", newFile, "--to", "awskms://alias/x"}, "both set"},
		{h.environ, []string{"--to-file", writeSecretFile(t, testKEK(1), 0o600)}, "the new KEK is the current one"},
		{h.environ, []string{"--to-file", newFile, "extra"}, `unexpected argument "extra"`},
		{withEnv(h.environ, "PROGRESSDB_KEK", ""), []string{"--to-file", newFile}, "PROGRESSDB_KEK"},
		{withEnv(h.environ, "PROGRESSDB_KEK", "base64key://"), []string{"--to-file", newFile}, "PROGRESSDB_KEK"},
		{withEnv(h.environ, "PROGRESSDB_KEYSTORE_PATH", ""), []string{"--to-file", newFile}, "PROGRESSDB_KEYSTORE_PATH"},
		{withEnv(h.environ, "PROGRESSDB_KEYSTORE_PATH", filepath.Join(h.dbPath, "keys")), []string{"--to-file", newFile}, "PROGRESSDB_KEYSTORE_PATH"},
	} {
		hh := *h
		hh.environ = tt.environ
		code, out, errOut := hh.run(append([]string{"keys", "rotate-kek"}, tt.args...)...)
		if code != exitUsage || !strings.Contains(errOut, tt.want) {
			t.Errorf("%v: exit %d, stderr %q, want 2 naming %s (stdout %q)", tt.args, code, errOut, tt.want, out)
		}
		if strings.Contains(errOut, strings.TrimPrefix(testKEK(1), "base64key://")) {
			t.Errorf("%v: stderr holds the KEK", tt.args)
		}
	}
}

// Off a terminal, keys rotate-kek logs where it stands: the values to
// re-wrap, a summary with done of the total and the rate, then each step
// of its erase. Before, nothing was said until it ended.
func TestKeysRotateKEKProgress(t *testing.T) {
	h, _ := sealedHarness(t, testKEK(1))
	writeSealed(t, h.environ, 3)
	h.environ = withEnv(h.environ, "PROGRESSDB_LOG_LEVEL", "info")
	code, out, errOut := h.runStdin(strings.NewReader(testKEK(2)+"\n"), "keys", "rotate-kek", "--to-file", "-")
	if code != exitOK {
		t.Fatalf("rotate-kek: exit %d\n%s\n%s", code, out, errOut)
	}
	var first, last, erasing bool
	for _, l := range strings.Split(strings.TrimSpace(errOut), "\n") {
		var rec map[string]any
		if err := json.Unmarshal([]byte(l), &rec); err != nil {
			t.Fatalf("not a JSON log line: %q", l)
		}
		switch rec["msg"] {
		case "keys_rotate_progress":
			first = first || (rec["done"] == 0.0 && rec["total"] == 8.0)
			last = last || (rec["done"] == 8.0 && rec["total"] == 8.0 && rec["rate_per_sec"] != nil)
		case "keys_rotate_erase_progress":
			erasing = erasing || rec["step"] == "compacting"
		}
	}
	if !first || !last || !erasing {
		t.Fatalf("0 of 8 %t, 8 of 8 %t, the erase's compaction %t:\n%s", first, last, erasing, errOut)
	}
}
