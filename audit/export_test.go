package audit

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// testRecords are three records: a thread with two messages (one edited),
// a message of a live thread, and a thread whose stored values are not all
// compact JSON.
func testRecords() []ExportRecord {
	at := fixedStart.Add(time.Minute)
	return []ExportRecord{
		{
			ExportHead: ExportHead{ItemType: ItemThread, ItemID: "t1", ThreadID: "t1", Cause: "deleted", ExportedAt: at},
			Thread:     json.RawMessage(`{"id":"t1","title":"Plans","author":"ann","created_ts":1,"updated_ts":2,"deleted":true,"deleted_ts":3,"legal_hold":false}`),
			Messages: []ExportMessage{
				{ID: "m1", Versions: []json.RawMessage{
					json.RawMessage(`{"id":"m1","thread":"t1","author":"ann","body":{"text":"hi"},"ts":1,"version":1,"deleted":false,"deleted_ts":0}`),
					json.RawMessage(`{"id":"m1","thread":"t1","author":"ann","body":{"text":"hello"},"ts":2,"version":2,"deleted":false,"deleted_ts":0}`),
				}},
				{ID: "m2", Versions: []json.RawMessage{
					json.RawMessage(`{"id":"m2","thread":"t1","author":"bob","body":"ok","ts":3,"version":1,"deleted":false,"deleted_ts":0}`),
				}},
			},
		},
		{
			ExportHead: ExportHead{ItemType: ItemMessage, ItemID: "m9", ThreadID: "t2", Cause: "deleted", ExportedAt: at, Recovered: true},
			Thread:     json.RawMessage(`{"id":"t2","title":"Live","author":"cy","created_ts":1,"updated_ts":2,"deleted":false,"deleted_ts":0,"legal_hold":false}`),
			Messages: []ExportMessage{
				{ID: "m9", Versions: []json.RawMessage{
					json.RawMessage(`{"id":"m9","thread":"t2","author":"cy","body":[1,2],"ts":5,"version":1,"deleted":false,"deleted_ts":0}`),
					json.RawMessage(`{"id":"m9","thread":"t2","author":"cy","body":null,"ts":6,"version":2,"deleted":true,"deleted_ts":6}`),
				}},
			},
		},
		{
			ExportHead: ExportHead{ItemType: ItemThread, ItemID: "t3", ThreadID: "t3", Cause: "deleted", ExportedAt: at},
			Thread:     nil, // metadata already gone: an interrupted purge
			Messages:   []ExportMessage{},
		},
	}
}

