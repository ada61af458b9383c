package backup

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/progressdb/progressdb/server/pkg/keystore"
	"github.com/progressdb/progressdb/server/pkg/store"
)

func testKeyStore(t *testing.T, dir, dataPath string) *keystore.KeyStore {
	t.Helper()
	ctx := context.Background()
	k, err := keystore.OpenKEK(ctx, "base64key://"+base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{7}, 32)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k.Close() })
	ks, err := keystore.Open(ctx, dir, keystore.Options{Keeper: k, DataPath: dataPath})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ks.Close() })
	return ks
}

// A backup of a database with a key store carries the key store of its
// moment under keystore/: listed in the manifest, verified, restored into
// a folder of its own where the same KEK opens what the original sealed;
// its staging copy is gone from the key store's folder. A restore that
// gives the key store no folder does not verify and leaves nothing.
func TestBackupCarriesTheKeyStore(t *testing.T) {
	w := newWorld(t, true)
	w.thread("t1", 2)
	ctx := context.Background()
	ksPath := filepath.Join(w.dir, "keys")
	ks := testKeyStore(t, ksPath, w.dbPath)
	num, aead, err := ks.Key(ctx, "t1", "alice")
	if err != nil {
		t.Fatal(err)
	}
	sealed := aead.Seal(nil, nil, []byte("secret-sealed"), []byte("t1"))
	c, err := NewCreator(Options{Store: w.st, KeyStore: ks, Hold: w.runner, SigningKey: w.key, Version: "test"})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(w.dir, "b.tar.zst")
	m, _, err := c.CreateFile(ctx, path, false)
	if err != nil {
		t.Fatal(err)
	}
	var dbFiles, ksFiles int
	for _, f := range m.Files {
		switch {
		case strings.HasPrefix(f.Name, "db/"):
			dbFiles++
		case strings.HasPrefix(f.Name, "keystore/"):
			ksFiles++
		}
	}
	if !m.Sealed || dbFiles == 0 || ksFiles == 0 || dbFiles+ksFiles != len(m.Files) {
		t.Fatalf("manifest: sealed %t, %d db files, %d key store files of %d", m.Sealed, dbFiles, ksFiles, len(m.Files))
	}
	entries, err := os.ReadDir(ksPath)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.IsDir() {
			t.Errorf("the key store's folder keeps %s after the backup", e.Name())
		}
	}
	if rep, err := Verify(ctx, path, w.key.Public().(ed25519.PublicKey), w.dir); err != nil || !rep.Valid {
		t.Fatalf("verify: %v %v", err, rep.Problems)
	}

	// Extract (a shard's move) has no folder for keys: refused, nothing left.
	plainDir := filepath.Join(w.dir, "nokeys")
	if rep, err := Extract(ctx, path, plainDir, nil); err != nil || rep.Valid || !strings.Contains(strings.Join(rep.Problems, ";"), "key store") {
		t.Fatalf("extract without a key store folder: %v valid=%t %v", err, rep.Valid, rep.Problems)
	}
	if _, err := os.Stat(plainDir); !os.IsNotExist(err) {
		t.Fatalf("a refused extract left %s: %v", plainDir, err)
	}

	dbDir, ksDir := filepath.Join(w.dir, "restored"), filepath.Join(w.dir, "restored-keys")
	if rep, err := Unpack(ctx, path, mkdir(t, dbDir), ksDir, nil); err != nil || !rep.Valid {
		t.Fatalf("unpack: %v %v", err, rep.Problems)
	}
	ks2 := testKeyStore(t, ksDir, dbDir)
	a2, err := ks2.KeyByNumber(ctx, "t1", num)
	if err != nil {
		t.Fatal(err)
	}
	if plain, err := a2.Open(nil, nil, sealed, []byte("t1")); err != nil || string(plain) != "secret-sealed" {
		t.Fatalf("the restored key store does not open what the original sealed: %v", err)
	}
}

