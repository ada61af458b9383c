package audit

import (
	"bytes"
	"os"
	"testing"
	"time"
)

// fixedStart is the start time of the runs the tests write.
var fixedStart = time.Date(2025, 3, 1, 2, 0, 0, 0, time.UTC)

// stepClock returns a clock that starts at start and moves on by step at
// every reading, so each line gets its own, predictable time.
func stepClock(start time.Time, step time.Duration) func() time.Time {
	next := start
	return func() time.Time {
		t := next
		next = next.Add(step)
		return t
	}
}

func testHeader() Header {
	return Header{
		StartedAt:     fixedStart,
		DryRun:        false,
		Period:        "720h0m0s",
		MessagePeriod: "168h0m0s",
		Cutoff:        fixedStart.Add(-720 * time.Hour),
		Owner:         "node-a/4242",
		Host:          "node-a",
		PID:           4242,
		Epoch:         7,
		Version:       "1.0.0",
		BatchSize:     1000,

		MaxAge:          "90d",
		MaxMessages:     500,
		PolicyOverrides: 2,
	}
}

func ptrTime(t time.Time) *time.Time { return &t }

// testItems covers every item status and the optional fields.
func testItems() []Item {
	deleted := fixedStart.Add(-40 * 24 * time.Hour)
	return []Item{
		{ItemType: ItemThread, ItemID: "t-0001", ThreadID: "t-0001", DeletedAt: deleted, Status: StatusPurged, KeysDeleted: 12, PurgedAt: ptrTime(fixedStart.Add(time.Second))},
		{ItemType: ItemMessage, ItemID: "m-0002", ThreadID: "t-0009", Status: StatusPurged, Cause: CauseMaxAge, KeysDeleted: 3, PurgedAt: ptrTime(fixedStart.Add(2 * time.Second)), Recovered: true},
		{ItemType: ItemThread, ItemID: "t-0003", ThreadID: "t-0003", Status: StatusStamped, Reason: "deleted without deleted_ts; clock started"},
		{ItemType: ItemThread, ItemID: "t-0004", ThreadID: "t-0004", DeletedAt: fixedStart.Add(time.Hour), Status: StatusSkipped, Reason: "deleted_ts more than 5m in the future"},
		{ItemType: ItemThread, ItemID: "t-0005", ThreadID: "t-0005", DeletedAt: deleted, Status: StatusFailed, KeysDeleted: 4, Reason: "batch commit: disk full"},
	}
}

// testFooter is the footer that agrees with testItems.
func testFooter() Footer {
	return Footer{
		FinishedAt:  fixedStart.Add(3 * time.Second),
		Status:      RunCompleted,
		Scanned:     5,
		Eligible:    3,
		Purged:      2,
		Failed:      1,
		Skipped:     1,
		Stamped:     1,
		KeysDeleted: 19,
		DurationMS:  3000,
	}
}

// writeRun writes a complete run under root with the fixed clock and
// returns the sealed file's path.
func writeRun(t testing.TB, root, runID string) string {
	t.Helper()
	w, err := newWriter(root, runID, testHeader(), stepClock(fixedStart, time.Millisecond))
	if err != nil {
		t.Fatalf("newWriter: %v", err)
	}
	for _, it := range testItems() {
		if err := w.Item(it); err != nil {
			t.Fatalf("Item: %v", err)
		}
	}
	path, err := w.Close(testFooter())
	if err != nil {
		t.Fatalf("Close: %v", err)
	}
	return path
}

// fileLines splits a file into its lines (without newlines).
func fileLines(t testing.TB, path string) [][]byte {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return bytes.Split(bytes.TrimSuffix(data, []byte("\n")), []byte("\n"))
}
