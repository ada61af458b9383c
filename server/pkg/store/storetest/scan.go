// Package storetest finds strings in a store's data directory the way
// someone recovering deleted content would: every SSTable decoded block by
// block (point keys of every kind, shadowed versions, range deletions and
// range keys), and every file, WAL files included, read byte for byte up to
// its size, so that records after a log's last valid one are read too. Tests
// of erasure, retention policies and export use it to prove that purged
// content is gone and live content is not.
package storetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/sstable"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// Hit is one place a string was found.
type Hit struct {
	File string // path relative to the scanned directory
	// Where: "raw" (the file's bytes), "sst-key", "sst-value",
	// "sst-rangedel" or "sst-rangekey" (decoded from an SSTable).
	Where string
}

func (h Hit) String() string { return h.File + " (" + h.Where + ")" }

// Report maps each string looked for to the places it was found.
type Report map[string][]Hit

// Found lists the strings found at least once, sorted.
func (r Report) Found() []string {
	var out []string
	for s, hits := range r {
		if len(hits) > 0 {
			out = append(out, s)
		}
	}
	sort.Strings(out)
	return out
}

// Scan looks for each of needles in every file under dir. Files that
// vanish during the scan (a table deleted by a compaction) are skipped.
func Scan(dir string, needles []string) (Report, error) {
	rep := Report{}
	for _, n := range needles {
		if n == "" {
			return nil, errors.New("storetest: empty string to look for")
		}
		rep[n] = nil
	}
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if !d.Type().IsRegular() {
			return nil
		}
		rel, _ := filepath.Rel(dir, path)
		data, err := os.ReadFile(path)
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		for _, n := range needles {
			if bytes.Contains(data, []byte(n)) {
				rep[n] = append(rep[n], Hit{File: rel, Where: "raw"})
			}
		}
		if strings.HasSuffix(path, ".sst") {
			if err := scanTableOnceWritten(path, rel, needles, rep); err != nil {
				return fmt.Errorf("storetest: decode %s: %w", rel, err)
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return rep, nil
}

// scanTableOnceWritten is scanTable of a table that a flush or compaction
// may still be writing (its footer not there yet): a table that does not
// decode is read again until it does or is gone, for a few seconds at most.
func scanTableOnceWritten(path, rel string, needles []string, rep Report) error {
	const tries = 100
	for i := 1; ; i++ {
		err := scanTable(path, rel, needles, rep)
		if err == nil || i == tries {
			return err
		}
		time.Sleep(30 * time.Millisecond)
	}
}

// scanTable decodes every block of one SSTable.
func scanTable(path, rel string, needles []string, rep Report) error {
	ctx := context.Background()
	f, err := vfs.Default.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil // deleted by a compaction since it was listed
	}
	if err != nil {
		return err
	}
	readable, err := sstable.NewSimpleReadable(f)
	if err != nil {
		_ = f.Close()
		return err
	}
	r, err := sstable.NewReader(ctx, readable, sstable.ReaderOptions{})
	if err != nil {
		_ = readable.Close()
		return err
	}
	defer r.Close()
	seen := map[string]bool{}
	note := func(where string, b []byte) {
		for _, n := range needles {
			if !seen[n+where] && bytes.Contains(b, []byte(n)) {
				seen[n+where] = true
				rep[n] = append(rep[n], Hit{File: rel, Where: where})
			}
		}
	}

	it, err := r.NewIter(sstable.NoTransforms, nil, nil, sstable.AssertNoBlobHandles)
	if err != nil {
		return err
	}
	for kv := it.First(); kv != nil; kv = it.Next() {
		note("sst-key", kv.K.UserKey)
		v, _, err := kv.Value(nil)
		if err != nil {
			_ = it.Close()
			return err
		}
		note("sst-value", v)
	}
	if err := it.Close(); err != nil {
		return err
	}

	del, err := r.NewRawRangeDelIter(ctx, sstable.NoFragmentTransforms, sstable.NoReadEnv)
	if err != nil {
		return err
	}
	if del != nil {
		defer del.Close()
		for s, err := del.First(); s != nil || err != nil; s, err = del.Next() {
			if err != nil {
				return err
			}
			note("sst-rangedel", s.Start)
			note("sst-rangedel", s.End)
		}
	}
	keys, err := r.NewRawRangeKeyIter(ctx, sstable.NoFragmentTransforms, sstable.NoReadEnv)
	if err != nil {
		return err
	}
	if keys != nil {
		defer keys.Close()
		for s, err := keys.First(); s != nil || err != nil; s, err = keys.Next() {
			if err != nil {
				return err
			}
			note("sst-rangekey", s.Start)
			note("sst-rangekey", s.End)
			for _, k := range s.Keys {
				note("sst-rangekey", k.Suffix)
				note("sst-rangekey", k.Value)
			}
		}
	}
	return nil
}

// RequireAll fails t unless every one of needles is found under dir.
func RequireAll(t testing.TB, dir string, needles ...string) Report {
	t.Helper()
	rep, err := Scan(dir, needles)
	if err != nil {
		t.Fatalf("scan %s: %v", dir, err)
	}
	for _, n := range needles {
		if len(rep[n]) == 0 {
			t.Errorf("%q not found under the data directory", n)
		}
	}
	return rep
}

// RequireNone fails t if any of needles is found under dir, naming where.
func RequireNone(t testing.TB, dir string, needles ...string) Report {
	t.Helper()
	rep, err := Scan(dir, needles)
	if err != nil {
		t.Fatalf("scan %s: %v", dir, err)
	}
	for _, n := range needles {
		if len(rep[n]) > 0 {
			t.Errorf("%q still in the data directory: %v", n, rep[n])
		}
	}
	return rep
}
