package store_test

import (
	"context"
	"strings"
	"testing"

	"github.com/progressdb/progressdb/server/pkg/store"
)

// A purge that deletes attachment records owes their blobs' deletions in
// the same batches; the debts name the run and cause and carry the size
// and digest, also of a sealed attachment.
func TestPurgeOwesAttachmentBlobs(t *testing.T) {
	for _, sealed := range []bool{false, true} {
		t.Run(map[bool]string{false: "plain", true: "sealed"}[sealed], func(t *testing.T) {
			ctx := context.Background()
			c := newClock()
			dir := t.TempDir()
			var s *store.Store
			if sealed {
				s = sealedStore(t, dir, c)
				t.Cleanup(func() { _ = s.Close() })
			} else {
				s = openAt(t, dir+"/data", c)
			}
			createThread(t, s, "t1")
			appendMessage(t, s, "t1", "m1", "hello")
			appendMessage(t, s, "t1", "m2", "other")
			a1 := addAttachment(t, s, "t1", "m1")
			a2 := addAttachment(t, s, "t1", "m1")
			a3 := addAttachment(t, s, "t1", "m2")

			tomb := deleteMessage(t, s, "t1", "m1")
			m := store.PurgeMarker{Kind: store.KindMessage, ID: "m1", ThreadID: "t1", DeletedTS: tomb.DeletedTS, RunID: "run1", Cause: "deleted"}
			if err := s.BeginPurge(ctx, m); err != nil {
				t.Fatal(err)
			}
			// Batches of one key: each record and its debt still commit together.
			if _, err := s.PurgeMessage(ctx, "t1", "m1", store.PurgeOptions{BatchSize: 1, Marker: m}); err != nil {
				t.Fatal(err)
			}
			owed, err := s.OwedBlobs(ctx)
			if err != nil || len(owed) != 2 {
				t.Fatalf("OwedBlobs after the message purge = %+v, %v", owed, err)
			}
			for i, a := range []store.Attachment{a1, a2} {
				d := owed[i]
				if d.Name != a.BlobName() || d.ID != a.ID || d.Size != 3 || d.SHA256 != strings.Repeat("ab", 32) ||
					d.RunID != "run1" || d.Cause != "deleted" || d.PurgedTS == 0 {
					t.Fatalf("debt %d = %+v, want attachment %+v", i, d, a)
				}
			}
			if list, err := s.ListAttachments(ctx, "t1", "m1", true); err != nil || len(list) != 0 {
				t.Fatalf("m1's attachments after its purge = %+v, %v", list, err)
			}
			if list, err := s.ListAttachments(ctx, "t1", "m2", true); err != nil || len(list) != 1 {
				t.Fatalf("m2's attachments after m1's purge = %+v, %v", list, err)
			}
			if err := s.ClearOwedBlobs(ctx, owed); err != nil {
				t.Fatal(err)
			}

			th := deleteThread(t, s, "t1")
			tm := store.PurgeMarker{Kind: store.KindThread, ID: "t1", ThreadID: "t1", DeletedTS: th.DeletedTS, RunID: "run2", Cause: "deleted"}
			if err := s.BeginPurge(ctx, tm); err != nil {
				t.Fatal(err)
			}
			if _, err := s.PurgeThread(ctx, "t1", store.PurgeOptions{Marker: tm}); err != nil {
				t.Fatal(err)
			}
			owed, err = s.OwedBlobs(ctx)
			if err != nil || len(owed) != 1 || owed[0].Name != a3.BlobName() || owed[0].RunID != "run2" {
				t.Fatalf("OwedBlobs after the thread purge = %+v, %v", owed, err)
			}
			if keys := rawKeys(t, s, "thread:t1:", "thread:t1;"); len(keys) != 0 {
				t.Fatalf("thread keys left: %v", keys)
			}
		})
	}
}
