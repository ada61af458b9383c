package audit

import (
	"errors"
	"path/filepath"
	"testing"
)

// Files written before policies existed have no cause, max_age,
// max_messages or policy_overrides: they still verify, and their items
// read with an empty cause (deleted was the only one).
func TestPrePolicyFileVerifies(t *testing.T) {
	path := filepath.Join("..", "testdata", "audit-prepolicy", "retention-20250301T020000Z-golden.jsonl")
	if err := VerifyFile(path); err != nil {
		t.Fatalf("pre-policy file: %v", err)
	}
}

func TestItemCause(t *testing.T) {
	w, err := newWriter(t.TempDir(), "causes", testHeader(), stepClock(fixedStart, 0))
	if err != nil {
		t.Fatal(err)
	}
	base := Item{ItemType: ItemMessage, ItemID: "m1", ThreadID: "t1", Status: StatusDryRun}
	for _, c := range []string{"", CauseDeleted, CauseMaxAge, CauseMaxMessages} {
		it := base
		it.Cause = c
		if err := w.Item(it); err != nil {
			t.Fatalf("cause %q: %v", c, err)
		}
	}
	bad := base
	bad.Cause = "too_old"
	if err := w.Item(bad); !errors.Is(err, ErrInvalidRecord) {
		t.Fatalf("unknown cause: %v", err)
	}
	path, err := w.Close(Footer{FinishedAt: fixedStart, Status: RunCompleted, Scanned: 4, Eligible: 4})
	if err != nil {
		t.Fatal(err)
	}
	var causes []string
	for _, l := range fileLines(t, path)[1:5] {
		rec, reason := parseLine(l)
		if reason != "" {
			t.Fatal(reason)
		}
		causes = append(causes, rec.Item.Cause)
	}
	if want := []string{"deleted", "deleted", "max_age", "max_messages"}; !equal(causes, want) {
		t.Fatalf("causes %v, want %v", causes, want)
	}
}

func equal(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