// writeRecord writes rec through an open export writer and commits it.
func writeRecord(t *testing.T, w *ExportWriter, rec ExportRecord) {
	t.Helper()
	it, err := w.Begin(rec.ExportHead)
	if err != nil {
		t.Fatal(err)
	}
	if err := it.Thread(rec.Thread); err != nil {
		t.Fatal(err)
	}
	for _, m := range rec.Messages {
		if err := it.Message(m.ID); err != nil {
			t.Fatal(err)
		}
		for _, v := range m.Versions {
			if err := it.Version(v); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, a := range rec.Attachments {
		var data io.Reader
		if a.Data != nil {
			data = bytes.NewReader(a.Data)
		}
		if err := it.Attachment(a.AttachmentMeta, data); err != nil {
			t.Fatal(err)
		}
	}
	if err := it.Commit(); err != nil {
		t.Fatal(err)
	}
}

// readRecords reads every record of an export file.
func readRecords(t *testing.T, path string) []ExportRecord {
	t.Helper()
	r, err := OpenExport(path)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var out []ExportRecord
	for {
		rec, err := r.ReadRecord()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, rec)
	}
}

func sameRecords(t *testing.T, got, want []ExportRecord) {
	t.Helper()
	g, _ := json.Marshal(got)
	w, _ := json.Marshal(want)
	if !bytes.Equal(g, w) {
		t.Fatalf("records differ:\n got %s\nwant %s", g, w)
	}
}

func TestExportWriteReadVerify(t *testing.T) {
	root := filepath.Join(t.TempDir(), "exports")
	w, err := NewExportWriter(root, "run1", fixedStart)
	if err != nil {
		t.Fatal(err)
	}
	want := testRecords()
	for _, rec := range want {
		writeRecord(t, w, rec)
	}
	if p := w.Path(); !strings.HasSuffix(p, ".jsonl.gz.inprogress") {
		t.Fatalf("path while writing = %s", p)
	}
	sum, err := w.Close()
	if err != nil {
		t.Fatal(err)
	}
	wantPath := filepath.Join(root, "2025-03", "export-20250301T020000Z-run1.jsonl.gz")
	if sum.Path != wantPath || sum.Records != 3 || len(sum.SHA256) != 64 {
		t.Fatalf("summary %+v, want path %s and 3 records", sum, wantPath)
	}
	if ExportFileName(root, fixedStart, "run1") != wantPath {
		t.Fatalf("ExportFileName = %s", ExportFileName(root, fixedStart, "run1"))
	}
	checkMode(t, sum.Path, fileMode)
	checkMode(t, filepath.Dir(sum.Path), fs.ModeDir|dirMode)

	sameRecords(t, readRecords(t, sum.Path), want)

	// Any gzip reader sees JSON lines, one per record.
	f, _ := os.Open(sum.Path)
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	plain, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(string(plain), "\n"), "\n")
	if len(lines) != 3 {
		t.Fatalf("%d lines, want 3:\n%s", len(lines), plain)
	}
	for i, l := range lines {
		if !json.Valid([]byte(l)) {
			t.Fatalf("line %d is not JSON: %s", i+1, l)
		}
	}
	if !strings.HasPrefix(lines[0], `{"item_type":"thread","item_id":"t1","thread_id":"t1","cause":"deleted","exported_at":"2025-03-01T02:01:00Z","thread":{`) {
		t.Fatalf("line 1 = %s", lines[0])
	}
	if !strings.Contains(lines[1], `"recovered":true`) || strings.Contains(lines[0], "recovered") {
		t.Fatalf("recovered flag wrong:\n%s", plain)
	}

	if err := VerifyExport(sum.Path, sum.SHA256, 3); err != nil {
		t.Fatalf("verify: %v", err)
	}
	var p *Problem
	if err := VerifyExport(sum.Path, sum.SHA256, 4); !errors.As(err, &p) || !strings.Contains(p.Reason, "3 records") {
		t.Fatalf("verify with a wrong count: %v", err)
	}
	if err := VerifyExport(sum.Path, strings.Repeat("0", 64), 3); !errors.As(err, &p) || !strings.Contains(p.Reason, "SHA-256") {
		t.Fatalf("verify with a wrong hash: %v", err)
	}
}

func TestExportOddStoredValues(t *testing.T) {
	root := t.TempDir()
	w, _ := NewExportWriter(root, "run1", fixedStart)
	it, err := w.Begin(ExportHead{ItemType: ItemMessage, ItemID: "m1", ThreadID: "t1", Cause: "deleted", ExportedAt: fixedStart})
	if err != nil {
		t.Fatal(err)
	}
	_ = it.Thread([]byte("{\n \"id\": \"t1\"\n}"))
	_ = it.Message("m1")
	_ = it.Version([]byte("not json \n at all"))
	if err := it.Commit(); err != nil {
		t.Fatal(err)
	}
	sum, err := w.Close()
	if err != nil {
		t.Fatal(err)
	}
	got := readRecords(t, sum.Path)
	if len(got) != 1 || string(got[0].Thread) != `{"id":"t1"}` ||
		string(got[0].Messages[0].Versions[0]) != `{"unparsed":"bm90IGpzb24gCiBhdCBhbGw="}` {
		t.Fatalf("got %+v", got)
	}
	if err := VerifyExport(sum.Path, sum.SHA256, 1); err != nil {
		t.Fatal(err)
	}
}

func TestExportNothingWrittenLeavesNoFile(t *testing.T) {
	root := filepath.Join(t.TempDir(), "exports")
	w, err := NewExportWriter(root, "run1", fixedStart)
	if err != nil {
		t.Fatal(err)
	}
	sum, err := w.Close()
	if err != nil || sum != (ExportSummary{}) {
		t.Fatalf("Close = %+v, %v", sum, err)
	}
	if _, err := os.Stat(root); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("export root made for nothing: %v", err)
	}
	if _, err := NewExportWriter(root, "bad:id", fixedStart); !errors.Is(err, ErrInvalidRunID) {
		t.Fatalf("bad run ID: %v", err)
	}
}

