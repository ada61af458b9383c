package replica_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/progressdb/progressdb/server/internal/replica"
	"github.com/progressdb/progressdb/server/internal/testtools"
	"github.com/progressdb/progressdb/server/pkg/keystore"
	"github.com/progressdb/progressdb/server/pkg/store"
)

// The sealed helper process's folder (its point is envSnapAt's).
const envSealedSnapDir = "PROGRESSDB_REPLICA_SEALED_SNAP_DIR"

// TestSealedSnapshotCrashHelper is the process
// TestSealedSnapshotInstallSurvivesKill9 kills: three sealed nodes over
// Local; a follower stopped while the others purge thread "gone" (its
// keys destroyed) and bob writes 40 messages to thread "t" (a retry may
// write one twice) under a key made then, past what their logs keep,
// the count printed; then the follower started
// again with a folder that says "at POINT" and stops there, in the
// middle of the install of a snapshot carrying the leader's key store.
func TestSealedSnapshotCrashHelper(t *testing.T) {
	dir := os.Getenv(envSealedSnapDir)
	if dir == "" {
		return // only as TestSealedSnapshotInstallSurvivesKill9's process
	}
	at := os.Getenv(envSnapAt)
	const g = snapCrashGroup
	ctx := context.Background()
	c := &testCluster{net: replica.NewLocal(), dir: dir, groups: []uint64{g}, nodes: make([]*node, 3), logKeep: 5,
		sealed: newSealing(t)}
	c.run(t, nil)
	for _, id := range []string{"t", "gone"} {
		c.retrying(g, func(s *store.Store) error {
			_, err := s.CreateThread(ctx, store.Thread{ID: id, Title: id, Author: "ann"})
			if errors.Is(err, store.ErrExists) { // a try whose outcome was unknown
				return nil
			}
			return err
		})
	}
	l := c.servingLeader(g)
	c.caughtUp(g, l) // the replicas' local keys (sys:seal) differ
	f := (l + 1) % 3
	had := c.raftLog(f, g).Applied()
	c.stop(f)
	c.retrying(g, func(s *store.Store) error {
		_, err := s.DeleteThread(ctx, "gone")
		return err
	})
	c.retrying(g, func(s *store.Store) error {
		_, err := s.Sealer().(*keystore.KeyStore).DestroyThread(ctx, "gone")
		return err
	})
	c.retrying(g, func(s *store.Store) error {
		if err := s.OweErase(ctx); err != nil {
			return err
		}
		_, err := s.PurgeThread(ctx, "gone", store.PurgeOptions{})
		if errors.Is(err, store.ErrNotFound) { // purged by a try whose outcome was unknown
			return nil
		}
		return err
	})
	// Bob's messages: a leader's change is a retry, which may write one
	// twice; the count the follower must end with is the leader's.
	messages := 0
	for k := 0; messages < 40; k++ {
		c.retrying(g, func(s *store.Store) error {
			_, err := s.AppendMessage(ctx, "t", store.Message{Author: "bob", Body: body(fmt.Sprintf("t %d", k))})
			return err
		})
		messages = len(page(c.nodes[c.servingLeader(g)].store(g).ListMessages(ctx, "t", store.ListOptions{Limit: 100})))
	}
	if first := must(c.raftLog(c.servingLeader(g), g).FirstIndex()); first <= had+1 {
		t.Fatalf("the leader's log starts at %d: the stopped replica, at %d, can catch up from it", first, had)
	}
	fmt.Printf("messages %d\n", messages)
	c.stallAt(f, at)
}

// retrying runs op on g's serving leader's store until it succeeds: a
// leader's change on a loaded machine is a retry, as for a client.
func (c *testCluster) retrying(g uint64, op func(*store.Store) error) {
	c.T.Helper()
	var err error
	for range 20 {
		if err = op(c.nodes[c.servingLeader(g)].store(g)); err == nil {
			return
		}
	}
	c.T.Fatal(err)
}

// A sealed follower killed (SIGKILL) in the middle of the install of a
// snapshot carrying its leader's key store reopens, after RecoverFolder,
// with a database and a key store of one side, nothing beside either:
// before the folders were swapped its own (thread "gone" and its keys,
// none of bob's messages), after them the snapshot's (bob's 40 messages
// and his key, "gone" and its keys absent). A database with the other
// side's key store would not open its content.
func TestSealedSnapshotInstallSurvivesKill9(t *testing.T) {
	for _, tc := range []struct {
		at  string
		new bool
	}{{"adopt", false}, {"close", false}, {"reopen", true}} {
		t.Run(tc.at, func(t *testing.T) {
			dir := t.TempDir()
			child := testtools.StartChild(t, "TestSealedSnapshotCrashHelper", envSealedSnapDir+"="+dir, envSnapAt+"="+tc.at)
			f, messages := -1, 0
			for {
				line, ok := child.Line()
				if !ok {
					t.Fatal("the helper ended before it reached the install")
				}
				if n, found := strings.CutPrefix(line, "follower "); found {
					f, _ = strconv.Atoi(n)
				}
				if n, found := strings.CutPrefix(line, "messages "); found {
					messages, _ = strconv.Atoi(n)
				}
				if line == "at "+tc.at {
					break
				}
			}
			child.Kill()
			c := &testCluster{dir: dir, sealed: newSealing(t)}
			checkSealedInstallCrash(t, c, f, tc.new, messages)
		})
	}
}

