package audit

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

func TestWriterFileNameAndLines(t *testing.T) {
	root := t.TempDir()
	path := writeRun(t, root, "run-1")

	want := filepath.Join(root, "2025-03", "retention-20250301T020000Z-run-1.jsonl")
	if path != want {
		t.Fatalf("path = %s, want %s", path, want)
	}
	if _, err := os.Stat(want + suffixInProgress); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("in-progress file still there: %v", err)
	}

	lines := fileLines(t, path)
	if len(lines) != 7 {
		t.Fatalf("got %d lines, want header + 5 items + footer", len(lines))
	}
	prev := ""
	for i, line := range lines {
		msg := MsgItem
		switch i {
		case 0:
			msg = MsgHeader
		case len(lines) - 1:
			msg = MsgFooter
		}
		stamp := fixedStart.Add(time.Duration(i) * time.Millisecond).Format(time.RFC3339Nano)
		prefix := fmt.Sprintf(`{"msg":%q,"time":%q,"run_id":"run-1","seq":%d,"prev":%q,`, msg, stamp, i, prev)
		if !strings.HasPrefix(string(line), prefix) {
			t.Errorf("line %d = %s\nwant prefix %s", i+1, line, prefix)
		}
		prev = lineHash(line)
	}
}

func TestWriterItemFields(t *testing.T) {
	root := t.TempDir()
	path := writeRun(t, root, "run-1")
	lines := fileLines(t, path)

	for i, line := range lines[1 : len(lines)-1] {
		var fields map[string]any
		if err := json.Unmarshal(line, &fields); err != nil {
			t.Fatal(err)
		}
		status := fields["status"].(string)
		if _, ok := fields["deleted_at"]; !ok {
			t.Errorf("item %d: deleted_at missing", i)
		}
		if _, ok := fields["purged_at"]; ok != (status == StatusPurged) {
			t.Errorf("item %d (%s): purged_at present = %v", i, status, ok)
		}
		if _, ok := fields["reason"]; ok != (status != StatusPurged) {
			t.Errorf("item %d (%s): reason present = %v", i, status, ok)
		}
		if r, ok := fields["recovered"]; ok && r != true {
			t.Errorf("item %d: recovered = %v", i, r)
		}
		for _, banned := range []string{"title", "body", "author"} {
			if _, ok := fields[banned]; ok {
				t.Errorf("item %d carries %s", i, banned)
			}
		}
	}
	if !strings.Contains(string(lines[3]), `"deleted_at":"0001-01-01T00:00:00Z"`) {
		t.Errorf("unknown deletion time not written as zero time: %s", lines[3])
	}
	if !strings.Contains(string(lines[2]), `"recovered":true`) || strings.Contains(string(lines[1]), "recovered") {
		t.Errorf("recovered written wrongly:\n%s\n%s", lines[1], lines[2])
	}
}