// A backup without a key store is what it was before sealing existed: no
// "sealed" member, only db/ files.
func TestPlainBackupHasNoKeyStore(t *testing.T) {
	w := newWorld(t, false)
	w.thread("t1", 1)
	path := filepath.Join(w.dir, "b.tar")
	m, _, err := w.creator.CreateFile(context.Background(), path, false)
	if err != nil {
		t.Fatal(err)
	}
	line, err := m.encode(nil)
	if err != nil {
		t.Fatal(err)
	}
	if m.Sealed || bytes.Contains(line, []byte(`"sealed"`)) || bytes.Contains(line, []byte("keystore/")) {
		t.Fatalf("a plain backup's manifest names a key store: %s", line)
	}
}

func mkdir(t *testing.T, dir string) string {
	t.Helper()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	return dir
}

// A manifest's key store files come with "sealed", and "sealed" with key
// store files; no name leaves its two folders.
func TestManifestKeyStoreEntries(t *testing.T) {
	file := func(name string) string {
		return `{"name":"` + name + `","size":1,"sha256":"` + strings.Repeat("0", 64) + `"}`
	}
	for _, tt := range []struct {
		sealed string
		files  []string
		ok     bool
	}{
		{`false`, []string{file("db/a")}, true},
		{`true`, []string{file("db/a"), file("keystore/MANIFEST-000001")}, true},
		{`false`, []string{file("db/a"), file("keystore/MANIFEST-000001")}, false},
		{`true`, []string{file("db/a")}, false},
		{`true`, []string{file("db/a"), file("keystore/../x")}, false},
		{`true`, []string{file("db/a"), file("keystore/")}, false},
		{`true`, []string{file("db/a"), file("other/x")}, false},
	} {
		raw := `{"format":1,"backup_id":"b","sealed":` + tt.sealed + `,"files":[` + strings.Join(tt.files, ",") + `]}`
		if _, err := decodeManifest([]byte(raw)); (err == nil) != tt.ok {
			t.Errorf("%s: err %v, want ok=%t", raw, err, tt.ok)
		}
	}
}

// A restore looks at the key store's folder only when the backup holds a
// key store: a plain backup restores beside a live key store, untouched;
// a sealed one into a folder that is not empty is refused (ErrNotEmpty)
// and leaves both folders as they were.
func TestExtractKeyStoreFolder(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t, false)
	w.thread("t1", 1)
	live := mkdir(t, filepath.Join(w.dir, "live-keys"))
	if err := os.WriteFile(filepath.Join(live, "KEEP"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	plain := filepath.Join(w.dir, "plain.tar")
	if _, _, err := w.creator.CreateFile(ctx, plain, false); err != nil {
		t.Fatal(err)
	}
	db1 := filepath.Join(w.dir, "r1")
	if rep, err := ExtractPending(ctx, plain, db1, live, nil, store.RestoreState{}); err != nil || !rep.Valid {
		t.Fatalf("plain backup beside a live key store: %v %v", err, rep.Problems)
	}

	ks := testKeyStore(t, filepath.Join(w.dir, "keys"), w.dbPath)
	c, err := NewCreator(Options{Store: w.st, KeyStore: ks, Hold: w.runner, Version: "test"})
	if err != nil {
		t.Fatal(err)
	}
	sealed := filepath.Join(w.dir, "sealed.tar")
	if _, _, err := c.CreateFile(ctx, sealed, false); err != nil {
		t.Fatal(err)
	}
	db2 := filepath.Join(w.dir, "r2")
	if _, err := ExtractPending(ctx, sealed, db2, live, nil, store.RestoreState{}); !errors.Is(err, ErrNotEmpty) {
		t.Fatalf("sealed backup into a non-empty key store folder: %v, want ErrNotEmpty", err)
	}
	if _, err := os.Stat(db2); !os.IsNotExist(err) {
		t.Fatalf("the refused restore left %s: %v", db2, err)
	}
	if entries, _ := os.ReadDir(live); len(entries) != 1 {
		t.Fatalf("the refused restore touched the key store folder: %v", entries)
	}
}
