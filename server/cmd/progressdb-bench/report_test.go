package main

import (
	"strings"
	"testing"
	"time"
)

// A run of some scenarios replaces their sections and target rows in an
// earlier report and keeps every other scenario's as it was.
func TestMergeReplacesOnlyTheRunsSections(t *testing.T) {
	day := time.Date(2026, 11, 20, 10, 0, 0, 0, time.UTC)
	old := &report{command: "old", started: day, finished: day}
	for _, id := range []string{"B1", "B9"} {
		s := &section{id: id, title: "old " + id, setup: []string{"old text of " + id}}
		s.addTarget("old target of "+id, "≥ 1×", "1×", true)
		old.sections = append(old.sections, s)
	}
	oldMD := old.markdown()

	now := day.AddDate(0, 0, 6)
	cur := &report{command: "new", started: now, finished: now}
	s := &section{id: "B9", title: "new B9", setup: []string{"new text of B9"}}
	s.addTarget("new target of B9", "≥ 2×", "1×", false)
	cur.sections = append(cur.sections, s)
	got := cur.merge(oldMD)

	for _, want := range []string{"old text of B1", "old target of B1", "new text of B9", "new target of B9",
		"Command: `new`", "(run of 2026-11-20)", "(run of 2026-11-26)"} {
		if !strings.Contains(got, want) {
			t.Errorf("merged report lacks %q:\n%s", want, got)
		}
	}
	for _, gone := range []string{"old text of B9", "old target of B9", "Command: `old`"} {
		if strings.Contains(got, gone) {
			t.Errorf("merged report still has %q:\n%s", gone, got)
		}
	}
	if strings.Index(got, "## B1:") > strings.Index(got, "## B9:") || strings.Count(got, "## B9:") != 1 {
		t.Errorf("sections out of order or repeated:\n%s", got)
	}
	// Merging again with the same run changes nothing.
	if again := cur.merge(got); again != got {
		t.Errorf("a second merge changed the report:\n%s\nthen:\n%s", got, again)
	}
}
