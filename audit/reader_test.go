package audit

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestReaderRoundTrip(t *testing.T) {
	path := writeRun(t, t.TempDir(), "run-1")
	lines := fileLines(t, path)

	r, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var recs []Record
	for {
		rec, err := r.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		recs = append(recs, rec)
	}
	if _, err := r.Next(); !errors.Is(err, io.EOF) {
		t.Fatalf("Next after the end = %v, want io.EOF again", err)
	}
	if len(recs) != len(lines) {
		t.Fatalf("read %d records, file has %d lines", len(recs), len(lines))
	}
	for i, rec := range recs {
		if rec.Line != i+1 || rec.Seq != int64(i) || rec.RunID != "run-1" || !bytes.Equal(rec.Raw, lines[i]) {
			t.Errorf("record %d: line %d seq %d run %q raw %s", i, rec.Line, rec.Seq, rec.RunID, rec.Raw)
		}
		if i > 0 && rec.Prev != lineHash(lines[i-1]) {
			t.Errorf("record %d: prev %s does not chain", i, rec.Prev)
		}
	}

	h := recs[0].Header
	want := testHeader()
	if h == nil || recs[0].Msg != MsgHeader || !h.StartedAt.Equal(want.StartedAt) || !h.Cutoff.Equal(want.Cutoff) ||
		h.Owner != want.Owner || h.Epoch != want.Epoch || h.BatchSize != want.BatchSize || h.Period != want.Period {
		t.Errorf("header = %+v, want %+v", h, want)
	}
	for i, it := range testItems() {
		got := recs[i+1].Item
		if got == nil || got.ItemID != it.ItemID || got.Status != it.Status || got.KeysDeleted != it.KeysDeleted ||
			got.Recovered != it.Recovered || got.Reason != it.Reason || !got.DeletedAt.Equal(it.DeletedAt) ||
			(got.PurgedAt == nil) != (it.PurgedAt == nil) || got.PurgedAt != nil && !got.PurgedAt.Equal(*it.PurgedAt) {
			t.Errorf("item %d = %+v, want %+v", i, got, it)
		}
	}
	if f := recs[len(recs)-1].Footer; f == nil || *f != testFooter() {
		t.Errorf("footer = %+v, want %+v", f, testFooter())
	}
}

func TestReaderLongAndTornLines(t *testing.T) {
	good := fileLines(t, writeRun(t, t.TempDir(), "r"))
	var data []byte
	data = append(append(data, good[0]...), '\n')
	data = append(append(data, bytes.Repeat([]byte("x"), MaxLineSize+1)...), '\n')
	data = append(append(data, good[1]...), '\n')
	data = append(data, good[2][:40]...) // torn: no newline

	r := NewReader(bytes.NewReader(data), "f.jsonl")
	want := []struct {
		line   int
		reason string
	}{
		{1, ""},
		{2, "longer than 1048576 bytes"},
		{3, ""},
		{4, "no newline"},
	}
	for _, w := range want {
		rec, err := r.Next()
		if w.reason == "" {
			if err != nil || rec.Line != w.line {
				t.Fatalf("line %d: %v (line %d)", w.line, err, rec.Line)
			}
			continue
		}
		var p *Problem
		if !errors.As(err, &p) || !errors.Is(err, ErrCorrupt) || p.Line != w.line || p.File != "f.jsonl" || !strings.Contains(p.Reason, w.reason) {
			t.Fatalf("line %d: err = %v, want a Problem containing %q", w.line, err, w.reason)
		}
	}
	if _, err := r.Next(); !errors.Is(err, io.EOF) {
		t.Fatalf("after the torn line: %v, want io.EOF", err)
	}
}

func TestReaderLineExactlyAtLimit(t *testing.T) {
	line := append([]byte(`"`), bytes.Repeat([]byte("x"), MaxLineSize-2)...)
	line = append(line, '"', '\n')
	r := NewReader(bytes.NewReader(line), "f")
	_, err := r.Next()
	var p *Problem
	if !errors.As(err, &p) || strings.Contains(p.Reason, "longer") {
		t.Fatalf("a line of exactly MaxLineSize bytes: %v, want a decoding problem, not a length one", err)
	}
}

func TestOpenMissingFile(t *testing.T) {
	_, err := Open(filepath.Join(t.TempDir(), "none.jsonl"))
	if !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("Open = %v, want ErrNotExist", err)
	}
}

func TestParseLineRejects(t *testing.T) {
	const env = `{"msg":"retention_audit_footer","time":"2025-03-01T02:00:00Z","run_id":"r","seq":1,"prev":"ab"`
	const footer = `"finished_at":"2025-03-01T02:00:00Z","status":"completed","scanned":0,"eligible":0,"purged":0,"failed":0,"skipped":0,"stamped":0,"keys_deleted":0,"duration_ms":0`
	if _, reason := parseLine([]byte(env + "," + footer + "}")); reason != "" {
		t.Fatalf("the valid line is refused: %s", reason)
	}
	cases := []struct{ name, line, want string }{
		{"empty", ``, "not a JSON object"},
		{"array", `[1]`, "not a JSON object"},
		{"key order", `{"time":"2025-03-01T02:00:00Z","msg":"x"}`, `key 1 is "time", want "msg"`},
		{"offset time", strings.Replace(env, "02:00:00Z", "03:00:00+01:00", 1) + "," + footer + "}", "not RFC 3339 UTC"},
		{"bad time", strings.Replace(env, "2025-03-01T", "2025-13-01T", 1) + "," + footer + "}", "not RFC 3339 UTC"},
		{"negative seq", strings.Replace(env, `"seq":1`, `"seq":-1`, 1) + "," + footer + "}", "non-negative integer"},
		{"fraction seq", strings.Replace(env, `"seq":1`, `"seq":1.5`, 1) + "," + footer + "}", "non-negative integer"},
		{"string seq", strings.Replace(env, `"seq":1`, `"seq":"1"`, 1) + "," + footer + "}", "seq is not a number"},
		{"unknown msg", strings.Replace(env, "footer", "trailer", 1) + "," + footer + "}", "unknown msg"},
		{"missing field", env + "," + strings.Replace(footer, `"stamped":0,`, "", 1) + "}", `lacks "stamped"`},
		{"duplicate key", env + "," + footer + `,"purged":1}`, `"purged" appears twice`},
		{"duplicate envelope key", env + "," + footer + `,"seq":9}`, `"seq" appears twice`},
		{"case duplicate", env + "," + footer + `,"Purged":1}`, `"Purged" appears twice`},
		{"banned key", env + "," + footer + `,"title":"x"}`, "IDs and timestamps only"},
		{"wrong type", env + "," + strings.Replace(footer, `"purged":0`, `"purged":"0"`, 1) + "}", "retention_audit_footer:"},
		{"trailing data", env + "," + footer + "} {}", "retention_audit_footer:"},
		{"unterminated", env + "," + footer, "not valid JSON"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rec, reason := parseLine([]byte(c.line))
			if !strings.Contains(reason, c.want) {
				t.Fatalf("reason = %q, want it to contain %q", reason, c.want)
			}
			if rec.Header != nil || rec.Item != nil || rec.Footer != nil {
				t.Fatalf("a refused line still carries a decoded record")
			}
		})
	}
}
