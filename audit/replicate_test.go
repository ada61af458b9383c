package audit

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// A replicated writer touches no file: every replica writes the lines it
// hands over, and ends with the same sealed file, byte for byte. An
// operation applied again (a replica that crashed before saving its
// applied index) writes nothing twice, and a torn line left by a crashed
// append is cut before the lines are written again.
func TestReplicatedWriterFilesAreTheSameEverywhere(t *testing.T) {
	roots := []string{t.TempDir(), t.TempDir()}
	var ops []FileOp
	replicate := func(op FileOp) error {
		ops = append(ops, op)
		for _, r := range roots {
			if err := ApplyFileOp(r, op); err != nil {
				return err
			}
		}
		return nil
	}
	leader := t.TempDir() // the writer's own root: it writes nothing there
	w, err := newWriterWith(leader, "rep", testHeader(), stepClock(fixedStart, time.Millisecond), Options{Replicate: replicate})
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"a", "b", "c"} {
		if err := w.Item(Item{ItemType: ItemThread, ItemID: id, ThreadID: id, Status: StatusPurged, DeletedAt: fixedStart}); err != nil {
			t.Fatal(err)
		}
		if id != "b" { // two records in one operation, then one
			if err := w.Sync(); err != nil {
				t.Fatal(err)
			}
		}
	}
	f := w.Counts()
	f.Status, f.FinishedAt = RunCompleted, fixedStart.Add(time.Second)
	final, err := w.Close(f)
	if err != nil {
		t.Fatal(err)
	}
	if len(ops) != 4 || !ops[3].Seal {
		t.Fatalf("operations %+v", ops)
	}
	if entries, _ := os.ReadDir(leader); len(entries) != 0 {
		t.Fatalf("the replicated writer wrote %d entries itself", len(entries))
	}
	rel, err := filepath.Rel(leader, final)
	if err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile(filepath.Join(roots[0], rel))
	if err != nil {
		t.Fatal(err)
	}

	// A replica applying every operation twice, and one whose append of
	// the third operation was torn by a crash before it applied it again.
	again, torn := t.TempDir(), t.TempDir()
	for i, op := range ops {
		for range 2 {
			if err := ApplyFileOp(again, op); err != nil {
				t.Fatal(err)
			}
		}
		if i == 2 {
			f, err := os.OpenFile(filepath.Join(torn, rel+suffixInProgress), os.O_WRONLY|os.O_APPEND, 0)
			if err != nil {
				t.Fatal(err)
			}
			_, _ = f.Write(op.Lines[0][:10])
			_ = f.Close()
		}
		if err := ApplyFileOp(torn, op); err != nil {
			t.Fatal(err)
		}
	}
	for _, r := range append(roots[1:], again, torn) {
		got, err := os.ReadFile(filepath.Join(r, rel))
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("%s differs from the first replica's file: %v", r, err)
		}
		if rep, err := VerifyDir(r); err != nil || len(rep.Problems) > 0 || rep.Verified != 1 {
			t.Fatalf("%s: %+v %v", r, rep, err)
		}
	}

	// A file missing its beginning, a gap or a name outside the trail is
	// refused.
	if err := ApplyFileOp(t.TempDir(), ops[1]); !errors.Is(err, ErrFileMissing) {
		t.Fatalf("lines of a missing file: %v", err)
	}
	gap := t.TempDir()
	if err := ApplyFileOp(gap, ops[0]); err != nil {
		t.Fatal(err)
	}
	if err := ApplyFileOp(gap, FileOp{Name: ops[1].Name, Seq: 5, Lines: ops[1].Lines}); !errors.Is(err, ErrFileOp) {
		t.Fatal("a gap was applied")
	}
	if err := ApplyFileOp(t.TempDir(), FileOp{Name: "../x/" + filepath.Base(rel), Lines: ops[0].Lines}); err == nil {
		t.Fatal("a name outside the trail was applied")
	}
}
