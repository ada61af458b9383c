package replica_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/progressdb/progressdb/server/internal/replica"
	"github.com/progressdb/progressdb/server/internal/testtools"
	"github.com/progressdb/progressdb/server/pkg/store"
)

// The helper process's folder and the index it stops applying at.
const (
	envCrashDir   = "PROGRESSDB_REPLICA_CRASH_DIR"
	envCrashStall = "PROGRESSDB_REPLICA_CRASH_STALL"
)

// crashWriters propose concurrently, so that a Ready commits several
// entries and the stall falls among them.
const crashWriters = 16

// stallMachine applies the store's commands until index at, where it
// says so and blocks: the entries from there on are in the log, some
// committed, none applied, when the process is killed.
type stallMachine struct {
	s  *store.Store
	at uint64
}

func (m stallMachine) Apply(ctx context.Context, index, term uint64, cmd []byte) error {
	if index >= m.at {
		// What was applied before is made durable (the log is synced in
		// order): a kill now cannot lose an apply whose index was not
		// saved with it.
		if err := m.s.Sync(ctx); err != nil {
			return err
		}
		fmt.Printf("stalled %d\n", index)
		select {}
	}
	return m.s.ApplyCommand(ctx, index, term, cmd)
}

// countingMachine applies the store's commands and keeps their indexes.
type countingMachine struct {
	s       *store.Store
	mu      sync.Mutex
	indexes []uint64
}

func (m *countingMachine) Apply(ctx context.Context, index, term uint64, cmd []byte) error {
	m.mu.Lock()
	m.indexes = append(m.indexes, index)
	m.mu.Unlock()
	return m.s.ApplyCommand(ctx, index, term, cmd)
}

