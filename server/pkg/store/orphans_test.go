package store_test

import (
	"context"
	"errors"
	"testing"

	"github.com/progressdb/progressdb/server/pkg/store"
)

// An orphan's removal is owed only while no record names its attachment,
// and once it is owed no record may name it: an upload that comes after
// the sweep took its blob is refused, so a record never names a blob
// being removed.
func TestOrphanDebtAndRecordExcludeEachOther(t *testing.T) {
	ctx := context.Background()
	s := openAt(t, t.TempDir()+"/data", newClock())
	createThread(t, s, "t1")
	appendMessage(t, s, "t1", "m1", "hello")
	recorded := addAttachment(t, s, "t1", "m1")
	debt := func(id, name string) store.OwedBlob {
		return store.OwedBlob{Name: name, Thread: "t1", Message: "m1", ID: id, RunID: "r1", Orphan: true}
	}
	if ok, err := s.OweOrphanBlob(ctx, debt(recorded.ID, recorded.BlobName())); err != nil || ok {
		t.Fatalf("owe the blob of a recorded attachment: %v, %v; want refused", ok, err)
	}
	if has, err := s.HasAttachmentRecord(ctx, "t1", "m1", recorded.ID); err != nil || !has {
		t.Fatalf("HasAttachmentRecord = %v, %v", has, err)
	}

	seal, err := s.NewAttachment(ctx, "t1", "m1")
	if err != nil {
		t.Fatal(err)
	}
	a := seal.Attachment
	if ok, err := s.OweOrphanBlob(ctx, debt(a.ID, a.BlobName())); err != nil || !ok {
		t.Fatalf("owe an orphan: %v, %v", ok, err)
	}
	if ok, err := s.OweOrphanBlob(ctx, debt(a.ID, a.BlobName())); err != nil || ok {
		t.Fatalf("owe it twice: %v, %v", ok, err)
	}
	a.Size, a.SHA256 = 1, "00"
	if _, err := s.AddAttachment(ctx, a); !errors.Is(err, store.ErrPurgeInProgress) {
		t.Fatalf("record an owed blob: %v, want ErrPurgeInProgress", err)
	}
	if has, _ := s.HasAttachmentRecord(ctx, "t1", "m1", a.ID); has {
		t.Fatal("a record names the owed blob")
	}

	// A leftover of an attachment may be owed under its own name; other
	// names are refused.
	if ok, err := s.OweOrphanBlob(ctx, debt(a.ID, a.BlobName()+".1f.tmp")); err != nil || !ok {
		t.Fatalf("owe a leftover: %v, %v", ok, err)
	}
	for _, name := range []string{"t1/m1/other", a.BlobName() + "/x", "t1/m2/" + a.ID} {
		if _, err := s.OweOrphanBlob(ctx, debt(a.ID, name)); !errors.Is(err, store.ErrInvalidArgument) {
			t.Errorf("owe %q for %s: %v, want ErrInvalidArgument", name, a.ID, err)
		}
	}
	owed, err := s.OwedBlobs(ctx)
	if err != nil || len(owed) != 2 || !owed[0].Orphan || !owed[1].Orphan {
		t.Fatalf("owed = %+v, %v; want the blob and its leftover", owed, err)
	}
}

// The sweep's cursor is kept, and forgotten when set empty.
func TestOrphanCursor(t *testing.T) {
	ctx := context.Background()
	s := openAt(t, t.TempDir()+"/data", newClock())
	for _, want := range []string{"t1/m1/a", "", "t2/m/b"} {
		if err := s.SetOrphanCursor(ctx, want); err != nil {
			t.Fatal(err)
		}
		if got, err := s.OrphanCursor(ctx); err != nil || got != want {
			t.Fatalf("cursor = %q, %v; want %q", got, err, want)
		}
	}
}
