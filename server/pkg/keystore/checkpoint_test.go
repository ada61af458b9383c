package keystore_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/progressdb/progressdb/server/pkg/keystore"
)

// A checkpoint is a key store of its own that the same KEK opens and that
// Inspect accepts; one left behind by a killed backup is removed by the
// next Open, and RemoveCheckpoint refuses a folder that is not one.
func TestCheckpoint(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	path := filepath.Join(root, "keys")
	k := keeper(t, 1)
	ks := open(t, path, k)
	num, sealed := seal(t, ks, "t1", "alice", "hello")
	dir, err := ks.Checkpoint(ctx, "b1")
	if err != nil {
		t.Fatal(err)
	}
	if filepath.Dir(dir) != path {
		t.Fatalf("staging folder %s is not inside the key store %s", dir, path)
	}
	if err := ks.RemoveCheckpoint(filepath.Join(root, "elsewhere")); err == nil {
		t.Fatal("RemoveCheckpoint took a folder that is no checkpoint")
	}
	copyDir := filepath.Join(root, "copy")
	if err := os.Rename(dir, copyDir); err != nil {
		t.Fatal(err)
	}
	if err := keystore.Inspect(copyDir); err != nil {
		t.Fatalf("inspect the checkpoint: %v", err)
	}
	if err := keystore.Inspect(t.TempDir()); err == nil || !strings.Contains(err.Error(), "open") && !strings.Contains(err.Error(), "not a key store") {
		t.Fatalf("inspect an empty folder: %v", err)
	}
	cp := open(t, copyDir, k)
	if !opens(t, cp, "t1", num, sealed) {
		t.Fatal("the checkpoint does not open what the key store sealed")
	}

	// A staging folder left by a killed backup goes at the next Open.
	left, err := ks.Checkpoint(ctx, "b2")
	if err != nil {
		t.Fatal(err)
	}
	if err := ks.Close(); err != nil {
		t.Fatal(err)
	}
	open(t, path, k)
	if _, err := os.Stat(left); !os.IsNotExist(err) {
		t.Fatalf("the staging folder of a killed backup is still there: %v", err)
	}
}

// DestroyKey destroys one (thread, number) without its author: what it
// sealed no longer opens, the author's other keys and the thread's other
// authors stay, the author index forgets it, and a second call is a no-op.
func TestDestroyKey(t *testing.T) {
	ctx := context.Background()
	ks := open(t, filepath.Join(t.TempDir(), "keys"), keeper(t, 1))
	n1, s1 := seal(t, ks, "t1", "alice", "a1")
	n2, s2 := seal(t, ks, "t1", "bob", "b1")
	n3, s3 := seal(t, ks, "t2", "alice", "a2")
	gone, err := ks.DestroyKey(ctx, keystore.KeyRef{Thread: "t1", Number: n1})
	if err != nil || !gone {
		t.Fatalf("destroy: %t %v", gone, err)
	}
	if opens(t, ks, "t1", n1, s1) || !opens(t, ks, "t1", n2, s2) || !opens(t, ks, "t2", n3, s3) {
		t.Fatal("DestroyKey destroyed the wrong keys")
	}
	refs, err := ks.AuthorKeys(ctx, "alice")
	if err != nil || len(refs) != 1 || refs[0].Thread != "t2" {
		t.Fatalf("alice's keys after: %v %v", refs, err)
	}
	if gone, err := ks.DestroyKey(ctx, keystore.KeyRef{Thread: "t1", Number: n1}); err != nil || gone {
		t.Fatalf("destroy again: %t %v", gone, err)
	}
	if erased, _ := ks.Erased(ctx); erased {
		t.Fatal("a destroyed key is not owed to the erase step")
	}
}
