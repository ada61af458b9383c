package store_test

import (
	"bufio"
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/progressdb/progressdb/server/internal/testtools"
	"github.com/progressdb/progressdb/server/pkg/store"
)

// envRaftHelper names the folder the helper process appends to.
const envRaftHelper = "PROGRESSDB_RAFTLOG_HELPER_DIR"

// raftCrashData is what the helper writes into entry (index, term), so
// that a reopened log shows whether an entry is the one written there.
func raftCrashData(index, term uint64) []byte {
	return fmt.Appendf(nil, "entry %d term %d", index, term)
}

// TestRaftLogCrashHelper is the process TestRaftLogCrash kills: it saves
// updates as raft's Ready would (entries, hard state with the new commit
// index, applied index, in one synced batch), sometimes cutting back the
// tail with a newer term or compacting, and prints "saved LAST TERM" after
// each one returned.
func TestRaftLogCrashHelper(t *testing.T) {
	dir := os.Getenv(envRaftHelper)
	if dir == "" {
		return // only as TestRaftLogCrash's process
	}
	ctx := context.Background()
	s, err := store.Open(dir, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	l, err := s.RaftLog(ctx)
	if err != nil {
		t.Fatal(err)
	}
	last, _ := l.LastIndex()
	hs, _, _ := l.InitialState()
	term := max(hs.GetTerm(), 1)
	out := bufio.NewWriter(os.Stdout)
	for k := 0; ; k++ {
		from := last + 1
		if k%5 == 4 && last > 3 { // a new leader overwrites the tail
			term++
			from = last - 2
		}
		n := 1 + k%7
		ents := make([]*raftpb.Entry, n)
		for i := range ents {
			idx := from + uint64(i)
			ents[i] = &raftpb.Entry{Index: new(idx), Term: new(term), Data: raftCrashData(idx, term)}
		}
		last = from + uint64(n) - 1
		u := store.RaftUpdate{Entries: ents, HardState: &raftpb.HardState{Term: new(term), Vote: new(uint64(1)), Commit: new(last)},
			Applied: last, Sync: true}
		if k%11 == 10 {
			u.Compact = last - 5
		}
		if err := l.Save(ctx, u); err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(out, "saved %d %d\n", last, term)
		_ = out.Flush()
	}
}

// A process killed (SIGKILL) while it appends leaves a log that reopens
// with every acknowledged append, entries that each hold what was written
// at their index, and a hard state and applied index from the same batch
// as the last entry: the log and the state never disagree.
func TestRaftLogCrash(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "db")
	for round := range 6 {
		ackLast, ackTerm := runRaftHelper(t, dir, 20+round*15)
		checkRaftCrash(t, dir, ackLast, ackTerm)
	}
}

// runRaftHelper runs the helper until it acknowledged n saves, kills it
// and returns the last acknowledged index and term.
func runRaftHelper(t *testing.T, dir string, n int) (last, term uint64) {
	t.Helper()
	c := testtools.StartChild(t, "TestRaftLogCrashHelper", envRaftHelper+"="+dir)
	for seen := 0; seen < n; {
		line, ok := c.Line()
		if !ok {
			t.Fatalf("helper ended after %d saves", seen)
		}
		if !strings.HasPrefix(line, "saved ") {
			continue // the test framework's own lines
		}
		f := strings.Fields(line)
		last, _ = strconv.ParseUint(f[1], 10, 64)
		term, _ = strconv.ParseUint(f[2], 10, 64)
		seen++
	}
	c.Kill() // SIGKILL, while it is saving the next update; later saves were not acknowledged to us
	return last, term
}

func checkRaftCrash(t *testing.T, dir string, ackLast, ackTerm uint64) {
	t.Helper()
	ctx := context.Background()
	s, err := store.Open(dir, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	l, err := s.RaftLog(ctx)
	if err != nil {
		t.Fatal(err)
	}
	first, _ := l.FirstIndex()
	last, _ := l.LastIndex()
	hs, _, _ := l.InitialState()
	// The helper only cuts back three entries and writes more, so the
	// log never ends before an acknowledged index, nor in an older term.
	if last < ackLast || hs.GetTerm() < ackTerm {
		t.Fatalf("reopened at last %d term %d; %d in term %d was acknowledged", last, hs.GetTerm(), ackLast, ackTerm)
	}
	if hs.GetCommit() != last || l.Applied() != last {
		t.Fatalf("hard state commit %d and applied %d disagree with the last entry %d", hs.GetCommit(), l.Applied(), last)
	}
	ents, err := l.Entries(first, last+1, math.MaxUint64)
	if err != nil {
		t.Fatal(err)
	}
	if uint64(len(ents)) != last-first+1 {
		t.Fatalf("%d entries between %d and %d", len(ents), first, last)
	}
	prev := uint64(0)
	for _, e := range ents {
		if string(e.GetData()) != string(raftCrashData(e.GetIndex(), e.GetTerm())) || e.GetTerm() < prev {
			t.Fatalf("entry %d term %d holds %q after a term %d", e.GetIndex(), e.GetTerm(), e.GetData(), prev)
		}
		prev = e.GetTerm()
	}
	if prev != hs.GetTerm() {
		t.Fatalf("last entry's term %d, hard state's %d", prev, hs.GetTerm())
	}
	t.Logf("reopened: entries %d..%d, term %d (acknowledged %d in term %d)", first, last, hs.GetTerm(), ackLast, ackTerm)
}
