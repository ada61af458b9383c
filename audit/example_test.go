package audit_test

import (
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/progressdb/progressdb/audit"
)

// A run writes its header, one record per item and a footer; the sealed
// file then verifies.
func Example() {
	root, err := os.MkdirTemp("", "audit-example")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(root)

	start := time.Date(2025, 3, 1, 2, 0, 0, 0, time.UTC)
	w, err := audit.Create(root, "run-42", audit.Header{StartedAt: start, Period: "720h0m0s", Epoch: 3})
	if err != nil {
		fmt.Println(err) // nothing may be deleted now
		return
	}
	purgedAt := start.Add(time.Second)
	_ = w.Item(audit.Item{
		ItemType: audit.ItemThread, ItemID: "t1", ThreadID: "t1",
		DeletedAt: start.Add(-31 * 24 * time.Hour), Status: audit.StatusPurged,
		KeysDeleted: 5, PurgedAt: &purgedAt,
	})
	footer := w.Counts()
	footer.Status = audit.RunCompleted
	footer.FinishedAt = start.Add(2 * time.Second)
	path, err := w.Close(footer)
	if err != nil {
		fmt.Println(err)
		return
	}
	rel, _ := filepath.Rel(root, path)
	fmt.Println(filepath.ToSlash(rel))
	fmt.Println("verify:", audit.VerifyFile(path))

	r, err := audit.Open(path)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer r.Close()
	for {
		rec, err := r.Next()
		if err != nil {
			break // io.EOF at the end
		}
		fmt.Println(rec.Seq, rec.Msg)
	}
	// Output:
	// 2025-03/retention-20250301T020000Z-run-42.jsonl
	// verify: <nil>
	// 0 retention_audit_header
	// 1 retention_audit_item
	// 2 retention_audit_footer
}
