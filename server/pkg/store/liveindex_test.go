package store_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/progressdb/progressdb/server/pkg/store"
)

func ages(t testing.TB, s *store.Store, to int64) []string {
	t.Helper()
	var out []string
	err := s.ScanAgeIndex(context.Background(), 0, to, func(e store.AgeEntry) error {
		out = append(out, e.ThreadID+"/"+e.MessageID)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func overCount(t testing.TB, s *store.Store, n int64) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	err := s.ScanThreadsOverCount(context.Background(), n, func(tid string, c int64) error {
		out[tid] = c
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestLiveIndexesFollowWrites(t *testing.T) {
	ctx := context.Background()
	c := newClock()
	s := openStore(t, c)
	createThread(t, s, "t")
	createThread(t, s, "u")
	for i := range 4 {
		appendMessage(t, s, "t", fmt.Sprint("t", i), "x")
		c.Advance(time.Hour)
	}
	appendMessage(t, s, "u", "u0", "x")
	cutoff := c.Now().Add(-150 * time.Minute).UnixNano() // t0 and t1 are older

	if got := ages(t, s, cutoff); fmt.Sprint(got) != "[t/t0 t/t1]" {
		t.Fatalf("age index %v", got)
	}
	if got := overCount(t, s, 1); fmt.Sprint(got) != "map[t:4]" {
		t.Fatalf("over 1: %v", got)
	}
	if got := overCount(t, s, 0); len(got) != 2 || got["u"] != 1 {
		t.Fatalf("over 0: %v", got)
	}
	deleteMessage(t, s, "t", "t0")
	if _, err := s.EditMessage(ctx, "t", "t1", []byte(`"edited"`)); err != nil {
		t.Fatal(err)
	}
	if got := ages(t, s, cutoff); fmt.Sprint(got) != "[t/t1]" {
		t.Fatalf("age index after delete and edit %v", got)
	}
	if n, _ := s.LiveCount(ctx, "t"); n != 3 {
		t.Fatalf("live count %d", n)
	}
	if _, err := s.RestoreMessage(ctx, "t", "t0"); err != nil {
		t.Fatal(err)
	}
	if got := ages(t, s, cutoff); fmt.Sprint(got) != "[t/t0 t/t1]" {
		t.Fatalf("age index after restore %v", got)
	}
	var live []string
	if err := s.ScanLiveMessages(ctx, "t", cutoff, func(e store.AgeEntry) error {
		live = append(live, e.MessageID)
		return nil
	}); err != nil || fmt.Sprint(live) != "[t0 t1]" {
		t.Fatalf("live messages of t before the cutoff %v %v", live, err)
	}
	checkIndexesRebuildAlike(t, s)
}

func TestPolicyClaim(t *testing.T) {
	ctx := context.Background()
	c := newClock()
	s := openStore(t, c)
	createThread(t, s, "t")
	for i := range 3 {
		appendMessage(t, s, "t", fmt.Sprint("m", i), "x")
		c.Advance(time.Hour)
	}
	m0 := store.PurgeMarker{Kind: store.KindMessage, ID: "m0", ThreadID: "t", RunID: "r", Cause: "max_age"}

	// The message must be older than the cutoff, the thread above its cap.
	wantErr(t, s.BeginPolicyPurge(ctx, m0, store.PolicyCheck{CreatedBefore: c.Now().Add(-4 * time.Hour).UnixNano()}), store.ErrNotEligible)
	capped := m0
	capped.Cause = "max_messages"
	wantErr(t, s.BeginPolicyPurge(ctx, capped, store.PolicyCheck{KeepNewest: 3}), store.ErrNotEligible)
	// A deleted marker cause is not a policy purge.
	bad := m0
	bad.Cause = "deleted"
	wantErr(t, s.BeginPolicyPurge(ctx, bad, store.PolicyCheck{}), store.ErrInvalidArgument)
	// Legal hold wins.
	if _, err := s.SetLegalHold(ctx, "t", true); err != nil {
		t.Fatal(err)
	}
	wantErr(t, s.BeginPolicyPurge(ctx, m0, store.PolicyCheck{}), store.ErrNotEligible)
	if _, err := s.SetLegalHold(ctx, "t", false); err != nil {
		t.Fatal(err)
	}
	// A live message is never purged unclaimed.
	_, err := s.PurgeMessage(ctx, "t", "m0", store.PurgeOptions{})
	wantErr(t, err, store.ErrNotEligible)

	if err := s.BeginPolicyPurge(ctx, m0, store.PolicyCheck{CreatedBefore: c.Now().UnixNano()}); err != nil {
		t.Fatal(err)
	}
	if n, _ := s.LiveCount(ctx, "t"); n != 2 {
		t.Fatalf("claimed message still counted: %d", n)
	}
	wantErr(t, s.BeginPolicyPurge(ctx, m0, store.PolicyCheck{}), store.ErrNotEligible)
	_, err = s.EditMessage(ctx, "t", "m0", []byte(`"x"`))
	wantErr(t, err, store.ErrPurgeInProgress)
	_, err = s.DeleteMessage(ctx, "t", "m0")
	wantErr(t, err, store.ErrPurgeInProgress)
	checkIndexesRebuildAlike(t, s) // a claimed message is not live

	n, err := s.PurgeMessage(ctx, "t", "m0", store.PurgeOptions{BatchSize: 1})
	if err != nil || n != 2 {
		t.Fatalf("purge of the claimed message = %d, %v", n, err)
	}
	if left := rawKeys(t, s, "version:msg:m0:", "version:msg:m0;"); len(left) != 0 {
		t.Fatalf("versions left %v", left)
	}
	if err := s.ClearPurges(ctx, []store.PurgeMarker{m0}); err != nil {
		t.Fatal(err)
	}
	checkIndexesRebuildAlike(t, s)

	// A deleted thread's messages are kept whole for its restore window.
	deleteThread(t, s, "t")
	m1 := store.PurgeMarker{Kind: store.KindMessage, ID: "m1", ThreadID: "t", RunID: "r", Cause: "max_messages"}
	wantErr(t, s.BeginPolicyPurge(ctx, m1, store.PolicyCheck{KeepNewest: 1}), store.ErrNotEligible)
}

// After random writes, claims and purges, the indexes equal a full
// recomputation from the data.
func TestLiveIndexesMatchARebuildAfterRandomOperations(t *testing.T) {
	ctx := context.Background()
	for seed := range uint64(4) {
		t.Run(fmt.Sprint("seed_", seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 7))
			c := newClock()
			s := openStore(t, c)
			threads := []string{"a", "b", "c"}
			var msgs []string
			owner := map[string]string{}
			for _, tid := range threads {
				createThread(t, s, tid)
			}
			for i := range 300 {
				c.Advance(time.Minute)
				tid := threads[rng.IntN(len(threads))]
				var mid string
				if len(msgs) > 0 {
					mid = msgs[rng.IntN(len(msgs))]
				}
				switch op := rng.IntN(10); {
				case op < 4 || mid == "":
					mid = fmt.Sprint(tid, "-", i)
					if _, err := s.AppendMessage(ctx, tid, store.Message{ID: mid, Body: []byte(`"x"`)}); err == nil {
						msgs = append(msgs, mid)
						owner[mid] = tid
					}
				case op == 4:
					_, _ = s.EditMessage(ctx, owner[mid], mid, []byte(`"y"`))
				case op == 5:
					_, _ = s.DeleteMessage(ctx, owner[mid], mid)
				case op == 6:
					_, _ = s.RestoreMessage(ctx, owner[mid], mid)
				case op == 7:
					m := store.PurgeMarker{Kind: store.KindMessage, ID: mid, ThreadID: owner[mid], RunID: "r", Cause: "max_age"}
					if s.BeginPolicyPurge(ctx, m, store.PolicyCheck{}) == nil && rng.IntN(2) == 0 {
						if _, err := s.PurgeMessage(ctx, m.ThreadID, mid, store.PurgeOptions{BatchSize: 1}); err != nil {
							t.Fatal(err)
						}
						if err := s.ClearPurges(ctx, []store.PurgeMarker{m}); err != nil {
							t.Fatal(err)
						}
					}
				case op == 8:
					if rng.IntN(2) == 0 {
						_, _ = s.DeleteThread(ctx, tid)
					} else {
						_, _ = s.RestoreThread(ctx, tid)
					}
				case op == 9:
					_, _ = s.SetLegalHold(ctx, tid, rng.IntN(3) == 0)
				}
			}
			checkIndexesRebuildAlike(t, s)
		})
	}
}

// Writers racing on one thread leave the count and the age index exact.
func TestLiveIndexesExactUnderConcurrentWrites(t *testing.T) {
	ctx := context.Background()
	s := openStore(t, newClock())
	createThread(t, s, "t")
	var wg sync.WaitGroup
	for w := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 30 {
				mid := fmt.Sprintf("w%d-%d", w, i)
				if _, err := s.AppendMessage(ctx, "t", store.Message{ID: mid, Body: []byte(`"x"`)}); err != nil {
					t.Error(err)
					return
				}
				if i%3 == 0 {
					if _, err := s.DeleteMessage(ctx, "t", mid); err != nil {
						t.Error(err)
					}
				}
				if i%6 == 0 {
					if _, err := s.RestoreMessage(ctx, "t", mid); err != nil {
						t.Error(err)
					}
				}
			}
		}()
	}
	wg.Wait()
	if n, err := s.LiveCount(ctx, "t"); err != nil || n != 6*(30-10+5) {
		t.Fatalf("live count %d, %v; want %d", n, err, 6*(30-10+5))
	}
	checkIndexesRebuildAlike(t, s)
}