// startOne runs a one-replica group over the store in dir with machine
// m (a function of the store), its writes proposals; it returns once the
// replica may serve writes.
func startOne(t *testing.T, dir string, m func(*store.Store) replica.StateMachine) (*store.Store, *replica.Host) {
	t.Helper()
	ctx := context.Background()
	s, err := store.Open(dir, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	h, err := replica.NewHost(replica.Config{Transport: replica.NewLocal(), Tick: 10 * time.Millisecond, ElectionTicks: 10,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.AddGroup(ctx, replica.GroupConfig{Group: 1, Replica: 1, Peers: []uint64{1}, Store: s, Machine: m(s)}); err != nil {
		t.Fatal(err)
	}
	p, err := h.Proposer(1)
	if err != nil {
		t.Fatal(err)
	}
	s.Replicate(p)
	h.Start(ctx)
	for deadline := time.Now().Add(30 * time.Second); h.Lease(1) == 0; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the replica never served")
		}
	}
	return s, h
}

// TestCommandCrashHelper is the process TestCommandsApplyOnceAcrossACrash
// kills: a one-replica group whose writers append messages through the
// store, printing "ack THREAD MESSAGE" for each acknowledged one, until
// its machine stalls at the index it was given.
func TestCommandCrashHelper(t *testing.T) {
	dir := os.Getenv(envCrashDir)
	if dir == "" {
		return // only as TestCommandsApplyOnceAcrossACrash's process
	}
	at, err := strconv.ParseUint(os.Getenv(envCrashStall), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	s, _ := startOne(t, dir, func(s *store.Store) replica.StateMachine { return stallMachine{s: s, at: at} })
	for w := range crashWriters {
		if _, err := s.CreateThread(ctx, store.Thread{ID: fmt.Sprint("t", w), Title: "t", Author: "a"}); err != nil {
			t.Fatal(err)
		}
	}
	l, err := s.RaftLog(ctx)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Printf("ready %d\n", l.Applied())
	for w := range crashWriters {
		go func() {
			for k := 0; ; k++ {
				tid := fmt.Sprint("t", (w+k)%crashWriters) // writers share threads
				m, err := s.AppendMessage(ctx, tid, store.Message{Author: "a", Body: body(fmt.Sprint(w, " ", k))})
				if err != nil {
					fmt.Printf("error %v\n", err)
					return
				}
				fmt.Printf("ack %s %s\n", tid, m.ID)
			}
		}()
	}
	select {}
}

// A process killed (SIGKILL) with committed entries in its log that it
// had not applied restarts applying each of them once: the applied index
// it reopens with is the index of the last command it applied (saved in
// the command's own batch), the restart applies the entries after it,
// each once and in order, and the store then holds every acknowledged
// write and one message per append in its log.
func TestCommandsApplyOnceAcrossACrash(t *testing.T) {
	for round := range 3 {
		dir := filepath.Join(t.TempDir(), "db")
		stall := uint64(30 + 25*round)
		ready, acked := runCrashHelper(t, dir, stall)
		checkCrash(t, dir, stall, ready, acked)
	}
}

// runCrashHelper runs the helper until it stalls, kills it and returns
// the applied index once its threads existed and the acknowledged
// messages (thread, message).
func runCrashHelper(t *testing.T, dir string, stall uint64) (ready uint64, acked [][2]string) {
	t.Helper()
	c := testtools.StartChild(t, "TestCommandCrashHelper",
		envCrashDir+"="+dir, envCrashStall+"="+strconv.FormatUint(stall, 10))
	for {
		line, ok := c.Line() // a hung helper fails the test, not go test's timeout
		if !ok {
			break
		}
		f := strings.Fields(line)
		switch {
		case len(f) == 2 && f[0] == "ready":
			ready, _ = strconv.ParseUint(f[1], 10, 64)
		case len(f) == 3 && f[0] == "ack":
			acked = append(acked, [2]string{f[1], f[2]})
		case len(f) > 0 && f[0] == "error":
			t.Fatalf("helper: %s", line)
		}
		if len(f) == 2 && f[0] == "stalled" {
			break
		}
	}
	c.Kill() // SIGKILL, stalled in the middle of a Ready's entries
	if ready == 0 || len(acked) == 0 {
		t.Fatalf("helper ended before it stalled (ready %d, %d acknowledged)", ready, len(acked))
	}
	return ready, acked
}

func checkCrash(t *testing.T, dir string, stall, ready uint64, acked [][2]string) {
	t.Helper()
	ctx := context.Background()
	s, err := store.Open(dir, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	l, err := s.RaftLog(ctx)
	if err != nil {
		t.Fatal(err)
	}
	applied, last := l.Applied(), must(l.LastIndex())
	hs, _, _ := l.InitialState()
	// Applies are not synced (the log is), so the kill may have lost the
	// last ones, each with its applied index: all or nothing per entry.
	if applied >= stall || last < stall || applied > hs.GetCommit() {
		t.Fatalf("reopened with applied %d, commit %d, last %d; the process stalled applying %d", applied, hs.GetCommit(), last, stall)
	}
	checkAppliedMatchesIndex(t, s, l, ready, applied, last)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	m := &countingMachine{}
	s, h := startOne(t, dir, func(s *store.Store) replica.StateMachine { m.s = s; return m })
	defer func() {
		h.Stop()
		_ = s.Close()
	}()
	m.mu.Lock()
	got := m.indexes
	m.mu.Unlock()
	// Every entry of the log, committed or not when the process died, is
	// committed by the restarted leader's first entry and applied once.
	for i, idx := range got {
		if idx != applied+1+uint64(i) {
			t.Fatalf("the restart applied %v; want %d..%d once each", got, applied+1, last)
		}
	}
	if len(got) != int(last-applied) {
		t.Fatalf("the restart applied %d commands %v, the log holds %d after %d", len(got), got, last-applied, applied)
	}
	n := 0
	for w := range crashWriters {
		n += len(page(s.ListMessages(ctx, fmt.Sprint("t", w), store.ListOptions{Limit: store.MaxListLimit})))
	}
	if uint64(n) != last-ready {
		t.Fatalf("%d messages; the log holds %d appends", n, last-ready)
	}
	for _, a := range acked {
		if _, err := s.GetMessage(ctx, a[0], a[1]); err != nil {
			t.Fatalf("acknowledged message %s of %s: %v", a[1], a[0], err)
		}
	}
	if _, err := s.AppendMessage(ctx, "t0", store.Message{Author: "a", Body: body("after the crash")}); err != nil {
		t.Fatal(err)
	}
	t.Logf("killed at applied %d, commit %d, last %d: %d acknowledged, %d applied on restart", applied, hs.GetCommit(), last, len(acked), len(got))
}

// checkAppliedMatchesIndex checks, entry by entry, that the database
// holds the writes of the commands up to the applied index and none of
// those after it: each command's changes and its index are one batch.
// Every command after ready is an append, whose keys are its own.
func checkAppliedMatchesIndex(t *testing.T, s *store.Store, l *store.RaftLog, ready, applied, last uint64) {
	t.Helper()
	ents, err := l.Entries(ready+1, last+1, math.MaxUint64)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		// The group frames a command with its 8-byte proposal ID.
		cmd, err := store.DecodeCommand(e.GetData()[8:])
		if err != nil {
			t.Fatalf("entry %d: %v", e.GetIndex(), err)
		}
		b := s.DB().NewBatch()
		if err := b.SetRepr(cmd.Repr); err != nil {
			t.Fatal(err)
		}
		r := b.Reader()
		_, key, _, ok, err := r.Next()
		if !ok || err != nil {
			t.Fatalf("entry %d: an empty command (%v)", e.GetIndex(), err)
		}
		_, closer, err := s.DB().Get(key)
		if err == nil {
			_ = closer.Close()
		}
		if has := err == nil; has != (e.GetIndex() <= applied) {
			t.Fatalf("entry %d (applied index %d): its key %q is in the database: %v", e.GetIndex(), applied, key, has)
		}
		_ = b.Close()
	}
}
