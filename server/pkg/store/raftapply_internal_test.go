package store

import (
	"context"
	"errors"
	"testing"
	"time"
)

func openPlain(t *testing.T) *Store {
	t.Helper()
	s, err := Open(t.TempDir(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// setCommand is a command of term whose batch sets key to value.
func setCommand(t *testing.T, s *Store, id, term uint64, key, value string) []byte {
	t.Helper()
	b := s.db.NewBatch()
	defer b.Close()
	_ = b.Set([]byte(key), []byte(value), nil)
	return Command{ID: id, Term: term, Kind: uint8(writeState), Repr: b.Repr()}.Encode()
}

func valueOf(t *testing.T, s *Store, key string) string {
	t.Helper()
	v, err := s.get([]byte(key))
	if errors.Is(err, ErrNotFound) {
		return ""
	}
	if err != nil {
		t.Fatal(err)
	}
	return string(v)
}

// A command applied again (its ID is in the log twice) changes nothing:
// a later command's value stays. A command committed in another term than
// it was evaluated in is not applied and says ErrProposalDropped. Either
// way the applied index moves, and the dedupe keys of earlier terms go
// once a later term's command is applied.
func TestApplyCommandOnceAndInItsTerm(t *testing.T) {
	ctx := context.Background()
	s := openPlain(t)
	first := setCommand(t, s, 1, 2, "sys:test:k", "first")
	steps := []struct {
		index, term uint64
		cmd         []byte
		dropped     bool
		want        string
	}{
		{3, 2, first, false, "first"},
		{4, 2, setCommand(t, s, 2, 2, "sys:test:k", "second"), false, "second"},
		{5, 2, first, false, "second"}, // the same ID again: a no-op
		{6, 3, setCommand(t, s, 3, 2, "sys:test:k", "stale"), true, "second"},
		{7, 3, setCommand(t, s, 4, 3, "sys:test:k", "third"), false, "third"},
		{8, 3, first, true, "third"}, // term 2's: dropped, whatever its ID
	}
	for _, st := range steps {
		err := s.ApplyCommand(ctx, st.index, st.term, st.cmd)
		if errors.Is(err, ErrProposalDropped) != st.dropped || (err != nil && !st.dropped) {
			t.Fatalf("entry %d: %v, dropped %v", st.index, err, st.dropped)
		}
		if got := valueOf(t, s, "sys:test:k"); got != st.want {
			t.Fatalf("after entry %d: %q, want %q", st.index, got, st.want)
		}
		if got := valueOf(t, s, raftAppliedKey); got != string(appendPadded(nil, int64(st.index))) {
			t.Fatalf("after entry %d: applied index %q", st.index, got)
		}
	}
	n, err := s.countRange([]byte(raftDedupeNS), upperBound([]byte(raftDedupeNS)))
	if err != nil || n != 1 {
		t.Fatalf("%d dedupe keys (%v), want term 3's one", n, err)
	}
	l, err := s.RaftLog(ctx)
	if err != nil || l.Applied() != 8 {
		t.Fatalf("the log's applied index %d (%v)", l.Applied(), err)
	}
	if err := s.ApplyCommand(ctx, 9, 3, []byte{9, 9}); !errors.Is(err, ErrMalformed) {
		t.Fatalf("a malformed command: %v", err)
	}
	if err := s.ApplyCommand(ctx, 9, 3, Command{ID: 5, Term: 3, Kind: uint8(writeRaft)}.Encode()); !errors.Is(err, ErrMalformed) {
		t.Fatalf("a command of a kind never proposed: %v", err)
	}
}

// proposerFunc is a Proposer of a test.
type proposerFunc struct {
	lease   uint64
	propose func(Command) <-chan error
}

func (p proposerFunc) Lease() uint64                    { return p.lease }
func (p proposerFunc) Propose(cmd Command) <-chan error { return p.propose(cmd) }

// A replicated store without a lease refuses writes with ErrNotLeader and
// proposes nothing; with one, it proposes the batch it built in its term
// and commits nothing itself. A write whose context ends before the
// outcome keeps its thread's stripe until the outcome comes.
func TestReplicatedStoreProposes(t *testing.T) {
	ctx := context.Background()
	s := openPlain(t)
	var got []Command
	outcome := make(chan error, 1)
	p := proposerFunc{propose: func(c Command) <-chan error {
		got = append(got, c)
		return outcome
	}}
	s.Replicate(p)
	if _, err := s.CreateThread(ctx, Thread{ID: "t", Title: "x", Author: "a"}); !errors.Is(err, ErrNotLeader) || len(got) != 0 {
		t.Fatalf("without a lease: %v, %d proposed", err, len(got))
	}
	p.lease = 4
	s.Replicate(p)
	outcome <- nil
	if _, err := s.CreateThread(ctx, Thread{ID: "t", Title: "x", Author: "a"}); err != nil || len(got) != 1 {
		t.Fatalf("with a lease: %v, %d proposed", err, len(got))
	}
	if got[0].Term != 4 || writeKind(got[0].Kind) != writeUser || len(got[0].Repr) == 0 {
		t.Fatalf("proposed %+v", got[0])
	}
	if _, err := s.GetThread(ctx, "t"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("the store committed a write it proposed: %v", err)
	}
	cctx, cancel := context.WithCancel(ctx)
	late := make(chan error, 1)
	s.Replicate(proposerFunc{lease: 4, propose: func(Command) <-chan error {
		cancel() // the caller gives up while the command is in flight
		return late
	}})
	if _, err := s.CreateThread(cctx, Thread{ID: "u", Title: "x", Author: "a"}); !errors.Is(err, ErrAmbiguous) {
		t.Fatalf("a write whose context ended: %v", err)
	}
	stripeHeldToOutcome(t, s, "u", late)
}

// stripeHeldToOutcome checks that key's stripe is held until late is
// told the outcome of the command in flight, and let go then.
func stripeHeldToOutcome(t *testing.T, s *Store, key string, late chan<- error) {
	t.Helper()
	m := &s.locks[stripeOf(key)]
	if m.TryLock() {
		t.Fatal("the stripe was let go before the outcome")
	}
	late <- errors.New("the outcome")
	for deadline := time.Now().Add(10 * time.Second); !m.TryLock(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the stripe stayed held after the outcome")
		}
	}
	m.Unlock()
}

// The writes that read under a stripe and then write (a retention
// override, a claim, the pause switch) are proposed in the lease read
// when the stripe was taken, and a writer whose context ends with the
// command in flight leaves the stripe to the outcome, as user writes do.
func TestStripedStateWritesKeepTheStripeToTheOutcome(t *testing.T) {
	ctx := context.Background()
	s := openPlain(t)
	if _, err := s.CreateThread(ctx, Thread{ID: "t", Title: "x", Author: "a"}); err != nil {
		t.Fatal(err)
	}
	days := 30 * 24 * time.Hour
	writes := []struct {
		name   string
		stripe string
		write  func(context.Context) error
	}{
		{"override", "t", func(ctx context.Context) error {
			return s.SetRetentionOverride(ctx, "t", RetentionOverride{Period: &days})
		}},
		{"pause", pauseKey, func(ctx context.Context) error {
			_, err := s.SetRetentionPause(ctx, true, "test")
			return err
		}},
		{"index rebuild", "t", func(ctx context.Context) error {
			_, err := s.RebuildDeletionIndex(ctx)
			return err
		}},
	}
	for _, w := range writes {
		t.Run(w.name, func(t *testing.T) {
			cctx, cancel := context.WithCancel(ctx)
			late := make(chan error, 1)
			var terms []uint64
			s.Replicate(proposerFunc{propose: func(c Command) <-chan error {
				terms = append(terms, c.Term)
				cancel() // the writer gives up with the command in flight
				return late
			}, lease: 7})
			defer s.Replicate(nil)
			if err := w.write(cctx); !errors.Is(err, ErrAmbiguous) {
				t.Fatalf("a write whose context ended: %v", err)
			}
			if len(terms) != 1 || terms[0] != 7 {
				t.Fatalf("proposed in terms %v, want [7]", terms)
			}
			stripeHeldToOutcome(t, s, w.stripe, late)
		})
	}
}

// A write carrying an owner's epoch (spec §11) is never proposed: it was
// evaluated under an ownership that ended when the shard became a group.
func TestReplicatedStoreRefusesAnOwnersWrite(t *testing.T) {
	ctx := context.Background()
	s := openPlain(t)
	proposed := 0
	outcome := make(chan error, 1)
	outcome <- nil
	s.Replicate(proposerFunc{lease: 2, propose: func(Command) <-chan error {
		proposed++
		return outcome
	}})
	if _, err := s.CreateThread(WithEpoch(ctx, 7), Thread{ID: "t", Title: "x", Author: "a"}); !errors.Is(err, ErrFenced) || proposed != 0 {
		t.Fatalf("an owner's write: %v, %d proposed", err, proposed)
	}
	if _, err := s.CreateThread(ctx, Thread{ID: "t", Title: "x", Author: "a"}); err != nil || proposed != 1 {
		t.Fatalf("the leader's write after it: %v, %d proposed", err, proposed)
	}
}
