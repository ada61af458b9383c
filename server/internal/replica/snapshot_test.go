package replica_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/progressdb/progressdb/server/internal/replica"
	"github.com/progressdb/progressdb/server/pkg/store"
	"github.com/progressdb/progressdb/server/pkg/store/storetest"
)

// databaseID is replica (g, i)'s database identity: each folder's own
// until a snapshot makes it a copy of the leader's.
func (c *testCluster) databaseID(i int, g uint64) string {
	c.T.Helper()
	return must(c.nodes[i].store(g).DatabaseID(context.Background(), false))
}

// writeMessages appends n messages to thread tid through the leader's
// store, each its own log entry.
func (c *testCluster) writeMessages(l int, g uint64, tid string, n int) {
	c.T.Helper()
	s := c.nodes[l].store(g)
	for k := range n {
		must(s.AppendMessage(context.Background(), tid, store.Message{Author: "ann", Body: body(fmt.Sprintf("%s %d", tid, k))}))
	}
}

// stopBehind stops follower f of g's leader l and writes past it until
// the leader's log no longer holds the entries f needs.
func (c *testCluster) stopBehind(g uint64, l, f int) {
	c.T.Helper()
	had := c.raftLog(f, g).Applied()
	c.stop(f)
	c.writeMessages(l, g, "t", 40)
	if first := must(c.raftLog(l, g).FirstIndex()); first <= had+1 {
		c.T.Fatalf("the leader's log starts at %d: the stopped replica, at %d, can catch up from it", first, had)
	}
	// Bounded: at most twice LogKeep applied entries once truncated.
	c.WaitFor("the leader's log to keep at most twice LogKeep entries", func() bool {
		l := c.raftLog(l, g)
		return l.Applied()-(must(l.FirstIndex())-1) <= 2*uint64(c.logKeep)
	})
}

// A replica stopped while the others write and truncate their logs past
// it catches up, once started again, by a snapshot sent through the
// backup stream: it then holds exactly the leader's keys, its database
// is a copy of the leader's, and later writes reach it through the log.
func TestStoppedReplicaCatchesUpBySnapshot(t *testing.T) {
	c := newKeepingCluster(t, 5, 6)
	const g = 6
	l := c.servingLeader(g)
	must(c.nodes[l].store(g).CreateThread(context.Background(), store.Thread{ID: "t", Title: "t", Author: "ann"}))
	c.sameEverywhere(g, l)
	f := (l + 1) % 3
	before := c.databaseID(f, g)
	c.stopBehind(g, l, f)
	c.start(f)
	c.sameEverywhere(g, l)
	// A copy of the database of the replica that led when it was sent.
	got := c.databaseID(f, g)
	if got == before || got != c.databaseID((f+1)%3, g) && got != c.databaseID((f+2)%3, g) {
		t.Fatalf("the restarted replica's database is %s (before %s): not caught up by snapshot", got, before)
	}
	c.writeMessages(c.servingLeader(g), g, "t", 3)
	c.sameEverywhere(g, c.servingLeader(g))
	for _, leftover := range []string{".snapshot", ".replaced"} {
		if _, err := os.Stat(c.folder(f, g) + leftover); !os.IsNotExist(err) {
			t.Errorf("%s left beside the folder: %v", leftover, err)
		}
	}
}

// A snapshot whose stream stops half way (its sender died) changes
// nothing on the follower: its folder holds its own state, readable, and
// nothing is left beside it; once streams go through again it catches up.
func TestInterruptedSnapshotLeavesTheFollowerAsItWas(t *testing.T) {
	c := newKeepingCluster(t, 5, 2)
	const g = 2
	l := c.servingLeader(g)
	must(c.nodes[l].store(g).CreateThread(context.Background(), store.Thread{ID: "t", Title: "t", Author: "ann"}))
	c.sameEverywhere(g, l)
	f := (l + 1) % 3
	c.stopBehind(g, l, f)
	c.net.BreakSnapshots(2048)
	c.start(f)
	c.WaitFor("two broken snapshot streams", func() bool { return c.net.SnapshotsBroken() >= 2 })
	c.stop(f) // the folder is looked at closed, between two tries
	// A try under way when it stopped ends at the break, and cleans up.
	c.WaitFor("the staged state of the last broken stream to go", func() bool {
		_, err := os.Stat(c.folder(f, g) + ".snapshot")
		return os.IsNotExist(err)
	})
	s, err := store.Open(c.folder(f, g), store.Options{})
	if err != nil {
		t.Fatalf("the follower's folder after broken snapshots: %v", err)
	}
	msgs := page(s.ListMessages(context.Background(), "t", store.ListOptions{}))
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if len(msgs) != 0 {
		t.Fatalf("the follower holds %d messages written while it was stopped", len(msgs))
	}
	c.net.BreakSnapshots(0)
	c.start(f)
	c.sameEverywhere(g, l)
}