func checkSealedInstallCrash(t *testing.T, c *testCluster, f int, installed bool, messages int) {
	t.Helper()
	ctx := context.Background()
	folder, ks := c.folder(f, snapCrashGroup), c.keyStore(f, snapCrashGroup)
	if err := replica.RecoverFolder(folder, ks); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{folder, ks} {
		for _, leftover := range []string{".snapshot", ".replaced"} {
			if _, err := os.Stat(d + leftover); !os.IsNotExist(err) {
				t.Errorf("%s left beside %s: %v", leftover, filepath.Base(d), err)
			}
		}
	}
	s, err := store.Open(folder, c.options(folder, ks, ""))
	if err != nil {
		t.Fatalf("the follower's folder and key store after the kill: %v", err)
	}
	defer s.Close()
	msgs := page(s.ListMessages(ctx, "t", store.ListOptions{Limit: 100}))
	if want := map[bool]int{false: 0, true: messages}[installed]; len(msgs) != want || messages < 40 {
		t.Fatalf("the follower holds %d of bob's messages, want %d", len(msgs), want)
	}
	for _, m := range msgs {
		if m.Unreadable || m.Author != "bob" {
			t.Fatalf("a message of bob's on the follower: %+v", m)
		}
	}
	th, err := s.GetThread(ctx, "gone")
	switch {
	case installed && err == nil:
		t.Fatalf("the purged thread on the follower: %+v", th)
	case !installed && (err != nil || th.Title != "gone"):
		t.Fatalf("thread gone on the follower before the swap: %+v (%v)", th, err)
	}
}

// A crash between the steps of a sealed snapshot's swap leaves the
// database folder, the key store and the trail in one of these states;
// RecoverFolder, given the database folder and the key store it goes
// with, leaves exactly one whole folder of each, all three old until the
// database was set aside and all three new from then on. A key store
// unpacked before the journal was written (the stream cut short) goes.
func TestRecoverFolderWithAKeyStore(t *testing.T) {
	type state map[string]string // suffix ("", ".snapshot", ".replaced") → content
	received := state{"": "old", ".snapshot": "new"}
	for _, tc := range []struct {
		name              string
		db, keys, trail   state
		journal           string // the db folder suffix holding the journal; "-": none
		after, trailAfter string
	}{
		{"key store unpacked, no journal", received, received, state{"": "old"}, "-", "old", "old"},
		{"received, not swapped", received, received, received, ".snapshot", "old", "old"},
		{"database set aside", state{".replaced": "old", ".snapshot": "new"}, received, received, ".snapshot", "new", "new"},
		{"key store set aside", state{".replaced": "old", ".snapshot": "new"}, state{".replaced": "old", ".snapshot": "new"}, received,
			".snapshot", "new", "new"},
		{"key store swapped", state{".replaced": "old", ".snapshot": "new"}, state{".replaced": "old", "": "new"}, received,
			".snapshot", "new", "new"},
		{"trail swapped", state{".replaced": "old", ".snapshot": "new"}, state{".replaced": "old", "": "new"},
			state{".replaced": "old", "": "new"}, ".snapshot", "new", "new"},
		{"swapped, old ones not removed", state{"": "new", ".replaced": "old"}, state{"": "new", ".replaced": "old"},
			state{"": "new", ".replaced": "old"}, "", "new", "new"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			dir := filepath.Join(root, "data", "shard")
			keys, trail := filepath.Join(root, "keys", "shard"), filepath.Join(root, "audit", "7")
			for base, st := range map[string]state{dir: tc.db, keys: tc.keys, trail: tc.trail} {
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
				if err := replica.WriteJournal(dir+tc.journal, []string{keys, trail}); err != nil {
					t.Fatal(err)
				}
			}
			if err := replica.RecoverFolder(dir, keys); err != nil {
				t.Fatal(err)
			}
			for base, after := range map[string]string{dir: tc.after, keys: tc.after, trail: tc.trailAfter} {
				if got, err := os.ReadFile(filepath.Join(base, "state")); err != nil || string(got) != after {
					t.Fatalf("%s holds %q (%v), want %q", base, got, err, after)
				}
				for _, suffix := range []string{".snapshot", ".replaced"} {
					if _, err := os.Stat(base + suffix); !os.IsNotExist(err) {
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
