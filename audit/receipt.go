package audit

import (
	"bytes"
	"crypto/ed25519"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// A receipt proves a subject erasure (spec §12) to someone who trusts the
// audit signing key and nothing else: it names the subject only as an
// HMAC, lists every item erased, and points at the audit lines that record
// each one, with their hashes and the signed footers of their files.
// VerifyReceipt checks it against the audit files alone.

// ReceiptFormat is the format of the receipts this version writes.
const ReceiptFormat = 1

// CauseSubject is the cause of an item purged by a subject erasure.
const CauseSubject = "subject"

// TriggerErasure is the trigger of a run started for a subject erasure.
const TriggerErasure = "erasure"

// Receipt is the document `progressdb erasure receipt` writes.
type Receipt struct {
	Format      int           `json:"format"`
	ErasureID   string        `json:"erasure_id"`
	RequestedAt time.Time     `json:"requested_at"`
	CompletedAt time.Time     `json:"completed_at"`
	Subject     string        `json:"subject"` // hmac-sha256:<hex> with the server's receipt key
	DatabaseID  string        `json:"database_id"`
	Items       []ReceiptItem `json:"items"`
	HeldThreads []string      `json:"held_threads"`
	Audit       []ReceiptFile `json:"audit"`
	// Shards, on a cluster (spec §11.1), are the shards the receipt
	// covers, each with its database; its files are then named
	// shards/<n>/… under the cluster's audit folders gathered in one.
	Shards []ReceiptShard `json:"shards,omitempty"`
}

// ReceiptShard is one shard a cluster's receipt covers.
type ReceiptShard struct {
	Shard      int    `json:"shard"`
	DatabaseID string `json:"database_id"`
}

// ReceiptItem is one item erased.
type ReceiptItem struct {
	ItemType string `json:"item_type"`
	ItemID   string `json:"item_id"`
	ThreadID string `json:"thread_id"`
}

// ReceiptFile is one audit file that records items of the receipt.
type ReceiptFile struct {
	File         string        `json:"file"` // relative to the audit folder, with /
	Lines        []ReceiptLine `json:"lines"`
	FooterSHA256 string        `json:"footer_sha256"`
	Signature    string        `json:"signature"` // the footer's; "" when unsigned
}

// ReceiptLine is one item line of an audit file.
type ReceiptLine struct {
	Seq    int64  `json:"seq"`
	SHA256 string `json:"sha256"` // hex SHA-256 of the line, without its newline
}

// ErasedBy reports whether it is the record of an item erasure id purged.
func (it *Item) ErasedBy(id string) bool {
	return it.Cause == CauseSubject && it.Status == StatusPurged && it.ErasureID == id
}

// AddReceiptFiles fills r.Items and r.Audit from the sealed audit files
// of runs (run IDs, in any order) under root: every item line purged for
// erasure r.ErasureID. A run without a sealed file recorded nothing.
func AddReceiptFiles(r *Receipt, root string, runs []string) error {
	files, err := runFiles(root, runs)
	if err != nil {
		return err
	}
	for _, path := range files {
		rf, items, _, err := receiptFile(path, r.ErasureID)
		if err != nil {
			return err
		}
		if len(rf.Lines) == 0 {
			continue
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return fmt.Errorf("audit: %w", err)
		}
		rf.File = filepath.ToSlash(rel)
		r.Audit = append(r.Audit, rf)
		r.Items = append(r.Items, items...)
	}
	return nil
}

// CountErased counts the messages erasure id purged, and their versions,
// in the sealed files of runs under root (as AddReceiptFiles lists them).
func CountErased(root string, runs []string, id string) (messages, versions int64, err error) {
	files, err := runFiles(root, runs)
	if err != nil {
		return 0, 0, err
	}
	for _, path := range files {
		rf, _, v, err := receiptFile(path, id)
		if err != nil {
			return 0, 0, err
		}
		messages += int64(len(rf.Lines))
		versions += v
	}
	return messages, versions, nil
}

// runFiles lists the sealed files of runs under root, in run order.
func runFiles(root string, runs []string) ([]string, error) {
	files, err := monthFiles(root, func(name string) bool { return isAuditName(name, extSealed) })
	if err != nil {
		return nil, err
	}
	slices.SortFunc(files, func(a, b string) int { return strings.Compare(filepath.Base(a), filepath.Base(b)) })
	return slices.DeleteFunc(files, func(path string) bool {
		_, runID, ok := ParseName(path)
		return !ok || !slices.Contains(runs, runID)
	}), nil
}

// receiptFile reads one sealed file's lines of erasure id, the versions
// they purged, and its footer.
func receiptFile(path, id string) (ReceiptFile, []ReceiptItem, int64, error) {
	var rf ReceiptFile
	var items []ReceiptItem
	var versions int64
	rd, err := Open(path)
	if err != nil {
		return rf, nil, 0, err
	}
	defer rd.Close()
	for {
		rec, err := rd.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return rf, nil, 0, err
		}
		switch {
		case rec.Item != nil && rec.Item.ErasedBy(id):
			rf.Lines = append(rf.Lines, ReceiptLine{Seq: rec.Seq, SHA256: lineHash(rec.Raw)})
			items = append(items, ReceiptItem{ItemType: rec.Item.ItemType, ItemID: rec.Item.ItemID, ThreadID: rec.Item.ThreadID})
			versions += rec.Item.Versions
		case rec.Footer != nil:
			rf.FooterSHA256, rf.Signature = lineHash(rec.Raw), rec.Footer.Signature
		}
	}
	if rf.FooterSHA256 == "" {
		return rf, nil, 0, &Problem{File: path, Reason: "no footer: the run's file is incomplete"}
	}
	return rf, items, versions, nil
}