// A replica down while a thread is purged still holds the thread's
// content, and its leader counts it as owing an erase; once it returns
// (by snapshot, the leader's log dropped up to the purge) no file under
// its node's folder holds it, every replica holds the same keys, and no
// node counts a replica owing an erase.
func TestReplicaDownDuringPurgeErasesOnReturn(t *testing.T) {
	c := newStoreCluster(t, 9)
	const g = 9
	marker, kept := "DownPurgeMarkerK4p", "DownKeptMarkerJ8s"
	l := c.servingLeader(g)
	s := c.nodes[l].store(g)
	writeMarked(t, s, "gone", marker)
	must(s.CreateThread(context.Background(), store.Thread{ID: "kept", Title: kept, Author: "bob"}))
	c.sameEverywhere(g, l)
	f := (l + 1) % 3
	c.stop(f)
	purge(t, s, "gone")
	c.erasedEverywhere(g, l)
	storetest.RequireAll(t, c.folder(f, g), marker)
	// The stopped replica owes the erase, and its leader counts it.
	const pending = "progressdb_cluster_erase_pending_replicas"
	c.WaitFor("the leader to count the stopped replica", func() bool {
		return c.metric(l, pending, g).GetGauge().GetValue() == 1
	})
	c.start(f)
	c.erasedEverywhere(g, l)
	c.sameEverywhere(g, l)
	c.WaitFor("no replica counted as owing an erase", func() bool {
		sum := 0.0
		for i := range c.nodes {
			sum += c.metric(i, pending, g).GetGauge().GetValue()
		}
		return sum == 0
	})
	for i := range c.nodes {
		storetest.RequireNone(t, filepath.Dir(c.folder(i, g)), marker)
		storetest.RequireAll(t, c.folder(i, g), kept)
	}
}

// A crash during a snapshot's install leaves the database folder and the
// trail beside it in one of these states; RecoverFolder, given the
// database folder alone, leaves exactly one whole folder of each, both
// old until the database was set aside, both new once it was. The
// journal in the staged (then swapped) database names the trail.
func TestRecoverFolderAfterACrash(t *testing.T) {
	type state map[string]string // suffix ("", ".snapshot", ".replaced") → content
	for _, tc := range []struct {
		name        string
		db, trail   state
		journal     string // the db folder suffix holding the journal; "-": none
		after       string // both folders' content afterwards ("" for none)
		trailBefore bool   // without a journal, the trail is left alone
	}{
		{"received, not swapped", state{"": "old", ".snapshot": "new"}, state{"": "old", ".snapshot": "new"}, ".snapshot", "old", false},
		{"received, no trail yet", state{"": "old", ".snapshot": "new"}, state{"": "old"}, ".snapshot", "old", false},
		{"old set aside", state{".replaced": "old", ".snapshot": "new"}, state{"": "old", ".snapshot": "new"}, ".snapshot", "new", false},
		{"trail set aside", state{".replaced": "old", ".snapshot": "new"}, state{".replaced": "old", ".snapshot": "new"}, ".snapshot", "new", false},
		{"trail swapped", state{".replaced": "old", ".snapshot": "new"}, state{".replaced": "old", "": "new"}, ".snapshot", "new", false},
		{"swapped, old not removed", state{"": "new", ".replaced": "old"}, state{"": "new", ".replaced": "old"}, "", "new", false},
		{"swapped, a first trail", state{".replaced": "old", ".snapshot": "new"}, state{".snapshot": "new"}, ".snapshot", "new", false},
		{"new replica, stream cut", state{".snapshot": "new"}, state{".snapshot": "new"}, ".snapshot", "", false},
		{"no journal, received", state{"": "old", ".snapshot": "new"}, state{"": "old"}, "-", "old", true},
		{"no journal, swapped", state{"": "new", ".replaced": "old"}, state{"": "old"}, "-", "new", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			dir, trail := filepath.Join(root, "shard"), filepath.Join(root, "audit", "7")
			for base, st := range map[string]state{dir: tc.db, trail: tc.trail} {
				for suffix, content := range st {
					if err := os.MkdirAll(base+suffix, 0o700); err != nil {
						t.Fatal(err)
					}
					if err := os.WriteFile(filepath.Join(base+suffix, "state"), []byte(content), 0o600); err != nil {
						t.Fatal(err)
					}
				}
			}
			if tc.journal != "-" {
				if err := replica.WriteJournal(dir+tc.journal, []string{trail}); err != nil {
					t.Fatal(err)
				}
			}
			if err := replica.RecoverFolder(dir); err != nil {
				t.Fatal(err)
			}
			want := map[string]string{dir: tc.after, trail: tc.after}
			if tc.trailBefore {
				want[trail] = "old"
			}
			for base, after := range want {
				got, err := os.ReadFile(filepath.Join(base, "state"))
				if after == "" && !os.IsNotExist(err) || after != "" && string(got) != after {
					t.Fatalf("%s holds %q (%v), want %q", base, got, err, after)
				}
				for _, suffix := range []string{".snapshot", ".replaced"} {
					if _, err := os.Stat(base + suffix); !os.IsNotExist(err) && !(tc.trailBefore && base == trail) {
						t.Errorf("%s left: %v", base+suffix, err)
					}
				}
			}
			if _, err := os.Stat(filepath.Join(dir, ".progressdb-snapshot-beside")); !os.IsNotExist(err) {
				t.Errorf("the journal is left: %v", err)
			}
		})
	}
}
