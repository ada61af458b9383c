package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/progressdb/progressdb/server/internal/app"
	"github.com/progressdb/progressdb/server/internal/backup"
	"github.com/progressdb/progressdb/server/internal/retention"
	"github.com/progressdb/progressdb/server/pkg/config"
	"github.com/progressdb/progressdb/server/pkg/keystore"
	"github.com/progressdb/progressdb/server/pkg/store"
	"github.com/progressdb/progressdb/server/pkg/store/storetest"
)

// keyValues returns the wrapped data keys of refs as the key store at dir
// stores them (the keeper's ciphertext after the generation byte): what a
// reader of its files would need, with the KEK, to open what they sealed.
func keyValues(t *testing.T, dir string, refs []keystore.KeyRef) []string {
	t.Helper()
	db, err := pebble.Open(dir, &pebble.Options{ReadOnly: true, Logger: storetest.Quiet{}})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var out []string
	for _, ref := range refs {
		v, closer, err := db.Get([]byte("k:" + ref.Thread + ":k:" + pad10(ref.Number)))
		if err != nil {
			t.Fatalf("key %v: %v", ref, err)
		}
		out = append(out, string(v[33:]))
		closer.Close()
	}
	return out
}

func pad10(n uint32) string {
	s := strings.Repeat("0", 10) + itoa(n)
	return s[len(s)-10:]
}

func itoa(n uint32) string {
	b, _ := json.Marshal(n)
	return string(b)
}

// keysOf lists the key references of every author in threads (all
// threads when nil) and of the authors named, from the key store.
func keysOf(t *testing.T, environ []string, authors ...string) []keystore.KeyRef {
	t.Helper()
	cfg, err := config.Load(environ)
	if err != nil {
		t.Fatal(err)
	}
	st, err := app.OpenStore(context.Background(), cfg, nil, store.Options{}, app.KeepPlain)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ks := app.KeyStore(st)
	var refs []keystore.KeyRef
	for _, a := range authors {
		r, err := ks.AuthorKeys(context.Background(), a)
		if err != nil {
			t.Fatal(err)
		}
		refs = append(refs, r...)
	}
	return refs
}

// purgeAndErase soft-deletes thread tid 40 days ago, runs retention (the
// default 30-day period purges it), then erases author through a subject
// erasure, all on the live database and key store.
func purgeAndErase(t *testing.T, h *harness, tid, author string) {
	t.Helper()
	ctx := context.Background()
	cfg, err := config.Load(h.environ)
	if err != nil {
		t.Fatal(err)
	}
	past := func() time.Time { return time.Now().Add(-40 * 24 * time.Hour) }
	st, err := app.OpenStore(ctx, cfg, nil, store.Options{Now: past}, app.KeepPlain)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.DeleteThread(ctx, tid); err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	h.mustRun("retention", "run")

	// The erasure's own run may be cut by Close: the next run finishes
	// every pending erasure first, without a wait here.
	st = openSealed(t, h.environ)
	svc, err := app.NewRetention(withBlobs(t, cfg, st), cfg.Retention, nil, prometheus.NewRegistry(), false, nil)
	if err != nil {
		t.Fatal(err)
	}
	acc, err := svc.Request(ctx, author)
	if err != nil {
		t.Fatal(err)
	}
	svc.Close()
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	h.mustRun("retention", "run")
	st = openSealed(t, h.environ)
	defer st.Close()
	svc, err = app.NewRetention(withBlobs(t, cfg, st), cfg.Retention, nil, prometheus.NewRegistry(), false, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Close()
	es, err := svc.Erasure(ctx, acc.ErasureID)
	if err != nil || es.Status != retention.ErasureCompleted {
		t.Fatalf("erasure: %+v %v", es, err)
	}
}

// copyDir copies the regular files of a closed database folder.
func copyDir(t *testing.T, src, dst string) {
	t.Helper()
	err := filepath.WalkDir(src, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		target := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(target, 0o700)
		}
		in, err := os.Open(p)
		if err != nil {
			return err
		}
		defer in.Close()
		out, err := os.OpenFile(target, os.O_CREATE|os.O_WRONLY|os.O_EXCL, 0o600)
		if err != nil {
			return err
		}
		if _, err := io.Copy(out, in); err != nil {
			out.Close()
			return err
		}
		return out.Close()
	})
	if err != nil {
		t.Fatal(err)
	}
}

