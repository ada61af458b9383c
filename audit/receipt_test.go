package audit

import (
	"bytes"
	"crypto/ed25519"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// erasureTrail writes two signed runs under root that purge items for
// erasure "e1" (and, in the first, an item of another erasure, one of
// another cause and a skipped thread of e1), and returns the receipt
// built from them.
func erasureTrail(t *testing.T, root string, key ed25519.PrivateKey) Receipt {
	t.Helper()
	purged := func(id, tid, erasure, cause string) Item {
		return Item{ItemType: ItemMessage, ItemID: id, ThreadID: tid, Status: StatusPurged, Cause: cause,
			KeysDeleted: 2, ErasureID: erasure, PurgedAt: ptrTime(fixedStart)}
	}
	runs := [][]Item{
		{
			purged("m1", "t1", "e1", CauseSubject),
			purged("m2", "t1", "e1", CauseSubject),
			purged("m9", "t1", "e2", CauseSubject),
			purged("m8", "t2", "", CauseDeleted),
			{ItemType: ItemThread, ItemID: "t3", ThreadID: "t3", Status: StatusSkipped, Cause: CauseSubject,
				ErasureID: "e1", Reason: "legal hold"},
		},
		{purged("m3", "t2", "e1", CauseSubject)},
	}
	var ids []string
	for i, items := range runs {
		id := []string{"run000000001", "run000000002"}[i]
		ids = append(ids, id)
		h := testHeader()
		h.StartedAt = fixedStart.Add(time.Duration(i) * time.Minute)
		h.Trigger = TriggerErasure
		w, err := newWriter(root, id, h, stepClock(h.StartedAt, time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		w.key = key
		for _, it := range items {
			if err := w.Item(it); err != nil {
				t.Fatal(err)
			}
		}
		f := w.Counts()
		f.FinishedAt, f.Status = h.StartedAt.Add(time.Second), RunCompleted
		if _, err := w.Close(f); err != nil {
			t.Fatal(err)
		}
	}
	r := Receipt{Format: ReceiptFormat, ErasureID: "e1", RequestedAt: fixedStart, CompletedAt: fixedStart.Add(time.Hour),
		Subject: "hmac-sha256:00", DatabaseID: "db1", HeldThreads: []string{"t3"}}
	if err := AddReceiptFiles(&r, root, ids); err != nil {
		t.Fatal(err)
	}
	return r
}

// A receipt built from a real trail lists exactly the erasure's purged
// items, one line each, and verifies; every kind of tampering with the
// trail or the receipt is found and named.
func TestReceiptVerifies(t *testing.T) {
	pub, priv := newKey(t)
	root := t.TempDir()
	r := erasureTrail(t, root, priv)

	var got []string
	for _, it := range r.Items {
		got = append(got, it.ItemID)
	}
	if want := []string{"m1", "m2", "m3"}; !slices.Equal(got, want) {
		t.Fatalf("receipt items %v, want %v", got, want)
	}
	if len(r.Audit) != 2 || len(r.Audit[0].Lines) != 2 || r.Audit[0].Signature == "" {
		t.Fatalf("receipt audit %+v", r.Audit)
	}
	if ps := VerifyReceipt(r, root, pub); len(ps) != 0 {
		t.Fatalf("a true receipt does not verify: %v", ps)
	}
}

func TestReceiptTampering(t *testing.T) {
	pub, priv := newKey(t)
	otherPub, otherPriv := newKey(t)
	for _, c := range []struct {
		name string
		// trail changes the audit files, receipt the receipt; either may
		// be nil. want is in the reason of some problem.
		trail   func(t *testing.T, root string, r Receipt)
		receipt func(r *Receipt, root string)
		pub     ed25519.PublicKey
		want    string
	}{
		{name: "edited line", want: "line changed", trail: func(t *testing.T, root string, r Receipt) {
			editFile(t, filepath.Join(root, r.Audit[0].File), func(lines [][]byte) [][]byte {
				lines[1] = bytes.Replace(lines[1], []byte(`"m1"`), []byte(`"mX"`), 1)
				return lines
			})
		}},
		{name: "missing line", want: "a line is missing", trail: func(t *testing.T, root string, r Receipt) {
			editFile(t, filepath.Join(root, r.Audit[0].File), func(lines [][]byte) [][]byte {
				return slices.Delete(lines, 2, 3)
			})
		}},
		{name: "missing file", want: "no such file", trail: func(t *testing.T, root string, r Receipt) {
			if err := os.Remove(filepath.Join(root, r.Audit[1].File)); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "footer re-signed by another key", want: "signature does not verify", trail: func(t *testing.T, root string, r Receipt) {
			path := filepath.Join(root, r.Audit[0].File)
			editFile(t, path, func(lines [][]byte) [][]byte {
				last := len(lines) - 1
				rec, reason := parseLine(lines[last])
				if reason != "" {
					t.Fatal(reason)
				}
				line, err := encodeFooter(rec.Time, rec.RunID, rec.Seq, rec.Prev, *rec.Footer, otherPriv)
				if err != nil {
					t.Fatal(err)
				}
				lines[last] = line
				return lines
			})
		}},
		{name: "verified with another key", want: "signature does not verify", pub: otherPub},
		{name: "footer hash not the receipt's", want: "footer SHA-256", receipt: func(r *Receipt, _ string) {
			r.Audit[0].FooterSHA256 = strings.Repeat("0", 64)
		}},
		{name: "line hash not the receipt's", want: "SHA-256 of the line", receipt: func(r *Receipt, _ string) {
			r.Audit[0].Lines[0].SHA256 = strings.Repeat("0", 64)
		}},
		{name: "item listed twice", want: "listed twice", receipt: func(r *Receipt, _ string) {
			r.Items = append(r.Items, r.Items[0])
		}},
		{name: "item missing from the trail", want: "no audit line of the receipt records it", receipt: func(r *Receipt, _ string) {
			r.Items = append(r.Items, ReceiptItem{ItemType: ItemMessage, ItemID: "m7", ThreadID: "t1"})
		}},
		{name: "item missing from the receipt", want: "which the receipt does not list", receipt: func(r *Receipt, _ string) {
			r.Items = r.Items[1:]
		}},
		{name: "a line given twice", want: "2 audit lines record it", receipt: func(r *Receipt, _ string) {
			r.Audit[0].Lines = append(r.Audit[0].Lines, r.Audit[0].Lines[0])
		}},
		{name: "another erasure's line", want: `erasure_id is "e2"`, receipt: func(r *Receipt, root string) {
			r.Audit[0].Lines[0] = lineAt(t, root, r, 3)
		}},
		{name: "a line of another cause", want: `cause is "deleted"`, receipt: func(r *Receipt, root string) {
			r.Audit[0].Lines[0] = lineAt(t, root, r, 4)
		}},
		{name: "a skipped line", want: `status is "skipped"`, receipt: func(r *Receipt, root string) {
			r.Audit[0].Lines[0] = lineAt(t, root, r, 5)
		}},
		{name: "the header as an item", want: "no item line has it", receipt: func(r *Receipt, _ string) {
			r.Audit[0].Lines[0].Seq = 0
		}},
		{name: "a file outside the folder", want: "not a file name inside", receipt: func(r *Receipt, _ string) {
			r.Audit[0].File = "../" + r.Audit[0].File
		}},
		{name: "unknown format", want: "format is 2", receipt: func(r *Receipt, _ string) { r.Format = 2 }},
	} {
		t.Run(c.name, func(t *testing.T) {
			root := t.TempDir()
			r := erasureTrail(t, root, priv)
			if c.trail != nil {
				c.trail(t, root, r)
			}
			if c.receipt != nil {
				c.receipt(&r, root)
			}
			key := pub
			if c.pub != nil {
				key = c.pub
			}
			ps := VerifyReceipt(r, root, key)
			if !slices.ContainsFunc(ps, func(p Problem) bool { return strings.Contains(p.Error(), c.want) }) {
				t.Fatalf("problems %v, want one saying %q", ps, c.want)
			}
		})
	}
}

// lineAt is the receipt line of seq in the receipt's first file, with
// its true hash.
func lineAt(t *testing.T, root string, r *Receipt, seq int64) ReceiptLine {
	t.Helper()
	lines := fileLines(t, filepath.Join(root, r.Audit[0].File))
	return ReceiptLine{Seq: seq, SHA256: lineHash(lines[seq])}
}

// editFile rewrites a sealed file's lines.
func editFile(t *testing.T, path string, edit func([][]byte) [][]byte) {
	t.Helper()
	lines := edit(fileLines(t, path))
	if err := os.WriteFile(path, append(bytes.Join(lines, []byte("\n")), '\n'), 0o640); err != nil {
		t.Fatal(err)
	}
}