// bigRecord begins a record large enough that most of it reaches the file
// before it is committed, and returns it open.
func bigRecord(t *testing.T, w *ExportWriter, id string) *ExportItem {
	t.Helper()
	it, err := w.Begin(ExportHead{ItemType: ItemThread, ItemID: id, ThreadID: id, Cause: "deleted", ExportedAt: fixedStart})
	if err != nil {
		t.Fatal(err)
	}
	_ = it.Thread([]byte(`{"id":"` + id + `"}`))
	rng := rand.New(rand.NewPCG(1, 2))
	noise := make([]byte, 200)
	for i := range 3000 {
		_ = it.Message(fmt.Sprintf("m%d", i))
		// Incompressible, so that the gzip output passes the buffers.
		for j := range noise {
			noise[j] = byte(rng.Uint32())
		}
		_ = it.Version([]byte(fmt.Sprintf(`{"body":"%x"}`, noise)))
	}
	if w.n == w.good {
		t.Fatal("the big record did not reach the file")
	}
	return it
}

func TestExportAbortCutsTheRecord(t *testing.T) {
	root := t.TempDir()
	w, _ := NewExportWriter(root, "run1", fixedStart)
	recs := testRecords()
	writeRecord(t, w, recs[0])
	it := bigRecord(t, w, "big")
	if err := it.Abort(); err != nil {
		t.Fatal(err)
	}
	writeRecord(t, w, recs[1])
	sum, err := w.Close()
	if err != nil {
		t.Fatal(err)
	}
	sameRecords(t, readRecords(t, sum.Path), recs[:2])
	if err := VerifyExport(sum.Path, sum.SHA256, 2); err != nil {
		t.Fatalf("hash after abort: %v", err)
	}
}

// abandonExport commits n test records and leaves a big one torn, as a
// kill would; it returns the .inprogress path.
func abandonExport(t *testing.T, root, runID string, n int, torn bool) string {
	t.Helper()
	w, err := NewExportWriter(root, runID, fixedStart)
	if err != nil {
		t.Fatal(err)
	}
	for _, rec := range testRecords()[:n] {
		writeRecord(t, w, rec)
	}
	if torn {
		bigRecord(t, w, "torn")
	}
	path := w.path
	if err := w.f.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestSealAbandonedExports(t *testing.T) {
	root := t.TempDir()
	torn := abandonExport(t, root, "torn", 2, true)
	clean := abandonExport(t, root, "clean", 3, false)
	empty := abandonExport(t, root, "empty", 0, true)
	zeros := abandonExport(t, root, "zeros", 1, false)
	appendBytes(t, zeros, make([]byte, 4096))
	live := abandonExport(t, root, "live", 1, true)

	sealed, err := SealAbandonedExports(root, live)
	if err != nil {
		t.Fatal(err)
	}
	if len(sealed) != 3 {
		t.Fatalf("sealed %v, want 3 files", sealed)
	}
	recs := testRecords()
	for path, want := range map[string][]ExportRecord{torn: recs[:2], clean: recs, zeros: recs[:1]} {
		final := strings.TrimSuffix(path, ".inprogress")
		sameRecords(t, readRecords(t, final), want)
		c, err := ScanExport(final)
		if err != nil || c.Records != int64(len(want)) {
			t.Fatalf("%s: %+v, %v", final, c, err)
		}
	}
	for _, gone := range []string{empty, strings.TrimSuffix(empty, ".inprogress")} {
		if _, err := os.Stat(gone); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("an export without a complete record stays: %s", gone)
		}
	}
	if _, err := os.Stat(live); err != nil {
		t.Fatalf("the skipped file was touched: %v", err)
	}
}

func TestSealExportDamagedInTheMiddle(t *testing.T) {
	root := t.TempDir()
	path := abandonExport(t, root, "run1", 3, false)
	data, _ := os.ReadFile(path)
	data[len(data)/3] ^= 0xff // inside an early member
	if err := os.WriteFile(path, data, 0o640); err != nil {
		t.Fatal(err)
	}
	sealed, err := SealAbandonedExports(root)
	var p *Problem
	if len(sealed) != 0 || !errors.As(err, &p) || !strings.HasSuffix(p.File, ".jsonl.gz.corrupt") {
		t.Fatalf("sealed %v, err %v", sealed, err)
	}
	if _, err := os.Stat(p.File); err != nil {
		t.Fatal(err)
	}
}