// A backup taken before a thread purge and a subject erasure, restored
// after them, has both replayed on its own key store: the purged thread
// and the erased author's messages are gone, the others read, and none of
// the destroyed keys is in any file of the restored key store (tables
// decoded, logs read raw), though all were in the backup's.
func TestRestoreReplaysShreddingAndErasure(t *testing.T) {
	t.Parallel()
	h, ksPath := sealedHarness(t, testKEK(3))
	root := filepath.Dir(h.dbPath)
	bodies := writeSealed(t, h.environ, 4)
	archive := filepath.Join(root, "before.tar.zst")
	h.mustRun("backup", "create", "--out", archive)

	// The keys to go: every key of thread t1, and bob's in every thread.
	var doomed []keystore.KeyRef
	for _, ref := range keysOf(t, h.environ, "alice", "bob") {
		if ref.Thread == "t1" {
			doomed = append(doomed, ref)
		}
	}
	for _, ref := range keysOf(t, h.environ, "bob") {
		if ref.Thread != "t1" {
			doomed = append(doomed, ref)
		}
	}
	if len(doomed) != 5 { // t1: alice and bob; t0, t2, t3: bob
		t.Fatalf("%d keys to destroy, want 5", len(doomed))
	}
	needles := keyValues(t, ksPath, doomed)

	purgeAndErase(t, h, "t1", "bob")
	if rep, err := storetest.Scan(ksPath, needles); err != nil || len(rep.Found()) != 0 {
		t.Fatalf("the live key store still holds %d destroyed keys (%v): %v", len(rep.Found()), err, refsFound(doomed, needles, rep))
	}

	dbDir, ksDir := filepath.Join(root, "restored"), filepath.Join(root, "restored-keys")
	code, out, errOut := h.run("restore", archive, "--db", dbDir, "--keystore", ksDir, "--json")
	if code != exitOK {
		t.Fatalf("restore: exit %d\n%s\n%s", code, out, errOut)
	}
	var rep restoreReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil || rep.Replay == nil || !rep.Backup.Sealed || rep.KeyStore != ksDir {
		t.Fatalf("restore report %+v: %v", rep, err)
	}
	// The backup's key store held them all: the restored one, none.
	tmp := t.TempDir()
	ex := filepath.Join(tmp, "db")
	if _, err := unpackForTest(archive, ex, filepath.Join(tmp, "keys")); err != nil {
		t.Fatal(err)
	}
	if r, err := storetest.Scan(filepath.Join(tmp, "keys"), needles); err != nil || len(r.Found()) != len(needles) {
		t.Fatalf("the backup holds %d of the %d keys (%v): the scan could not see them go", len(r.Found()), len(needles), err)
	}
	if r, err := storetest.Scan(ksDir, needles); err != nil || len(r.Found()) != 0 {
		t.Fatalf("%d destroyed keys are in the restored key store's files (%v): %v", len(r.Found()), err, refsFound(doomed, needles, r))
	}

	restoredEnv := withEnv(withEnv(h.environ, "PROGRESSDB_DB_PATH", dbDir), "PROGRESSDB_KEYSTORE_PATH", ksDir)
	st := openSealed(t, restoredEnv)
	defer st.Close()
	for mid, body := range bodies {
		tid, _, _ := strings.Cut(mid, "-")
		m, err := st.GetMessage(context.Background(), tid, mid)
		gone := tid == "t1" || strings.HasSuffix(mid, "-m1") // t1 purged; m1 is bob's
		switch {
		case gone && !errors.Is(err, store.ErrNotFound):
			t.Errorf("%s after the restore: %v (unreadable %t), want it purged", mid, err, m.Unreadable)
		case !gone && (err != nil || m.Unreadable || !strings.Contains(string(m.Body), body)):
			t.Errorf("%s after the restore: %v, body %s, want %q", mid, err, m.Body, body)
		}
	}
}

// unpackForTest unpacks a backup as backup verify does.
func unpackForTest(archive, db, keys string) (bool, error) {
	if err := os.MkdirAll(db, 0o700); err != nil {
		return false, err
	}
	rep, err := backupUnpack(archive, db, keys)
	if err == nil && !rep {
		err = errors.New("the backup does not verify")
	}
	return rep, err
}