func TestWriterNormalisesItems(t *testing.T) {
	root := t.TempDir()
	clock := stepClock(fixedStart, time.Second)
	w, err := newWriter(root, "r", testHeader(), clock)
	if err != nil {
		t.Fatal(err)
	}
	east := time.FixedZone("east", 3*3600)
	items := []Item{
		// purged without purged_at: stamped with the time of writing.
		{ItemType: ItemThread, ItemID: "a", ThreadID: "a", Status: StatusPurged, DeletedAt: fixedStart.In(east)},
		// not purged: purged_at dropped.
		{ItemType: ItemThread, ItemID: "b", ThreadID: "b", Status: StatusDryRun, PurgedAt: ptrTime(fixedStart)},
		// overlong reason: shortened.
		{ItemType: ItemMessage, ItemID: "c", ThreadID: "b", Status: StatusFailed, Reason: strings.Repeat("é", maxReason)},
	}
	for _, it := range items {
		if err := w.Item(it); err != nil {
			t.Fatal(err)
		}
	}
	for _, bad := range []Item{
		{ItemType: "user", ItemID: "x", Status: StatusPurged},
		{ItemType: ItemThread, ItemID: "x", Status: "gone"},
	} {
		if err := w.Item(bad); !errors.Is(err, ErrInvalidRecord) {
			t.Errorf("Item(%+v) = %v, want ErrInvalidRecord", bad, err)
		}
	}
	if _, err := w.Close(Footer{Status: "done"}); !errors.Is(err, ErrInvalidRecord) {
		t.Errorf("Close with bad status = %v, want ErrInvalidRecord", err)
	}
	f := w.Counts()
	f.Status = RunCompleted
	path, err := w.Close(f)
	if err != nil {
		t.Fatal(err)
	}

	lines := fileLines(t, path)
	if len(lines) != 5 {
		t.Fatalf("got %d lines, want 5 (refused items must not be written)", len(lines))
	}
	var a, b, c Item
	for i, dst := range []*Item{&a, &b, &c} {
		if err := json.Unmarshal(lines[i+1], dst); err != nil {
			t.Fatal(err)
		}
	}
	// The header took the first clock reading; the purge time is the
	// second, read just before the item line's own time.
	if a.PurgedAt == nil || !a.PurgedAt.Equal(fixedStart.Add(time.Second)) {
		t.Errorf("purged_at = %v, want the time of writing", a.PurgedAt)
	}
	if !strings.Contains(string(lines[1]), `"deleted_at":"2025-03-01T02:00:00Z"`) {
		t.Errorf("deleted_at not in UTC: %s", lines[1])
	}
	if b.PurgedAt != nil {
		t.Errorf("dry-run item kept purged_at")
	}
	if len(c.Reason) > maxReason || !strings.HasPrefix(c.Reason, "éé") || !utf8Valid(c.Reason) {
		t.Errorf("reason not shortened on a rune boundary: %d bytes", len(c.Reason))
	}
	var footer Footer
	if err := json.Unmarshal(lines[4], &footer); err != nil {
		t.Fatal(err)
	}
	if footer.Scanned != 3 || footer.Eligible != 3 || footer.Purged != 1 || footer.Failed != 1 {
		t.Errorf("Counts footer = %+v", footer)
	}
}

func utf8Valid(s string) bool { return strings.ToValidUTF8(s, "\uFFFD") == s }

func TestCreateRejectsBadRunID(t *testing.T) {
	for _, id := range []string{"", "-lead", ".hidden", "a/b", "a:b", "a b", "ü", strings.Repeat("a", 129)} {
		_, err := Create(t.TempDir(), id, testHeader())
		if !errors.Is(err, ErrInvalidRunID) {
			t.Errorf("Create(%q) = %v, want ErrInvalidRunID", id, err)
		}
	}
	for _, id := range []string{"a", "0", "r.1_x-2", strings.Repeat("a", 128)} {
		w, err := Create(t.TempDir(), id, testHeader())
		if err != nil {
			t.Errorf("Create(%q) = %v", id, err)
			continue
		}
		if _, err := w.Close(Footer{Status: RunCompleted}); err != nil {
			t.Error(err)
		}
	}
}

func TestCreateRequiresStartTime(t *testing.T) {
	root := t.TempDir()
	h := testHeader()
	h.StartedAt = time.Time{}
	if _, err := Create(root, "r", h); !errors.Is(err, ErrInvalidRecord) {
		t.Fatalf("Create = %v, want ErrInvalidRecord", err)
	}
	assertEmptyDir(t, root)
}