func TestScanExportTornFile(t *testing.T) {
	root := t.TempDir()
	path := abandonExport(t, root, "run1", 1, true)
	var p *Problem
	if _, err := ScanExport(path); !errors.As(err, &p) || p.Line != 2 {
		t.Fatalf("scan of a torn file: %v", err)
	}
}

func checkMode(t *testing.T, path string, want fs.FileMode) {
	t.Helper()
	info, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if info.Mode() != want {
		t.Fatalf("%s: mode %v, want %v", path, info.Mode(), want)
	}
}

// writeRunWithExport writes an export of the test records and an audit
// file whose footer names it (with footer changed by edit first).
func writeRunWithExport(t *testing.T, edit func(*Footer)) (auditPath, exportPath string) {
	t.Helper()
	base := t.TempDir()
	ew, err := NewExportWriter(filepath.Join(base, "exports"), "run1", fixedStart)
	if err != nil {
		t.Fatal(err)
	}
	for _, rec := range testRecords() {
		writeRecord(t, ew, rec)
	}
	sum, err := ew.Close()
	if err != nil {
		t.Fatal(err)
	}
	w, err := newWriter(filepath.Join(base, "audit"), "run1", testHeader(), stepClock(fixedStart, time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	for _, it := range testItems() {
		if err := w.Item(it); err != nil {
			t.Fatal(err)
		}
	}
	f := testFooter()
	f.Exported, f.ExportFile, f.ExportSHA256 = &sum.Records, sum.Path, sum.SHA256
	if edit != nil {
		edit(&f)
	}
	path, err := w.Close(f)
	if err != nil {
		t.Fatal(err)
	}
	return path, sum.Path
}

func TestVerifyChecksTheNamedExport(t *testing.T) {
	path, _ := writeRunWithExport(t, nil)
	if err := VerifyFile(path); err != nil {
		t.Fatalf("untouched: %v", err)
	}
	rep, err := VerifyDir(filepath.Dir(filepath.Dir(path)))
	if err != nil || rep.Verified != 1 || len(rep.Problems) != 0 {
		t.Fatalf("VerifyDir: %+v, %v", rep, err)
	}
	line := len(fileLines(t, path)) // the footer

	for name, tc := range map[string]struct {
		edit   func(*Footer)
		damage func(t *testing.T, export string)
		file   string // "audit" or "export": which file the problem names
		reason string
	}{
		"export changed": {damage: func(t *testing.T, export string) {
			data, _ := os.ReadFile(export)
			data[len(data)-10] ^= 1
			_ = os.WriteFile(export, data, 0o640)
		}, file: "export", reason: "does not decompress"},
		"export replaced by a valid one": {damage: func(t *testing.T, export string) {
			w, _ := NewExportWriter(t.TempDir(), "run1", fixedStart)
			for _, rec := range testRecords() {
				rec.Recovered = true
				writeRecord(t, w, rec)
			}
			sum, _ := w.Close()
			_ = os.Rename(sum.Path, export)
		}, file: "export", reason: "SHA-256"},
		"export missing": {damage: func(t *testing.T, export string) { _ = os.Remove(export) },
			file: "audit", reason: "no such file"},
		"record count off": {edit: func(f *Footer) { n := int64(2); f.Exported = &n },
			file: "export", reason: "holds 3 records, the audit footer says 2"},
		"count without file": {edit: func(f *Footer) { f.ExportFile, f.ExportSHA256 = "", "" },
			file: "audit", reason: "names no export_file"},
		"file without hash": {edit: func(f *Footer) { f.ExportSHA256 = "" },
			file: "audit", reason: "without exported and export_sha256"},
		"file without count": {edit: func(f *Footer) { f.Exported = nil },
			file: "audit", reason: "without exported and export_sha256"},
	} {
		t.Run(name, func(t *testing.T) {
			path, export := writeRunWithExport(t, tc.edit)
			if tc.damage != nil {
				tc.damage(t, export)
			}
			err := VerifyFile(path)
			var p *Problem
			if !errors.As(err, &p) || !strings.Contains(p.Reason, tc.reason) {
				t.Fatalf("got %v, want a problem with %q", err, tc.reason)
			}
			want := path
			if tc.file == "export" {
				want = export
			} else if p.Line != line {
				t.Errorf("problem on line %d, want the footer's %d", p.Line, line)
			}
			if p.File != want {
				t.Errorf("problem names %s, want %s", p.File, want)
			}
		})
	}
}

// A named pipe where an export is expected is refused, never waited on:
// reading, scanning and sealing each answer at once.
func TestExportNamedPipeIsRefused(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "export-20250301T030000Z-r.jsonl.gz")
	if err := syscall.Mkfifo(fifo, 0o640); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenExport(fifo); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Errorf("OpenExport of a FIFO: %v", err)
	}
	if _, err := ScanExport(fifo); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Errorf("ScanExport of a FIFO: %v", err)
	}
	inProgress := filepath.Join(dir, "export-20250301T040000Z-s.jsonl.gz") + suffixInProgress
	if err := syscall.Mkfifo(inProgress, 0o640); err != nil {
		t.Fatal(err)
	}
	if _, err := sealExport(inProgress); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Errorf("sealExport of a FIFO: %v", err)
	}
}