// An old copy of DB_PATH served with the current key store shows nothing
// purged or erased since the copy: before its catch-up replay the purged
// thread's and the erased author's records are there, unreadable; after
// it they are gone.
func TestOldDataCopyWithCurrentKeys(t *testing.T) {
	h, _ := sealedHarness(t, testKEK(4))
	root := filepath.Dir(h.dbPath)
	bodies := writeSealed(t, h.environ, 3)
	old := filepath.Join(root, "old-copy")
	copyDir(t, h.dbPath, old)
	purgeAndErase(t, h, "t1", "bob")

	oldEnv := withEnv(h.environ, "PROGRESSDB_DB_PATH", old)
	got := readAll(t, oldEnv, bodies)
	for mid, body := range bodies {
		tid, _, _ := strings.Cut(mid, "-")
		gone := tid == "t1" || strings.HasSuffix(mid, "-m1")
		if gone && got[mid] != "" || !gone && got[mid] != body {
			t.Errorf("%s in the old copy with the current keys reads %q", mid, got[mid])
		}
	}

	// Served, the copy first replays what it lacks.
	cfg, err := config.Load(oldEnv)
	if err != nil {
		t.Fatal(err)
	}
	st := openSealed(t, oldEnv)
	svc, err := app.NewRetention(withBlobs(t, cfg, st), cfg.Retention, nil, prometheus.NewRegistry(), false, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res, err := svc.CatchUp(context.Background(), false); err != nil || res == nil {
		t.Fatalf("catch-up: %+v %v", res, err)
	}
	svc.Close()
	for mid := range bodies {
		tid, _, _ := strings.Cut(mid, "-")
		_, err := st.GetMessage(context.Background(), tid, mid)
		if gone := tid == "t1" || strings.HasSuffix(mid, "-m1"); gone != errors.Is(err, store.ErrNotFound) {
			t.Errorf("%s after the catch-up: %v", mid, err)
		}
	}
	st.Close()
}

// readAll reads every message of bodies (missing or unreadable: "").
func readAll(t *testing.T, environ []string, bodies map[string]string) map[string]string {
	t.Helper()
	st := openSealed(t, environ)
	defer st.Close()
	got := map[string]string{}
	for mid := range bodies {
		tid, _, _ := strings.Cut(mid, "-")
		m, err := st.GetMessage(context.Background(), tid, mid)
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			t.Fatal(err)
		}
		var s string
		if err == nil && !m.Unreadable {
			_ = json.Unmarshal(m.Body, &s)
		}
		got[mid] = s
	}
	return got
}

func backupUnpack(archive, db, keys string) (bool, error) {
	rep, err := backup.Unpack(context.Background(), archive, db, keys, nil)
	return rep.Valid, err
}

// refsFound names the keys whose values a scan found, and where.
func refsFound(refs []keystore.KeyRef, values []string, rep storetest.Report) []string {
	var out []string
	for i, v := range values {
		if hits := rep[v]; len(hits) > 0 {
			out = append(out, fmt.Sprintf("key %d of %s in %v", refs[i].Number, refs[i].Thread, hits))
		}
	}
	return out
}

// A backup of sealed content restored without what its keys need exits 2
// naming the setting or flag, and leaves nothing behind.
func TestRestoreSealedUsage(t *testing.T) {
	h, _ := sealedHarness(t, testKEK(6))
	root := filepath.Dir(h.dbPath)
	writeSealed(t, h.environ, 1)
	archive := filepath.Join(root, "b.tar")
	h.mustRun("backup", "create", "--out", archive)
	full := filepath.Join(root, "full")
	if err := os.MkdirAll(full, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(full, "x"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	plain := withEnv(withEnv(h.environ, "PROGRESSDB_KEK", ""), "PROGRESSDB_KEYSTORE_PATH", "")
	db := filepath.Join(root, "r")
	for _, tt := range []struct {
		environ []string
		args    []string
		want    string
	}{
		{plain, nil, "PROGRESSDB_KEK"},
		{plain, []string{"--keystore", filepath.Join(root, "k")}, "PROGRESSDB_KEK"},
		{h.environ, []string{"--keystore", filepath.Join(db, "keys")}, "--keystore"},
		{h.environ, []string{"--keystore", full}, "--keystore"},
		{h.environ, nil, "--keystore DIR"}, // the live key store is the default
	} {
		hh := *h
		hh.environ = tt.environ
		code, _, errOut := hh.run(append([]string{"restore", archive, "--db", db}, tt.args...)...)
		if code != exitUsage || !strings.Contains(errOut, tt.want) {
			t.Errorf("%v: exit %d, stderr %q, want 2 naming %s", tt.args, code, errOut, tt.want)
		}
		if _, err := os.Stat(db); !os.IsNotExist(err) {
			t.Fatalf("%v: left %s behind: %v", tt.args, db, err)
		}
	}
}
