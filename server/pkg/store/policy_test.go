package store_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/progressdb/progressdb/server/pkg/store"
)

func ptr[T any](v T) *T { return &v }

// overridden lists the threads ScanRetentionOverrides reports.
func overridden(t testing.TB, s *store.Store) map[string]store.OverrideEntry {
	t.Helper()
	out := map[string]store.OverrideEntry{}
	err := s.ScanRetentionOverrides(context.Background(), func(e store.OverrideEntry) error {
		out[e.ThreadID] = e
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestRetentionOverrideSetGetClear(t *testing.T) {
	ctx := context.Background()
	s := openStore(t, newClock())
	createThread(t, s, "a")
	createThread(t, s, "b")

	if _, found, err := s.RetentionOverride(ctx, "a"); err != nil || found {
		t.Fatalf("fresh thread: found=%v err=%v", found, err)
	}
	o := store.RetentionOverride{MaxAge: ptr(7 * 24 * time.Hour), MaxMessages: ptr(0)}
	if err := s.SetRetentionOverride(ctx, "a", o); err != nil {
		t.Fatal(err)
	}
	got, found, err := s.RetentionOverride(ctx, "a")
	if err != nil || !found || got.Period != nil || *got.MaxAge != 7*24*time.Hour || *got.MaxMessages != 0 {
		t.Fatalf("got %+v found=%v err=%v", got, found, err)
	}
	if raw := rawKeys(t, s, "thread:a:retention", "thread:a:retentioo"); len(raw) != 1 {
		t.Fatalf("override not under the thread's keys: %v", raw)
	}
	if e := overridden(t, s); len(e) != 1 || e["a"].Err != nil || *e["a"].Override.MaxAge != *o.MaxAge {
		t.Fatalf("index %+v", e)
	}

	// A new override replaces the old one whole.
	if err := s.SetRetentionOverride(ctx, "a", store.RetentionOverride{Period: ptr(48 * time.Hour)}); err != nil {
		t.Fatal(err)
	}
	if got, _, _ := s.RetentionOverride(ctx, "a"); got.MaxAge != nil || *got.Period != 48*time.Hour {
		t.Fatalf("replaced %+v", got)
	}
	if err := s.DeleteRetentionOverride(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	if _, found, _ := s.RetentionOverride(ctx, "a"); found || len(overridden(t, s)) != 0 {
		t.Fatal("cleared override still there")
	}
	if err := s.DeleteRetentionOverride(ctx, "a"); err != nil {
		t.Fatalf("clearing nothing: %v", err)
	}
	// An empty override is no override.
	if err := s.SetRetentionOverride(ctx, "b", store.RetentionOverride{}); err != nil {
		t.Fatal(err)
	}
	if len(overridden(t, s)) != 0 {
		t.Fatal("empty override indexed")
	}

	wantErr(t, s.SetRetentionOverride(ctx, "nope", o), store.ErrNotFound)
	_, _, err = s.RetentionOverride(ctx, "nope")
	wantErr(t, err, store.ErrNotFound)
	wantErr(t, s.SetRetentionOverride(ctx, "a:b", o), store.ErrInvalidID)
	wantErr(t, s.SetRetentionOverride(ctx, "a", store.RetentionOverride{MaxMessages: ptr(-1)}), store.ErrInvalidArgument)
	wantErr(t, s.SetRetentionOverride(ctx, "a", store.RetentionOverride{Period: ptr(-time.Second)}), store.ErrInvalidArgument)
}

func TestRetentionOverrideIsPurgedWithItsThread(t *testing.T) {
	ctx := context.Background()
	for _, stopAfter := range []int{0, 1, 2, 3} {
		s := openStore(t, newClock())
		fillThread(t, s, "t", 6)
		createThread(t, s, "u")
		for _, tid := range []string{"t", "u"} {
			if err := s.SetRetentionOverride(ctx, tid, store.RetentionOverride{MaxMessages: ptr(3)}); err != nil {
				t.Fatal(err)
			}
		}
		deleteThread(t, s, "t")
		beginThreadPurge(t, s, "t")
		wantErr(t, s.SetRetentionOverride(ctx, "t", store.RetentionOverride{MaxMessages: ptr(1)}), store.ErrPurgeInProgress)
		wantErr(t, s.DeleteRetentionOverride(ctx, "t"), store.ErrPurgeInProgress)

		if _, err := s.PurgeThread(ctx, "t", store.PurgeOptions{BatchSize: 4, BeforeBatch: failAfter(stopAfter)}); err != nil {
			// Interrupted: the override and its index entry stay until the
			// last batch, so the next purge still finds and removes them.
			if e := overridden(t, s); len(e) != 2 {
				t.Fatalf("after %d batches: index %+v", stopAfter, e)
			}
			if _, err := s.PurgeThread(ctx, "t", store.PurgeOptions{BatchSize: 4}); err != nil {
				t.Fatal(err)
			}
		}
		if left := rawKeys(t, s, "thread:t:", "thread:t;"); len(left) != 0 {
			t.Fatalf("left under thread:t: %v", left)
		}
		if e := overridden(t, s); len(e) != 1 || e["u"].ThreadID != "u" {
			t.Fatalf("index after purge %+v", e)
		}
		if raw := rawKeys(t, s, "idx:pol:", "idx:pol;"); len(raw) != 1 {
			t.Fatalf("override index keys %v", raw)
		}
	}
}

func TestMalformedRetentionOverrideIsListedWithItsError(t *testing.T) {
	ctx := context.Background()
	s := openStore(t, newClock())
	createThread(t, s, "a")
	if err := s.SetRetentionOverride(ctx, "a", store.RetentionOverride{MaxMessages: ptr(3)}); err != nil {
		t.Fatal(err)
	}
	bad, _ := json.Marshal(map[string]any{"max_messages": "three"})
	if err := s.DB().Set([]byte("thread:a:retention"), bad, nil); err != nil {
		t.Fatal(err)
	}
	_, _, err := s.RetentionOverride(ctx, "a")
	wantErr(t, err, store.ErrMalformed)
	e := overridden(t, s)
	if len(e) != 1 {
		t.Fatalf("index %+v", e)
	}
	wantErr(t, e["a"].Err, store.ErrMalformed)
	// An admin can replace it.
	if err := s.SetRetentionOverride(ctx, "a", store.RetentionOverride{MaxMessages: ptr(2)}); err != nil {
		t.Fatal(err)
	}
}
