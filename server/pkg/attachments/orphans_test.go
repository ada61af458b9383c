package attachments

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"gocloud.dev/blob"

	"github.com/progressdb/progressdb/server/internal/testtools/s3server"
)

func TestObjectOf(t *testing.T) {
	for _, c := range []struct {
		name          string
		tid, mid, aid string
		leftover, ok  bool
	}{
		{"t1/m1/01ABC", "t1", "m1", "01ABC", false, true},
		{"t1/m1/01ABC.18b2f3c4d5e6f7a8.tmp", "t1", "m1", "01ABC", true, true},
		{"t1/m1/01ABC.tmp", "t1", "m1", "01ABC.tmp", false, true}, // an ID, not fileblob's pattern
		{"t1/m1/01ABC.XYZ.tmp", "t1", "m1", "01ABC.XYZ.tmp", false, true},
		{"t1/m1", "", "", "", false, false},
		{"t1/m1/a/b", "", "", "", false, false},
		{"t1/m:1/a", "", "", "", false, false},
		{"notes/readme", "", "", "", false, false},
		{"t1/m1/.1f.tmp", "", "", "", false, false},
	} {
		tid, mid, aid, leftover, ok := ObjectOf(c.name)
		if tid != c.tid || mid != c.mid || aid != c.aid || leftover != c.leftover || ok != c.ok {
			t.Errorf("ObjectOf(%q) = %q %q %q %v %v, want %q %q %q %v %v", c.name, tid, mid, aid, leftover, ok,
				c.tid, c.mid, c.aid, c.leftover, c.ok)
		}
	}
}

// A file:// walk goes in one order, folder by folder, and resumes after
// any name it gave; List leaves uploads' temporary files out.
func TestWalkResumesAfterAnyName(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	names := []string{"a/m/1", "a/m/2", "a/m/2.1f.tmp", "a/n/1", "a-b/m/1", "b/m/1"}
	for _, n := range names {
		p := filepath.Join(dir, filepath.FromSlash(n))
		if err := os.MkdirAll(filepath.Dir(p), 0o750); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(n), 0o640); err != nil {
			t.Fatal(err)
		}
	}
	b, err := Open(ctx, "file://"+dir)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	walk := func(after string, limit int) []string {
		var got []string
		if err := b.Walk(ctx, after, func(o Object) (bool, error) {
			got = append(got, o.Name)
			return len(got) < limit, nil
		}); err != nil {
			t.Fatal(err)
		}
		return got
	}
	all := walk("", 100)
	if !slices.Equal(all, names) {
		t.Fatalf("walk = %v, want %v", all, names)
	}
	for i, n := range all {
		if got := walk(n, 100); !slices.Equal(got, all[i+1:]) {
			t.Errorf("walk after %q = %v, want %v", n, got, all[i+1:])
		}
	}
	if got := walk("a/m/2", 1); !slices.Equal(got, []string{"a/m/2.1f.tmp"}) {
		t.Errorf("walk after a/m/2, one = %v", got)
	}
	var listed []string
	if err := b.List(ctx, "", func(bi BlobInfo) error { listed = append(listed, bi.Name); return nil }); err != nil {
		t.Fatal(err)
	}
	if slices.Contains(listed, "a/m/2.1f.tmp") || len(listed) != len(names)-1 {
		t.Errorf("List = %v: the temporary file is not a blob", listed)
	}
	empty, err := Open(ctx, "file://"+filepath.Join(dir, "none"))
	if err != nil {
		t.Fatal(err)
	}
	defer empty.Close()
	if err := empty.Walk(ctx, "", func(Object) (bool, error) { t.Fatal("an object in an empty store"); return false, nil }); err != nil {
		t.Fatal(err)
	}
}

// A bucket reached with a prefix (a cluster shard's within a node's
// bucket) is walked from any name on within that prefix only, the
// driver listing from the whole key.
func TestWalkPrefixedBucketResumes(t *testing.T) {
	ctx := context.Background()
	fake := s3server.Start(t)
	whole, err := blob.OpenBucket(ctx, fake.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer whole.Close()
	// Names past the prefix itself ("t…" after "shards/…") are where a
	// driver started from the name alone would list nothing.
	names := []string{"a/m/1", "t/m/1", "u/m/1"}
	for _, key := range []string{"a/m/0", "shards/3/a/m/1", "shards/3/t/m/1", "shards/3/u/m/1", "shards/4/a/m/1", "zz/m/9"} {
		if err := whole.WriteAll(ctx, key, []byte(key), nil); err != nil {
			t.Fatal(err)
		}
	}
	b, err := Open(ctx, fake.URL+"&prefix=shards%2F3%2F")
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	walk := func(after string) []string {
		var got []string
		if err := b.Walk(ctx, after, func(o Object) (bool, error) {
			got = append(got, o.Name)
			return true, nil
		}); err != nil {
			t.Fatal(err)
		}
		return got
	}
	if got := walk(""); !slices.Equal(got, names) {
		t.Fatalf("walk = %v, want %v", got, names)
	}
	for i, n := range names {
		if got := walk(n); !slices.Equal(got, names[i+1:]) {
			t.Errorf("walk after %q = %v, want %v", n, got, names[i+1:])
		}
	}
}
