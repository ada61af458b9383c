package replica_test

import (
	"context"
	"crypto/ed25519"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/progressdb/progressdb/audit"
	"github.com/progressdb/progressdb/server/internal/replica"
	"github.com/progressdb/progressdb/server/internal/testtools"
	"github.com/progressdb/progressdb/server/pkg/store"
)

// The helper process's folder and the point of a snapshot's install it
// stops at.
const (
	envSnapDir = "PROGRESSDB_REPLICA_SNAP_DIR"
	envSnapAt  = "PROGRESSDB_REPLICA_SNAP_AT"
)

// snapCrashGroup is the helper's group.
const snapCrashGroup = 1

// TestSnapshotInstallCrashHelper is the process
// TestSnapshotInstallSurvivesKill9 kills: three nodes over Local, a
// follower stopped while the others write 40 messages past what their
// logs keep and a retention run's audit file, then started again with a
// folder that says "at POINT" and stops there, in the middle of the
// snapshot's install.
func TestSnapshotInstallCrashHelper(t *testing.T) {
	dir := os.Getenv(envSnapDir)
	if dir == "" {
		return // only as TestSnapshotInstallSurvivesKill9's process
	}
	at := os.Getenv(envSnapAt)
	const g = snapCrashGroup
	c := &testCluster{net: replica.NewLocal(), dir: dir, groups: []uint64{g}, nodes: make([]*node, 3), logKeep: 5}
	c.run(t, nil)
	l := c.servingLeader(g)
	must(c.nodes[l].store(g).CreateThread(context.Background(), store.Thread{ID: "t", Title: "t", Author: "ann"}))
	started := time.Date(2026, 3, 30, 23, 0, 0, 0, time.UTC)
	a := c.openRun(l, g, "run-a", started)
	c.records(a, 0, 2)
	c.seal(a)
	c.sameEverywhere(g, l)
	c.sameTrails(g, 1, 0)
	f := (l + 1) % 3
	c.stopBehind(g, l, f)
	b := c.openRun(l, g, "run-b", started.Add(time.Hour))
	c.records(b, 2, 2)
	c.seal(b)
	c.stallAt(f, at)
}

// A follower killed (SIGKILL) in the middle of a snapshot's install
// reopens, after RecoverFolder, with one whole folder and nothing beside
// it: its own state before the folders were swapped (none of the 40
// messages), the snapshot's after (all of them), and in both a log whose
// hard state and snapshot agree with what it holds, and the audit trail
// that goes with it (the run written while it was down only with the
// snapshot's state), verifying.
func TestSnapshotInstallSurvivesKill9(t *testing.T) {
	for _, tc := range []struct {
		at       string
		messages int
	}{{"adopt", 0}, {"close", 0}, {"reopen", 40}} {
		t.Run(tc.at, func(t *testing.T) {
			dir := t.TempDir()
			child := testtools.StartChild(t, "TestSnapshotInstallCrashHelper", envSnapDir+"="+dir, envSnapAt+"="+tc.at)
			f := -1
			for {
				line, ok := child.Line()
				if !ok {
					t.Fatal("the helper ended before it reached the install")
				}
				if n, found := strings.CutPrefix(line, "follower "); found {
					f, _ = strconv.Atoi(n)
				}
				if line == "at "+tc.at {
					break
				}
			}
			child.Kill()
			folder := filepath.Join(dir, fmt.Sprintf("node%d", f), fmt.Sprintf("shard%d", snapCrashGroup))
			checkInstallCrash(t, folder, tc.messages)
			trail := filepath.Join(dir, fmt.Sprintf("node%d", f), "audit", fmt.Sprint(snapCrashGroup))
			checkTrailAfterCrash(t, trail, 1+tc.messages/40)
		})
	}
}

func checkInstallCrash(t *testing.T, folder string, messages int) {
	t.Helper()
	ctx := context.Background()
	if err := replica.RecoverFolder(folder); err != nil {
		t.Fatal(err)
	}
	for _, leftover := range []string{".snapshot", ".replaced"} {
		if _, err := os.Stat(folder + leftover); !os.IsNotExist(err) {
			t.Errorf("%s left beside the folder: %v", leftover, err)
		}
	}
	s, err := store.Open(folder, store.Options{})
	if err != nil {
		t.Fatalf("the follower's folder after the kill: %v", err)
	}
	defer s.Close()
	got := page(s.ListMessages(ctx, "t", store.ListOptions{Limit: 100}))
	if len(got) != messages {
		t.Fatalf("the follower holds %d messages, want %d", len(got), messages)
	}
	l := must(s.RaftLog(ctx))
	hs, _, _ := l.InitialState()
	snap := must(l.Snapshot())
	first, last := must(l.FirstIndex()), must(l.LastIndex())
	if hs == nil || hs.GetTerm() == 0 || hs.GetCommit() < snap.GetMetadata().GetIndex() {
		t.Fatalf("hard state %v with a snapshot at %d", hs, snap.GetMetadata().GetIndex())
	}
	if first > snap.GetMetadata().GetIndex()+1 || last+1 < first || l.Applied() < snap.GetMetadata().GetIndex() {
		t.Fatalf("log [%d, %d], snapshot at %d, applied %d", first, last, snap.GetMetadata().GetIndex(), l.Applied())
	}
}

// checkTrailAfterCrash checks the trail a killed install left, once its
// folder was recovered: whole, with nothing beside it, verifying, and
// holding the sealed files of the state it goes with.
func checkTrailAfterCrash(t *testing.T, trail string, sealed int) {
	t.Helper()
	for _, leftover := range []string{".snapshot", ".replaced"} {
		if _, err := os.Stat(trail + leftover); !os.IsNotExist(err) {
			t.Errorf("%s left beside the trail: %v", leftover, err)
		}
	}
	rep, err := audit.VerifyDirWith(trail, audit.VerifyOptions{PublicKey: trailKey.Public().(ed25519.PublicKey)})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Problems) > 0 || rep.Files != sealed || rep.Verified != sealed || len(rep.InProgress) > 0 {
		t.Fatalf("the trail holds %d sealed files, %d verified, in progress %v (want %d), problems %v",
			rep.Files, rep.Verified, rep.InProgress, sealed, rep.Problems)
	}
}

// stallAt starts follower f and stalls its process forever at the named
// point of its snapshot's install, saying so on standard output: the
// test reading it then kills the process there.
func (c *testCluster) stallAt(f int, at string) {
	fmt.Printf("follower %d\n", f)
	c.hook = func(node int, point string) {
		if node == f && point == at {
			fmt.Printf("at %s\n", point)
			select {}
		}
	}
	c.start(f)
	select {}
}