// VerifyReceipt checks a receipt against the audit files under root and
// returns every problem found (none: it verifies). Each file it names
// must verify whole (chain from header to footer, counts) with its footer
// signed by pub and matching footer_sha256 and signature; each line it
// names must be at its seq with its hash, and be the "purged" record, with
// cause subject, of this erasure, of an item the receipt lists; and every
// item listed must have exactly one such line. The subject is not checked:
// only the server holds the key of its HMAC.
func VerifyReceipt(r Receipt, root string, pub ed25519.PublicKey) []Problem {
	var problems []Problem
	bad := func(file string, line int, format string, args ...any) {
		problems = append(problems, Problem{File: file, Line: line, Reason: fmt.Sprintf(format, args...)})
	}
	if r.Format != ReceiptFormat {
		bad("receipt", 0, "format is %d, want %d", r.Format, ReceiptFormat)
		return problems
	}
	if r.ErasureID == "" {
		bad("receipt", 0, "erasure_id is empty")
	}
	if pub == nil {
		bad("receipt", 0, "no public key: a receipt is verified against the audit signing key")
		return problems
	}
	listed := make(map[ReceiptItem]int) // times the receipt lists it
	for _, it := range r.Items {
		listed[it]++
		if listed[it] == 2 {
			bad("receipt", 0, "item %s %s (thread %s) is listed twice", it.ItemType, it.ItemID, it.ThreadID)
		}
	}
	recorded := make(map[ReceiptItem]int) // lines that record it
	files := make(map[string]bool)
	// A file that cannot be checked says nothing of the items it holds:
	// they are not reported again as recorded nowhere.
	unchecked := false
	for _, rf := range r.Audit {
		if files[rf.File] {
			bad(rf.File, 0, "file is named twice in the receipt")
			continue
		}
		files[rf.File] = true
		if !localName(rf.File) {
			bad(rf.File, 0, "not a file name inside the audit folder")
			unchecked = true
			continue
		}
		if rf.Signature == "" {
			bad(rf.File, 0, "unsigned: the server that wrote it had no audit signing key, and a receipt is verified by its files' signatures: "+
				"this one cannot be (runs signed from now on can)")
			unchecked = true
			continue
		}
		records, err := checkedRecords(filepath.Join(root, filepath.FromSlash(rf.File)), pub)
		if err != nil {
			unchecked = true
			var p *Problem
			if errors.As(err, &p) {
				p.File = rf.File
				problems = append(problems, *p)
			} else {
				bad(rf.File, 0, "%v", err)
			}
			continue
		}
		footer := records[len(records)-1]
		if lineHash(footer.Raw) != rf.FooterSHA256 {
			bad(rf.File, footer.Line, "footer SHA-256 is not the receipt's footer_sha256")
		}
		if footer.Footer.Signature != rf.Signature {
			bad(rf.File, footer.Line, "footer signature is not the receipt's signature")
		}
		for _, l := range rf.Lines {
			if l.Seq <= 0 || l.Seq >= int64(len(records)-1) {
				bad(rf.File, 0, "seq %d: no item line has it", l.Seq)
				continue
			}
			rec := records[l.Seq] // a verified file's seq is its index
			switch it := rec.Item; {
			case lineHash(rec.Raw) != l.SHA256:
				bad(rf.File, rec.Line, "seq %d: SHA-256 of the line is not the receipt's", l.Seq)
			case it == nil:
				bad(rf.File, rec.Line, "seq %d: not an item record", l.Seq)
			case it.Cause != CauseSubject:
				bad(rf.File, rec.Line, "seq %d: cause is %q, want %q", l.Seq, it.Cause, CauseSubject)
			case it.Status != StatusPurged:
				bad(rf.File, rec.Line, "seq %d: status is %q, want %q", l.Seq, it.Status, StatusPurged)
			case it.ErasureID != r.ErasureID:
				bad(rf.File, rec.Line, "seq %d: erasure_id is %q, want %q", l.Seq, it.ErasureID, r.ErasureID)
			default:
				key := ReceiptItem{ItemType: it.ItemType, ItemID: it.ItemID, ThreadID: it.ThreadID}
				if listed[key] == 0 {
					bad(rf.File, rec.Line, "seq %d: records %s %s, which the receipt does not list", l.Seq, it.ItemType, it.ItemID)
				}
				recorded[key]++
			}
		}
	}
	for _, it := range r.Items {
		switch n := recorded[it]; {
		case n == 0 && unchecked:
		case n == 0:
			bad("receipt", 0, "item %s %s (thread %s): no audit line of the receipt records it", it.ItemType, it.ItemID, it.ThreadID)
		case n > 1:
			bad("receipt", 0, "item %s %s (thread %s): %d audit lines record it, want one", it.ItemType, it.ItemID, it.ThreadID, n)
		}
		recorded[it] = 1 // report an item listed twice once
	}
	return problems
}

// localName reports whether a receipt's file name stays inside the folder.
func localName(name string) bool {
	return name != "" && filepath.IsLocal(filepath.FromSlash(name)) && !strings.Contains(name, "\\")
}

// checkedRecords reads a sealed file whole, verified as VerifyFile does
// and with its footer signed by pub: its records, in seq order. The file
// is read once, so what is verified is what is returned.
func checkedRecords(path string, pub ed25519.PublicKey) ([]Record, error) {
	f, err := openRegular(path, os.O_RDONLY)
	if err != nil {
		return nil, fmt.Errorf("audit: %w", err)
	}
	data, err := io.ReadAll(f)
	_ = f.Close()
	if err != nil {
		return nil, fmt.Errorf("audit: read %s: %w", path, err)
	}
	if _, err := verify(NewReader(bytes.NewReader(data), path), path, pub); err != nil {
		return nil, err
	}
	rd := NewReader(bytes.NewReader(data), path)
	var out []Record
	for {
		rec, err := rd.Next()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		out = append(out, rec)
	}
}
