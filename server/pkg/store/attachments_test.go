package store_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/progressdb/progressdb/server/pkg/store"
	"github.com/progressdb/progressdb/server/pkg/store/storetest"
)

const fileMarker = "file-marker-7Qz.pdf"

func addAttachment(t *testing.T, s *store.Store, tid, mid string) store.Attachment {
	t.Helper()
	ctx := context.Background()
	seal, err := s.NewAttachment(ctx, tid, mid)
	if err != nil {
		t.Fatal(err)
	}
	a := seal.Attachment
	a.Size, a.SHA256, a.ContentType, a.Filename = 3, strings.Repeat("ab", 32), "application/pdf", fileMarker
	a, err = s.AddAttachment(ctx, a)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func TestAttachmentMetadata(t *testing.T) {
	for _, sealed := range []bool{false, true} {
		t.Run(map[bool]string{false: "plain", true: "sealed"}[sealed], func(t *testing.T) {
			ctx := context.Background()
			c := newClock()
			dir := t.TempDir()
			var s *store.Store
			if sealed {
				s = sealedStore(t, dir, c)
				t.Cleanup(func() {
					if s != nil {
						_ = s.Close()
					}
				})
			} else {
				s = openAt(t, dir+"/data", c)
			}
			createThread(t, s, "t1")
			appendMessage(t, s, "t1", "m1", "hello")
			appendMessage(t, s, "t1", "m2", "other")

			seal, err := s.NewAttachment(ctx, "t1", "m1")
			if err != nil {
				t.Fatal(err)
			}
			if (seal.AEAD != nil) != sealed || (seal.Attachment.Key != 0) != sealed {
				t.Fatalf("NewAttachment on a sealed=%v store: key %d, aead %v", sealed, seal.Attachment.Key, seal.AEAD != nil)
			}
			a1 := addAttachment(t, s, "t1", "m1")
			c.Advance(time.Second)
			a2 := addAttachment(t, s, "t1", "m1")
			a3 := addAttachment(t, s, "t1", "m2")
			if a1.BlobName() != "t1/m1/"+a1.ID || a1.CreatedTS == 0 {
				t.Fatalf("a1 = %+v", a1)
			}
			list, err := s.ListAttachments(ctx, "t1", "m1", false)
			if err != nil || len(list) != 2 || list[0].ID != a1.ID || list[1].ID != a2.ID || list[0].Filename != fileMarker || list[0].Size != 3 {
				t.Fatalf("ListAttachments(m1) = %+v, %v", list, err)
			}
			var all []string
			if err := s.ScanAttachments(ctx, "t1", "", func(a store.Attachment) error { all = append(all, a.ID); return nil }); err != nil || len(all) != 3 {
				t.Fatalf("ScanAttachments(thread) = %v, %v", all, err)
			}
			got, err := s.GetAttachment(ctx, "t1", "m2", a3.ID)
			if err != nil || got.SHA256 != a3.SHA256 || got.ContentType != "application/pdf" {
				t.Fatalf("GetAttachment = %+v, %v", got, err)
			}
			// Reached through another message, it does not exist.
			if _, err := s.GetAttachment(ctx, "t1", "m1", a3.ID); !errors.Is(err, store.ErrNotFound) {
				t.Fatalf("attachment of m2 through m1: %v", err)
			}

			d, err := s.DeleteAttachment(ctx, "t1", "m1", a1.ID)
			if err != nil || !d.Deleted || d.DeletedTS == 0 || d.Filename != fileMarker {
				t.Fatalf("DeleteAttachment = %+v, %v", d, err)
			}
			again, err := s.DeleteAttachment(ctx, "t1", "m1", a1.ID)
			if err != nil || again.DeletedTS != d.DeletedTS {
				t.Fatalf("second delete = %+v, %v; want the first deleted_ts", again, err)
			}
			if list, _ := s.ListAttachments(ctx, "t1", "m1", false); len(list) != 1 || list[0].ID != a2.ID {
				t.Fatalf("live list after delete = %+v", list)
			}
			if list, _ := s.ListAttachments(ctx, "t1", "m1", true); len(list) != 2 {
				t.Fatalf("list with deleted = %+v", list)
			}
			r, err := s.RestoreAttachment(ctx, "t1", "m1", a1.ID)
			if err != nil || r.Deleted || r.DeletedTS != 0 || r.Filename != fileMarker {
				t.Fatalf("RestoreAttachment = %+v, %v", r, err)
			}

			if f, err := s.Format(ctx); err != nil || f != store.FormatAttachments {
				t.Fatalf("format after the first attachment = %v, %v", f, err)
			}
			if sealed {
				// The record keeps its content sealed.
				err := s.Close()
				s = nil
				if err != nil {
					t.Fatal(err)
				}
				hits, err := storetest.Scan(dir+"/data", []string{fileMarker, "application/pdf", strings.Repeat("ab", 32)})
				if err != nil {
					t.Fatal(err)
				}
				if len(hits.Found()) > 0 {
					t.Fatalf("sealed attachment metadata found in clear: %v", hits)
				}
			}
		})
	}
}

// Uploads go only to live messages of live threads, and a thread purge
// takes the records with it.
func TestAttachmentRefusalsAndThreadPurge(t *testing.T) {
	ctx := context.Background()
	c := newClock()
	s := openStore(t, c)
	createThread(t, s, "t1")
	appendMessage(t, s, "t1", "m1", "hello")
	appendMessage(t, s, "t1", "m2", "bye")
	if _, err := s.NewAttachment(ctx, "t1", "nope"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("unknown message: %v", err)
	}
	if _, err := s.NewAttachment(ctx, "t9", "m1"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("message through another thread: %v", err)
	}
	if _, err := s.NewAttachment(ctx, "t1", "bad:id"); !errors.Is(err, store.ErrInvalidID) {
		t.Errorf("bad id: %v", err)
	}
	// Prepared while m2 was live, recorded after it was deleted: refused.
	seal, err := s.NewAttachment(ctx, "t1", "m2")
	if err != nil {
		t.Fatal(err)
	}
	deleteMessage(t, s, "t1", "m2")
	if _, err := s.AddAttachment(ctx, seal.Attachment); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("attachment to a message deleted meanwhile: %v", err)
	}
	a := addAttachment(t, s, "t1", "m1")
	th := deleteThread(t, s, "t1")
	if _, err := s.NewAttachment(ctx, "t1", "m1"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("deleted thread: %v", err)
	}
	if err := s.BeginPurge(ctx, store.PurgeMarker{Kind: store.KindThread, ID: "t1", ThreadID: "t1", DeletedTS: th.DeletedTS, RunID: "r"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.RestoreAttachment(ctx, "t1", "m1", a.ID); err != nil {
		t.Errorf("restoring a live attachment is a no-op: %v", err)
	}
	if _, err := s.DeleteAttachment(ctx, "t1", "m1", a.ID); !errors.Is(err, store.ErrPurgeInProgress) {
		t.Errorf("delete during the thread's purge: %v", err)
	}
	if _, err := s.PurgeThread(ctx, "t1", store.PurgeOptions{}); err != nil {
		t.Fatal(err)
	}
	if keys := rawKeys(t, s, "thread:t1:", "thread:t1;"); len(keys) != 0 {
		t.Fatalf("keys left after the thread purge: %v", keys)
	}
}