// Records finished between two Syncs share one gzip member: an Abort
// drops them all, a Sync keeps them all, and sealing reads members of
// several records.
func TestExportGroupsShareAMember(t *testing.T) {
	root := t.TempDir()
	w, _ := NewExportWriter(root, "run1", fixedStart)
	recs := testRecords()
	finish := func(rec ExportRecord) {
		t.Helper()
		it, err := w.Begin(rec.ExportHead)
		if err != nil {
			t.Fatal(err)
		}
		_ = it.Thread(rec.Thread)
		for _, m := range rec.Messages {
			_ = it.Message(m.ID)
			for _, v := range m.Versions {
				_ = it.Version(v)
			}
		}
		if err := it.Finish(); err != nil {
			t.Fatal(err)
		}
	}
	finish(recs[0])
	finish(recs[1])
	if err := w.Sync(); err != nil || w.Records() != 2 {
		t.Fatalf("Sync: %v, %d records", err, w.Records())
	}
	finish(recs[2])
	big := bigRecord(t, w, "big")
	if err := big.Abort(); err != nil {
		t.Fatal(err)
	}
	if w.Records() != 2 {
		t.Fatalf("%d records after an abort, want the 2 synced", w.Records())
	}
	finish(recs[2])
	path := w.path
	if err := w.Sync(); err != nil {
		t.Fatal(err)
	}
	// A group left unsynced by a crash: torn, cut off by sealing.
	finish(recs[0])
	bigRecord(t, w, "torn")
	_ = w.f.Close()

	if _, err := SealAbandonedExports(root); err != nil {
		t.Fatal(err)
	}
	final := strings.TrimSuffix(path, ".inprogress")
	sameRecords(t, readRecords(t, final), recs)
	if c, err := ScanExport(final); err != nil || c.Records != 3 {
		t.Fatalf("scan: %+v, %v", c, err)
	}
}

func TestVerifyExportDir(t *testing.T) {
	root := t.TempDir()
	w, _ := NewExportWriter(root, "run1", fixedStart)
	writeRecord(t, w, testRecords()[0])
	if _, err := w.Close(); err != nil {
		t.Fatal(err)
	}
	live := abandonExport(t, root, "live", 1, false)
	dead := abandonExport(t, root, "dead", 1, false)
	corrupt := filepath.Join(filepath.Dir(live), "export-20250301T020000Z-x.jsonl.gz.corrupt")
	_ = os.WriteFile(corrupt, []byte("x"), 0o640)

	rep, err := VerifyExportDir(root, LiveExportName(filepath.Join("a", "2025-03", "retention-20250301T020000Z-live.jsonl.inprogress")))
	if err != nil || rep.Files != 1 || rep.Verified != 1 {
		t.Fatalf("%+v, %v", rep, err)
	}
	got := map[string]bool{}
	for _, p := range rep.Problems {
		got[p.File] = true
	}
	if len(rep.Problems) != 2 || !got[dead] || !got[corrupt] {
		t.Fatalf("problems %+v, want the dead run's in-progress export and the corrupt one", rep.Problems)
	}
	if LiveExportName("") != "" || LiveExportName("x/notes.txt") != "" {
		t.Fatal("LiveExportName of no audit file")
	}
}
