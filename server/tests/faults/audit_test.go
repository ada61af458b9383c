package faults

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/progressdb/progressdb/audit"
	"github.com/progressdb/progressdb/server/pkg/store"
)

// The suite reads audit files with its own decoder, from the contract of
// spec §5, rather than with the audit package it checks.

// auditLine is one line of an audit file: the common fields and those of
// the header, item and footer records.
type auditLine struct {
	Msg   string    `json:"msg"`
	Time  time.Time `json:"time"`
	RunID string    `json:"run_id"`
	Seq   int64     `json:"seq"`

	StartedAt time.Time `json:"started_at"` // header
	DryRun    bool      `json:"dry_run"`
	Owner     string    `json:"owner"`
	Epoch     int64     `json:"epoch"`
	Trigger   string    `json:"trigger"` // replays (spec §10)
	BackupID  string    `json:"backup_id"`
	// DatabaseID and OriginID name the database a run purged and, for a
	// restored copy, the one it came from (spec §10.1).
	DatabaseID string `json:"database_id"`
	OriginID   string `json:"origin_id"`

	ItemType    string     `json:"item_type"` // item
	ItemID      string     `json:"item_id"`
	ThreadID    string     `json:"thread_id"`
	Status      string     `json:"status"` // item and footer
	Cause       string     `json:"cause"`
	KeysDeleted int64      `json:"keys_deleted"`
	PurgedAt    *time.Time `json:"purged_at"`
	Reason      string     `json:"reason"` // item and footer
	Recovered   bool       `json:"recovered"`
	Replayed    bool       `json:"replayed"`
	ErasureID   string     `json:"erasure_id"` // subject erasures (spec §12)
	Shredded    bool       `json:"shredded"`   // a sealing server's thread purge (spec §12)
	// Attachments (spec §16): the message, the bytes' size and digest,
	// and for an orphan's removal the object removed.
	MessageID string `json:"message_id"`
	Size      *int64 `json:"size"`
	SHA256    string `json:"sha256"`
	Orphan    bool   `json:"orphan"`
	Blob      string `json:"blob"`

	FinishedAt time.Time `json:"finished_at"` // footer
}

func (l auditLine) ref() itemRef { return itemRef{store.ItemKind(l.ItemType), l.ItemID} }

// auditFile is one run's file.
type auditFile struct {
	path   string
	sealed bool // named .jsonl
	header *auditLine
	items  []auditLine
	footer *auditLine
}

func (f auditFile) runID() string {
	if f.header != nil {
		return f.header.RunID
	}
	// retention-<YYYYMMDDTHHMMSSZ>-<run_id>.jsonl[.inprogress]
	name := strings.TrimSuffix(strings.TrimSuffix(filepath.Base(f.path), ".inprogress"), ".jsonl")
	return name[strings.LastIndexByte(name, '-')+1:]
}

// readAudit reads every audit file under root, oldest run first. A torn
// last line of a file in progress (a kill in mid-write) is ignored; any
// other line that does not decode is an error.
func readAudit(t testing.TB, root string) []auditFile {
	t.Helper()
	var files []auditFile
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() || !strings.HasPrefix(name, "retention-") {
			return nil
		}
		sealed := strings.HasSuffix(name, ".jsonl")
		if !sealed && !strings.HasSuffix(name, ".jsonl.inprogress") {
			return nil
		}
		files = append(files, readAuditFile(t, path, sealed))
		return nil
	})
	if err != nil && !os.IsNotExist(err) {
		t.Fatalf("read audit folder %s: %v", root, err)
	}
	sort.SliceStable(files, func(i, j int) bool {
		return files[i].start().Before(files[j].start())
	})
	return files
}

func (f auditFile) start() time.Time {
	if f.header != nil {
		return f.header.StartedAt
	}
	return time.Time{}
}

func readAuditFile(t testing.TB, path string, sealed bool) auditFile {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read %s: %v", path, err)
	}
	f := auditFile{path: path, sealed: sealed}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(nil, 1<<20)
	for n := 1; sc.Scan(); n++ {
		var l auditLine
		torn := n == bytes.Count(data, []byte("\n"))+1 // no newline after it
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			if torn && !sealed {
				break
			}
			t.Errorf("%s:%d: does not decode: %v", path, n, err)
			continue
		}
		switch l.Msg {
		case audit.MsgHeader:
			f.header = &l
		case audit.MsgItem:
			f.items = append(f.items, l)
		case audit.MsgFooter:
			f.footer = &l
		default:
			t.Errorf("%s:%d: unknown record %q", path, n, l.Msg)
		}
	}
	return f
}

// purgedRecords maps each item to its "purged" records across files.
func purgedRecords(files []auditFile) map[itemRef][]auditLine {
	m := map[itemRef][]auditLine{}
	for _, f := range files {
		for _, it := range f.items {
			if it.Status == audit.StatusPurged {
				m[it.ref()] = append(m[it.ref()], it)
			}
		}
	}
	return m
}

// itemsWithStatus returns the items recorded with status in any file.
func itemsWithStatus(files []auditFile, status string) map[itemRef]auditLine {
	m := map[itemRef]auditLine{}
	for _, f := range files {
		for _, it := range f.items {
			if it.Status == status {
				m[it.ref()] = it
			}
		}
	}
	return m
}

// inProgress returns the files still named .inprogress.
func inProgress(files []auditFile) []auditFile {
	var out []auditFile
	for _, f := range files {
		if !f.sealed {
			out = append(out, f)
		}
	}
	return out
}

// fileOfRun returns the file of run id, or nil.
func fileOfRun(files []auditFile, id string) *auditFile {
	for i := range files {
		if files[i].runID() == id {
			return &files[i]
		}
	}
	return nil
}
