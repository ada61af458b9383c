package store_test

import (
	"context"
	"errors"
	"testing"

	"github.com/progressdb/progressdb/server/pkg/store"
)

// A subject claim takes a live or a deleted message, in a thread deleted
// or not, unless the thread is held; a live one leaves the live indexes
// and may then be purged; a claim given back puts it back.
func TestSubjectClaim(t *testing.T) {
	ctx := context.Background()
	c := newClock()
	s := openStore(t, c)
	createThread(t, s, "t")
	appendMessage(t, s, "t", "live", "x")
	appendMessage(t, s, "t", "gone", "x")
	if _, err := s.EditMessage(ctx, "t", "live", []byte(`"y"`)); err != nil {
		t.Fatal(err)
	}
	deleteMessage(t, s, "t", "gone")
	claim := func(mid string) store.PurgeMarker {
		return store.PurgeMarker{Kind: store.KindMessage, ID: mid, ThreadID: "t", RunID: "r", Cause: store.CauseSubject, ErasureID: "e1"}
	}

	_, err := s.BeginSubjectPurge(ctx, store.PurgeMarker{Kind: store.KindMessage, ID: "live", ThreadID: "t", Cause: store.CauseSubject})
	wantErr(t, err, store.ErrInvalidArgument) // no erasure named
	if _, err := s.SetLegalHold(ctx, "t", true); err != nil {
		t.Fatal(err)
	}
	_, err = s.BeginSubjectPurge(ctx, claim("live"))
	if !errors.Is(err, store.ErrNotEligible) || !errors.Is(err, store.ErrLegalHold) {
		t.Fatalf("claim in a held thread: %v", err)
	}
	if _, err := s.SetLegalHold(ctx, "t", false); err != nil {
		t.Fatal(err)
	}

	m, err := s.BeginSubjectPurge(ctx, claim("live"))
	if err != nil || m.Versions != 2 {
		t.Fatalf("claim of a live message with two versions: %+v %v", m, err)
	}
	if n, _ := s.LiveCount(ctx, "t"); n != 0 {
		t.Fatalf("claimed message still counted live: %d", n)
	}
	_, err = s.BeginSubjectPurge(ctx, claim("live"))
	wantErr(t, err, store.ErrNotEligible) // claimed already
	_, err = s.EditMessage(ctx, "t", "live", []byte(`"z"`))
	wantErr(t, err, store.ErrPurgeInProgress)
	checkIndexesRebuildAlike(t, s)

	// Given back (a hold set before its confirmation): live again.
	if _, err := s.SetLegalHold(ctx, "t", true); err != nil {
		t.Fatal(err)
	}
	_, err = s.ConfirmPurge(ctx, m, func(st store.ClaimState) error {
		if st.LegalHold {
			return errors.New("legal hold")
		}
		return nil
	})
	wantErr(t, err, store.ErrClaimReleased)
	if n, _ := s.LiveCount(ctx, "t"); n != 1 {
		t.Fatalf("a claim given back leaves the message out of the live count: %d", n)
	}
	checkIndexesRebuildAlike(t, s)
	if _, err := s.SetLegalHold(ctx, "t", false); err != nil {
		t.Fatal(err)
	}

	// In a deleted thread: a live message and a deleted one are both taken.
	deleteThread(t, s, "t")
	for _, mid := range []string{"live", "gone"} {
		m, err := s.BeginSubjectPurge(ctx, claim(mid))
		if err != nil {
			t.Fatalf("claim %s: %v", mid, err)
		}
		if m, err = s.ConfirmPurge(ctx, m, func(store.ClaimState) error { return nil }); err != nil {
			t.Fatal(err)
		}
		if _, err := s.PurgeMessage(ctx, "t", mid, store.PurgeOptions{}); err != nil {
			t.Fatalf("purge %s: %v", mid, err)
		}
		if err := s.ClearPurges(ctx, []store.PurgeMarker{m}); err != nil {
			t.Fatal(err)
		}
		if ok, err := s.ItemExists(ctx, store.KindMessage, mid); err != nil || ok {
			t.Fatalf("%s left after its purge: %v %v", mid, ok, err)
		}
	}
	checkIndexesRebuildAlike(t, s)
}

// An erasure's status survives a reopen; an unknown one is ErrNotFound.
func TestErasureRecord(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	c := newClock()
	s := openAt(t, dir, c)
	e := store.Erasure{ID: "e1", Status: "pending", Subject: "hmac-sha256:00", RequestedAt: 5, HeldThreads: []string{"t9"}}
	if err := s.PutErasure(ctx, e); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openAt(t, dir, c)
	got, err := s.GetErasure(ctx, "e1")
	if err != nil || got.Subject != e.Subject || got.HeldThreads[0] != "t9" {
		t.Fatalf("erasure after reopen %+v %v", got, err)
	}
	_, err = s.GetErasure(ctx, "e2")
	wantErr(t, err, store.ErrNotFound)
	_, err = s.GetErasure(ctx, "bad:id")
	wantErr(t, err, store.ErrInvalidID)
}