func TestCreateUnwritableRoot(t *testing.T) {
	// Tests may run as root, which ignores permission bits: a regular file
	// where the folder should be makes every mkdir below it fail.
	root := filepath.Join(t.TempDir(), "audit")
	if err := os.WriteFile(root, []byte("not a folder"), 0o600); err != nil {
		t.Fatal(err)
	}
	w, err := Create(root, "r", testHeader())
	if !errors.Is(err, ErrUnwritable) {
		t.Fatalf("Create = %v, %v; want ErrUnwritable", w, err)
	}
	data, err := os.ReadFile(root)
	if err != nil || string(data) != "not a folder" {
		t.Fatalf("root file changed: %q, %v", data, err)
	}

	// Nested below a file: the parents cannot be made either, and the ones
	// that could be made are not left behind.
	base := t.TempDir()
	if err := os.WriteFile(filepath.Join(base, "f"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Create(filepath.Join(base, "f", "audit"), "r", testHeader()); !errors.Is(err, ErrUnwritable) {
		t.Fatalf("Create under a file = %v, want ErrUnwritable", err)
	}
	if _, err := Create("", "r", testHeader()); !errors.Is(err, ErrUnwritable) {
		t.Fatalf("Create with no root = %v, want ErrUnwritable", err)
	}
}

func TestCreateLeavesNothingWhenFileExists(t *testing.T) {
	root := t.TempDir()
	path := writeRun(t, root, "r")
	before, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	// Same run ID and start second: the sealed file must not be touched.
	if _, err := Create(root, "r", testHeader()); !errors.Is(err, ErrUnwritable) {
		t.Fatalf("Create over a sealed file = %v, want ErrUnwritable", err)
	}
	after, err := os.ReadFile(path)
	if err != nil || string(after) != string(before) {
		t.Fatalf("sealed file changed: %v", err)
	}
	entries, _ := os.ReadDir(filepath.Dir(path))
	if len(entries) != 1 {
		t.Fatalf("month folder holds %d entries, want only the sealed file", len(entries))
	}
}

func TestCreateCreatesRootAndFolderModes(t *testing.T) {
	root := filepath.Join(t.TempDir(), "db", "purge_audit")
	w, err := Create(root, "r", testHeader())
	if err != nil {
		t.Fatal(err)
	}
	assertMode(t, root, dirMode)
	assertMode(t, filepath.Join(root, "2025-03"), dirMode)
	assertMode(t, w.Path(), fileMode)
	path, err := w.Close(Footer{Status: RunCompleted})
	if err != nil {
		t.Fatal(err)
	}
	assertMode(t, path, fileMode)
}

func TestWriterAfterClose(t *testing.T) {
	root := t.TempDir()
	w, err := Create(root, "r", testHeader())
	if err != nil {
		t.Fatal(err)
	}
	path, err := w.Close(Footer{Status: RunCompleted})
	if err != nil {
		t.Fatal(err)
	}
	if w.Path() != path {
		t.Errorf("Path() = %s, want %s", w.Path(), path)
	}
	if err := w.Item(testItems()[0]); !errors.Is(err, ErrClosed) {
		t.Errorf("Item after Close = %v", err)
	}
	if err := w.Sync(); !errors.Is(err, ErrClosed) {
		t.Errorf("Sync after Close = %v", err)
	}
	if _, err := w.Close(Footer{Status: RunCompleted}); !errors.Is(err, ErrClosed) {
		t.Errorf("Close after Close = %v", err)
	}
}

func TestWriterErrorIsSticky(t *testing.T) {
	w, err := Create(t.TempDir(), "r", testHeader())
	if err != nil {
		t.Fatal(err)
	}
	// Pull the file away underneath the writer: the next flush fails.
	if err := w.f.Close(); err != nil {
		t.Fatal(err)
	}
	if err := w.Item(testItems()[0]); err != nil {
		t.Fatalf("buffered Item = %v", err)
	}
	first := w.Sync()
	if first == nil {
		t.Fatal("Sync on a closed file succeeded")
	}
	for name, call := range map[string]func() error{
		"Item":  func() error { return w.Item(testItems()[1]) },
		"Sync":  w.Sync,
		"Close": func() error { _, err := w.Close(Footer{Status: RunCompleted}); return err },
	} {
		if err := call(); err != first {
			t.Errorf("%s after a write error = %v, want the first error %v", name, err, first)
		}
	}
	if !strings.HasSuffix(w.Path(), extInProgress) {
		t.Errorf("failed writer's file renamed: %s", w.Path())
	}
}

func TestWriterSyncMakesRecordsVisible(t *testing.T) {
	w, err := Create(t.TempDir(), "r", testHeader())
	if err != nil {
		t.Fatal(err)
	}
	if got := len(fileLines(t, w.Path())); got != 1 {
		t.Fatalf("after Create: %d lines, want the header", got)
	}
	if err := w.Item(testItems()[0]); err != nil {
		t.Fatal(err)
	}
	if err := w.Sync(); err != nil {
		t.Fatal(err)
	}
	if got := len(fileLines(t, w.Path())); got != 2 {
		t.Fatalf("after Sync: %d lines, want 2", got)
	}
	if _, err := w.Close(Footer{Status: RunCompleted}); err != nil {
		t.Fatal(err)
	}
}

var hexLine = regexp.MustCompile(`^[0-9a-f]{64}$`)

func TestLineHashIsHexSHA256(t *testing.T) {
	h := lineHash([]byte("abc"))
	if h != "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad" || !hexLine.MatchString(h) {
		t.Fatalf("lineHash(abc) = %s", h)
	}
}

func assertMode(t *testing.T, path string, want os.FileMode) {
	t.Helper()
	info, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if got := info.Mode().Perm(); got != want {
		t.Errorf("%s mode = %o, want %o", path, got, want)
	}
}

func assertEmptyDir(t *testing.T, dir string) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 0 {
		t.Fatalf("%s not empty: %v", dir, entries)
	}
}
