package audit

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"time"
)

// Match is one item record of the trail about the item Find looks for,
// with the run that wrote it.
type Match struct {
	File       string    `json:"file"`
	Line       int       `json:"line"`
	RunID      string    `json:"run_id"`
	RunStarted time.Time `json:"run_started_at,omitzero"` // zero (absent) when the file's header cannot be read
	DryRun     bool      `json:"dry_run"`
	InProgress bool      `json:"in_progress"` // the file is not sealed yet (a run going, or killed)
	// Trigger is the run's trigger when it has one: "restore" and
	// "start" name a replay of purges recorded before (spec §10).
	Trigger string `json:"trigger,omitempty"`
	// DatabaseID is the database the run purged; OriginID, in the runs
	// of a restored copy, the database it was restored from (spec §10.1).
	DatabaseID string    `json:"database_id,omitempty"`
	OriginID   string    `json:"origin_id,omitempty"`
	Written    time.Time `json:"written_at"` // when the line was written
	Item       Item      `json:"item"`
}

// Find returns every item record of itemID (a thread or message ID) under
// root, in run order (the runs' start times): sealed files and
// in-progress ones. It answers an auditor's
// question, was X purged, when, why and by which run's file; whether that
// file verifies is VerifyDir's job. Lines that do not parse are passed
// over (VerifyDir names them). A message purged with its thread has no
// record of its own: the thread's record covers it.
func Find(root, itemID string) ([]Match, error) {
	files, err := monthFiles(root, func(name string) bool {
		return isAuditName(name, extSealed) || isAuditName(name, extInProgress)
	})
	var out []Match
	for _, path := range files {
		m, ferr := findIn(path, itemID)
		if ferr != nil {
			err = errors.Join(err, ferr)
			continue
		}
		out = append(out, m...)
	}
	// Two runs can start in the same second, where names sort by run ID:
	// the headers' start times give the run order.
	slices.SortStableFunc(out, func(a, b Match) int { return a.RunStarted.Compare(b.RunStarted) })
	return out, err
}

// findIn returns the records of itemID in one file.
func findIn(path, itemID string) ([]Match, error) {
	r, err := Open(path)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	// Lines that do not hold the ID as the writer encodes it are passed
	// over undecoded: a search reads the trail at the speed of the disk.
	needle, err := json.Marshal(itemID)
	if err != nil {
		return nil, err
	}
	r.only = needle[1 : len(needle)-1]
	var hdr *Header
	var out []Match
	err = eachRecord(r, func(rec Record) error {
		if rec.Header != nil {
			hdr = rec.Header
			return nil
		}
		it := rec.Item
		if it == nil || it.ItemID != itemID {
			return nil
		}
		m := Match{File: path, Line: rec.Line, RunID: rec.RunID, Written: rec.Time, Item: *it,
			InProgress: strings.HasSuffix(path, suffixInProgress)}
		if hdr != nil {
			m.RunStarted, m.DryRun = hdr.StartedAt, hdr.DryRun
			m.Trigger, m.DatabaseID, m.OriginID = hdr.Trigger, hdr.DatabaseID, hdr.OriginID
		}
		out = append(out, m)
		return nil
	})
	return out, err
}
