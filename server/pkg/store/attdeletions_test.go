package store_test

import (
	"context"
	"errors"
	"math"
	"testing"
	"time"

	"github.com/progressdb/progressdb/server/pkg/store"
)

func attDeletions(t *testing.T, s *store.Store) []store.AttachmentDeletion {
	t.Helper()
	var out []store.AttachmentDeletion
	err := s.ScanAttachmentDeletions(context.Background(), 0, math.MaxInt64, func(d store.AttachmentDeletion) error {
		out = append(out, d)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// A soft-deleted attachment is indexed by its deletion time in the batch
// of its delete; a restore, its message's purge and a rebuild keep the
// index exact.
func TestAttachmentDeletionIndex(t *testing.T) {
	ctx := context.Background()
	c := newClock()
	s := openStore(t, c)
	createThread(t, s, "t1")
	appendMessage(t, s, "t1", "m1", "hello")
	a := addAttachment(t, s, "t1", "m1")
	b := addAttachment(t, s, "t1", "m1")
	if got := attDeletions(t, s); len(got) != 0 {
		t.Fatalf("index of live attachments: %+v", got)
	}
	del, err := s.DeleteAttachment(ctx, "t1", "m1", a.ID)
	if err != nil {
		t.Fatal(err)
	}
	c.Advance(time.Minute)
	if _, err := s.DeleteAttachment(ctx, "t1", "m1", a.ID); err != nil { // keeps the first deleted_ts
		t.Fatal(err)
	}
	want := store.AttachmentDeletion{Thread: "t1", Message: "m1", ID: a.ID, DeletedTS: del.DeletedTS}
	if got := attDeletions(t, s); len(got) != 1 || got[0] != want {
		t.Fatalf("index = %+v, want %+v", got, want)
	}
	checkIndexesRebuildAlike(t, s)
	if _, err := s.RestoreAttachment(ctx, "t1", "m1", a.ID); err != nil {
		t.Fatal(err)
	}
	if got := attDeletions(t, s); len(got) != 0 {
		t.Fatalf("index after restore = %+v", got)
	}
	if _, err := s.DeleteAttachment(ctx, "t1", "m1", b.ID); err != nil {
		t.Fatal(err)
	}
	checkIndexesRebuildAlike(t, s)
	// The message's purge takes its deleted attachment's entry along.
	deleteMessage(t, s, "t1", "m1")
	if _, err := s.PurgeMessage(ctx, "t1", "m1", store.PurgeOptions{}); err != nil {
		t.Fatal(err)
	}
	if got := attDeletions(t, s); len(got) != 0 {
		t.Fatalf("index after the message's purge = %+v", got)
	}
}

// A database whose attachments were deleted before the index existed
// (schema 3) gets their entries at open, once.
func TestOpenIndexesAttachmentsDeletedBefore(t *testing.T) {
	ctx := context.Background()
	c := newClock()
	dir := t.TempDir()
	s := openAt(t, dir, c)
	createThread(t, s, "t1")
	appendMessage(t, s, "t1", "m1", "hello")
	a := addAttachment(t, s, "t1", "m1")
	del, err := s.DeleteAttachment(ctx, "t1", "m1", a.ID)
	if err != nil {
		t.Fatal(err)
	}
	db := s.DB()
	if err := db.DeleteRange([]byte("idx:del:a:"), []byte("idx:del:a;"), nil); err != nil {
		t.Fatal(err)
	}
	if err := db.Set([]byte("sys:schema"), []byte("3"), nil); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openAt(t, dir, c)
	if got := attDeletions(t, s); len(got) != 1 || got[0].ID != a.ID || got[0].DeletedTS != del.DeletedTS {
		t.Fatalf("index after open = %+v", got)
	}
}

// A deleted attachment's own purge deletes its record and entry and owes
// its blob, in one batch; it refuses one restored, changed, held, or
// whose message's purge has begun; a claim refuses a restore.
func TestPurgeAttachment(t *testing.T) {
	ctx := context.Background()
	c := newClock()
	s := openStore(t, c)
	createThread(t, s, "t1")
	appendMessage(t, s, "t1", "m1", "hello")
	a := addAttachment(t, s, "t1", "m1")
	del, err := s.DeleteAttachment(ctx, "t1", "m1", a.ID)
	if err != nil {
		t.Fatal(err)
	}
	d := store.AttachmentDeletion{Thread: "t1", Message: "m1", ID: a.ID, DeletedTS: del.DeletedTS}
	opts := store.AttachmentPurge{RunID: "run1", Cause: "deleted"}

	stale := d
	stale.DeletedTS++
	wantErr(t, s.PurgeAttachment(ctx, stale, opts), store.ErrNotEligible)
	if _, err := s.SetLegalHold(ctx, "t1", true); err != nil {
		t.Fatal(err)
	}
	wantErr(t, s.PurgeAttachment(ctx, d, opts), store.ErrNotEligible)
	wantErr(t, s.ClaimAttachment(ctx, d, "run1"), store.ErrNotEligible)
	if _, err := s.SetLegalHold(ctx, "t1", false); err != nil {
		t.Fatal(err)
	}

	if err := s.ClaimAttachment(ctx, d, "run1"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.RestoreAttachment(ctx, "t1", "m1", a.ID); !errors.Is(err, store.ErrPurgeInProgress) {
		t.Fatalf("restore of a claimed attachment: %v", err)
	}
	if err := s.PurgeAttachment(ctx, d, opts); err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetAttachment(ctx, "t1", "m1", a.ID); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("record after the purge: %v", err)
	}
	if got := attDeletions(t, s); len(got) != 0 {
		t.Fatalf("index after the purge = %+v", got)
	}
	owed, err := s.OwedBlobs(ctx)
	if err != nil || len(owed) != 1 || owed[0].Name != a.BlobName() || owed[0].RunID != "run1" ||
		owed[0].Cause != "deleted" || owed[0].SHA256 != a.SHA256 || owed[0].DeletedTS != del.DeletedTS {
		t.Fatalf("owed = %+v, %v", owed, err)
	}
	wantErr(t, s.PurgeAttachment(ctx, d, opts), store.ErrNotEligible) // gone

	// Restored before its purge: kept.
	b := addAttachment(t, s, "t1", "m1")
	delB, _ := s.DeleteAttachment(ctx, "t1", "m1", b.ID)
	if _, err := s.RestoreAttachment(ctx, "t1", "m1", b.ID); err != nil {
		t.Fatal(err)
	}
	wantErr(t, s.PurgeAttachment(ctx, store.AttachmentDeletion{Thread: "t1", Message: "m1", ID: b.ID, DeletedTS: delB.DeletedTS}, opts), store.ErrNotEligible)
	if _, err := s.GetAttachment(ctx, "t1", "m1", b.ID); err != nil {
		t.Fatal(err)
	}
}
