package replica_test

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/progressdb/progressdb/audit"
	"github.com/progressdb/progressdb/server/internal/replica"
	"github.com/progressdb/progressdb/server/internal/testtools"
	"github.com/progressdb/progressdb/server/pkg/store"
)

// The helper process's folder and the step of run-b's file at which a
// follower stops between a command's effect and its batch.
const (
	envEffectDir = "PROGRESSDB_REPLICA_EFFECT_DIR"
	envEffectSeq = "PROGRESSDB_REPLICA_EFFECT_SEQ"
)

// effectCrashGroup is the helper's group.
const effectCrashGroup = 3

// effectRunStart is when the helper's runs start.
var effectRunStart = time.Date(2026, 3, 30, 23, 0, 0, 0, time.UTC)

// TestEffectCrashHelper is the process TestEffectThenKill9AppliesOnce
// kills: three nodes over Local writing two runs' audit files through
// the leader; one follower, once it made the effect of the step of
// run-b's file starting at the seq it was given, says "stalled NAME SEQ"
// and blocks before the command's batch, while the others go on and
// seal run-b ("sealed").
func TestEffectCrashHelper(t *testing.T) {
	dir := os.Getenv(envEffectDir)
	if dir == "" {
		return // only as TestEffectThenKill9AppliesOnce's process
	}
	seq, err := strconv.ParseInt(os.Getenv(envEffectSeq), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	const g = effectCrashGroup
	var stallOn atomic.Int64
	stallOn.Store(-1)
	c := &testCluster{net: replica.NewLocal(), dir: dir, groups: []uint64{g}, nodes: make([]*node, 3)}
	c.wrapEffects = func(i int, fx store.Effects) store.Effects {
		return func(ctx context.Context, effect []byte) error {
			if err := fx(ctx, effect); err != nil {
				return err
			}
			op, err := audit.DecodeFileOp(effect)
			if err == nil && int64(i) == stallOn.Load() && strings.Contains(op.Name, "-run-b.") && op.Seq == seq {
				fmt.Printf("stalled %s %d\n", op.Name, op.Seq)
				select {} // the effect is made, the batch never comes
			}
			return nil
		}
	}
	c.run(t, nil)
	l := c.servingLeader(g)
	must(c.nodes[l].store(g).CreateThread(context.Background(), store.Thread{ID: "t", Title: "t", Author: "ann"}))
	a := c.openRun(l, g, "run-a", effectRunStart)
	c.records(a, 0, 2)
	c.seal(a)
	c.sameTrails(g, 1, 0)
	stallOn.Store(int64((l + 1) % 3))
	fmt.Printf("follower %d\n", (l+1)%3)
	b := c.openRun(l, g, "run-b", effectRunStart.Add(time.Minute))
	for k := range 3 { // steps at seq 1, 3, 5
		c.records(b, 2+2*k, 2)
	}
	c.seal(b) // at seq 7
	fmt.Println("sealed")
	select {}
}

// A follower killed (SIGKILL) after a command's effect was made in its
// trail and before the command's batch (its applied index) was saved
// reopens below the command, applies it again once when its group runs
// again, and ends with the trail of the other replicas, byte for byte:
// every line once, signed and verifying. Killed at a step of records and
// at the step that seals the file.
func TestEffectThenKill9AppliesOnce(t *testing.T) {
	for _, seq := range []int64{3, 7} {
		t.Run(fmt.Sprint("seq", seq), func(t *testing.T) {
			dir := t.TempDir()
			child := testtools.StartChild(t, "TestEffectCrashHelper", envEffectDir+"="+dir, envEffectSeq+"="+strconv.FormatInt(seq, 10))
			f, name, stalled, sealed := -1, "", false, false
			var said []string // what else the helper printed: its failure
			for !stalled || !sealed {
				line, ok := child.Line()
				if !ok {
					t.Fatalf("the helper ended before it stalled:\n%s", strings.Join(said, "\n"))
				}
				said = append(said, line)
				fields := strings.Fields(line)
				switch {
				case len(fields) == 2 && fields[0] == "follower":
					f, _ = strconv.Atoi(fields[1])
				case len(fields) == 3 && fields[0] == "stalled":
					name, stalled = fields[1], true
				case line == "sealed":
					sealed = true
				}
			}
			child.Kill()
			index := checkEffectWithoutBatch(t, filepath.Join(dir, fmt.Sprintf("node%d", f)), name, seq)
			checkEffectAppliedOnce(t, dir, f, name, seq, index)
		})
	}
}

// checkEffectWithoutBatch checks that the killed follower's folder holds
// the effect of run-b's step at seq and not its command: the command's
// entry is after its applied index. It returns the entry's index.
func checkEffectWithoutBatch(t *testing.T, nodeDir, name string, seq int64) uint64 {
	t.Helper()
	ctx := context.Background()
	s, err := store.Open(filepath.Join(nodeDir, fmt.Sprintf("shard%d", effectCrashGroup)), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	l := must(s.RaftLog(ctx))
	applied := l.Applied()
	ents, err := l.Entries(applied+1, must(l.LastIndex())+1, math.MaxUint64)
	if err != nil {
		t.Fatal(err)
	}
	var index uint64
	for _, e := range ents {
		if len(e.GetData()) <= 8 {
			continue
		}
		cmd, err := store.DecodeCommand(e.GetData()[8:]) // after the proposal ID
		if err != nil || len(cmd.Effect) == 0 {
			continue
		}
		if op, err := audit.DecodeFileOp(cmd.Effect); err == nil && op.Name == name && op.Seq == seq {
			index = e.GetIndex()
		}
	}
	if index == 0 {
		t.Fatalf("no entry after the applied index %d holds the step at seq %d of %s", applied, seq, name)
	}
	trail := filepath.Join(nodeDir, "audit", fmt.Sprint(effectCrashGroup), name)
	data, err := os.ReadFile(trail)
	if os.IsNotExist(err) {
		data, err = os.ReadFile(trail + ".inprogress")
	}
	if err != nil || int64(bytes.Count(data, []byte("\n"))) <= seq {
		t.Fatalf("the killed follower's file holds %d lines (%v): its effect at seq %d was not made", bytes.Count(data, []byte("\n")), err, seq)
	}
	return index
}

// checkEffectAppliedOnce runs the three nodes again on their folders:
// the follower applies the command at index again, its effect once, and
// every replica ends with the same trail and keys.
func checkEffectAppliedOnce(t *testing.T, dir string, f int, name string, seq int64, index uint64) {
	t.Helper()
	const g = effectCrashGroup
	var again atomic.Int64
	c := &testCluster{net: replica.NewLocal(), dir: dir, groups: []uint64{g}, nodes: make([]*node, 3)}
	c.wrapEffects = func(i int, fx store.Effects) store.Effects {
		return func(ctx context.Context, effect []byte) error {
			if op, err := audit.DecodeFileOp(effect); err == nil && i == f && op.Name == name && op.Seq == seq {
				again.Add(1)
			}
			return fx(ctx, effect)
		}
	}
	c.run(t, nil)
	l := c.servingLeader(g)
	c.sameEverywhere(g, l)
	c.WaitFor("the follower to apply past the command", func() bool { return c.raftLog(f, g).Applied() >= index })
	c.sameTrails(g, 2, 0)
	if n := again.Load(); n != 1 {
		t.Fatalf("the follower made the effect of the command at %d %d times on restart, want once", index, n)
	}
}
