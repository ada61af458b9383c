// Package storetest loads raw store fixtures for tests in any package.
//
// A fixture is a JSON Lines file. Each line is {"key": "...", "value": "..."}
// where value is the exact bytes to store, so records that are not valid
// JSON can be written too.
//
// The legacy fixture (LegacyFixture) is a database written before the
// deletion index existed. It holds:
//
//   - LegacyNoTS: a deleted thread whose metadata has no deleted_ts field
//   - LegacyZeroTS: a deleted thread with deleted_ts 0
//   - BrokenMeta: a thread whose metadata is cut-off JSON
//   - FutureDeleted: a thread deleted at 2100-01-01 (FutureDeletedTS)
//   - OldDeleted: a thread deleted at 2020-01-01 (OldDeletedTS), with one
//     live message, OldMessage
//   - Live: a live thread with LiveMessage (one version), EditedMessage (two
//     versions), LegacyTombstone (latest version a tombstone without
//     deleted_ts) and BrokenMessage (its only version is not JSON)
//
// After store.Open the deletion index holds, at time 0, the threads
// LegacyNoTS, LegacyZeroTS and BrokenMeta and the messages LegacyTombstone
// and BrokenMessage; FutureDeleted and OldDeleted at their deletion times.
package storetest

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/cockroachdb/pebble/v2"
)

// IDs and times in the legacy fixture.
const (
	LegacyNoTS      = "legacy-no-ts"
	LegacyZeroTS    = "legacy-zero-ts"
	BrokenMeta      = "broken-meta"
	FutureDeleted   = "future-deleted"
	OldDeleted      = "old-deleted"
	OldMessage      = "old-m1"
	Live            = "live"
	LiveMessage     = "live-m1"
	EditedMessage   = "live-m2"
	LegacyTombstone = "live-m3"
	BrokenMessage   = "live-m4"

	FutureDeletedTS int64 = 4102444800000000000 // 2100-01-01T00:00:00Z
	OldDeletedTS    int64 = 1577836800000000000 // 2020-01-01T00:00:00Z
)

// Record is one line of a fixture.
type Record struct {
	Key   string `json:"key"`
	Value string `json:"value"`
}

// LegacyFixture is the path of testdata/store/legacy.jsonl in this module.
func LegacyFixture() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "..", "..", "testdata", "store", "legacy.jsonl")
}

// ReadFixture parses a fixture file.
func ReadFixture(path string) ([]Record, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read fixture: %w", err)
	}
	defer f.Close()
	var out []Record
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 16<<20)
	for line := 1; sc.Scan(); line++ {
		if len(sc.Bytes()) == 0 {
			continue
		}
		var r Record
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			return nil, fmt.Errorf("read fixture %s line %d: %w", path, line, err)
		}
		if r.Key == "" {
			return nil, fmt.Errorf("read fixture %s line %d: empty key", path, line)
		}
		out = append(out, r)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read fixture %s: %w", path, err)
	}
	return out, nil
}

// LoadFixture writes the records of the fixture at path into the Pebble
// database in dir, with Pebble directly and no store open, as a database
// written by an older version would be: unless the fixture says otherwise
// there is no sys:schema key, so the next store.Open builds the deletion
// index. It fails the test on any error.
func LoadFixture(t testing.TB, dir, path string) {
	t.Helper()
	records, err := ReadFixture(path)
	if err != nil {
		t.Fatal(err)
	}
	db, err := pebble.Open(dir, &pebble.Options{Logger: Quiet{}})
	if err != nil {
		t.Fatalf("load fixture: %v", err)
	}
	b := db.NewBatch()
	for _, r := range records {
		_ = b.Set([]byte(r.Key), []byte(r.Value), nil)
	}
	if err := b.Commit(pebble.Sync); err != nil {
		t.Fatalf("load fixture: %v", err)
	}
	if err := db.Close(); err != nil {
		t.Fatalf("load fixture: %v", err)
	}
}

// Quiet is the Logger of a Pebble database a test opens itself: it drops
// Pebble's informational messages.
type Quiet struct{}

func (Quiet) Infof(string, ...any)              {}
func (Quiet) Errorf(string, ...any)             {}
func (Quiet) Fatalf(format string, args ...any) { panic(fmt.Sprintf(format, args...)) }
