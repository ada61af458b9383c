package replica_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/progressdb/progressdb/audit"
	"github.com/progressdb/progressdb/server/internal/replica"
	"github.com/progressdb/progressdb/server/internal/replica/replicatest"
	"github.com/progressdb/progressdb/server/internal/testtools"
	"github.com/progressdb/progressdb/server/pkg/store"
)

// The helper process's folder and the case it runs (effectCases).
const (
	envEffectDir  = "PROGRESSDB_REPLICA_EFFECT_DIR"
	envEffectCase = "PROGRESSDB_REPLICA_EFFECT_CASE"
)

// effectCrashGroup is the helper's group.
const effectCrashGroup = 3

// effectRunStart is when the helper's runs start.
var effectRunStart = time.Date(2026, 3, 30, 23, 0, 0, 0, time.UTC)

// effectCase is where TestEffectThenKill9AppliesOnce kills a follower:
// after the effect of a command of kind, before its batch.
type effectCase struct {
	kind   store.EffectKind
	sealed bool // the replicas' stores seal (testCluster.sealed)
	blobs  bool // the replicas have blob folders (testCluster.blobs)
	// run makes the case's writes through the leader l, in the helper;
	// arm makes the follower stall at the effect stall selects. It may
	// print "note NAME VALUE" lines for made and again.
	run func(c *testCluster, l int, arm func())
	// stall reports whether the follower stops at an effect of kind, the
	// nth (from 1) it made since arm.
	stall func(effect []byte, n int) bool
	// made checks, in the killed follower's folders, that the effect was
	// made; again checks what it left once the nodes ran again.
	made, again func(t *testing.T, c *testCluster, f int, notes map[string]string)
}

// effectCases are the helper's cases, by name.
var effectCases = map[string]effectCase{
	"trail-seq3":  trailCase(3), // a step of records
	"trail-seq7":  trailCase(7), // the step that seals the file
	"key-create":  keyCreateCase(),
	"key-destroy": keyDestroyCase(),
	"blob-chunk":  blobChunkCase(),
	"blob-delete": blobDeleteCase(),
}

// cluster is the case's three nodes on dir, not started.
func (ec effectCase) cluster(t *testing.T, dir string) *testCluster {
	c := &testCluster{Nodes: replicatest.Nodes{T: t}, net: replica.NewLocal(), dir: dir, groups: []uint64{effectCrashGroup},
		nodes: make([]*node, 3), blobs: ec.blobs}
	if ec.sealed {
		c.sealed = newSealing(t)
	}
	return c
}

// effectHash names an effect in the helper's output.
func effectHash(effect []byte) string {
	sum := sha256.Sum256(effect)
	return hex.EncodeToString(sum[:])
}

// TestEffectCrashHelper is the process TestEffectThenKill9AppliesOnce
// kills: three nodes over Local make the writes of its case through the
// leader; one follower ("follower N"), once it made the effect the case
// selects, says "stalled HASH" and blocks before the command's batch,
// while the others go on and end the case's writes ("done").
func TestEffectCrashHelper(t *testing.T) {
	dir := os.Getenv(envEffectDir)
	if dir == "" {
		return // only as TestEffectThenKill9AppliesOnce's process
	}
	ec, ok := effectCases[os.Getenv(envEffectCase)]
	if !ok {
		t.Fatalf("no effect case %q", os.Getenv(envEffectCase))
	}
	var stallOn, seen atomic.Int64
	stallOn.Store(-1)
	c := ec.cluster(t, dir)
	c.wrapEffects = func(i int, kind store.EffectKind, fx store.Effects) store.Effects {
		if kind != ec.kind {
			return fx
		}
		return func(ctx context.Context, effect []byte) error {
			// Armed before the effect is made: the case may arm as soon
			// as it sees an earlier effect made.
			armed := int64(i) == stallOn.Load()
			if err := fx(ctx, effect); err != nil {
				return err
			}
			if armed && ec.stall(effect, int(seen.Add(1))) {
				fmt.Printf("stalled %s\n", effectHash(effect))
				select {} // the effect is made, the batch never comes
			}
			return nil
		}
	}
	c.run(t, nil)
	l := c.servingLeader(effectCrashGroup)
	f := (l + 1) % 3
	fmt.Printf("follower %d\n", f)
	ec.run(c, l, func() { stallOn.Store(int64(f)) })
	fmt.Println("done")
	select {}
}

// A follower killed (SIGKILL) after a command's effect was made and
// before the command's batch (its applied index) was saved reopens below
// the command, applies it again once when its group runs again, and ends
// as the other replicas: for each kind of effect (a retention run's
// audit lines, a change of the key store, an attachment's bytes), at
// each step of each case.
func TestEffectThenKill9AppliesOnce(t *testing.T) {
	for _, name := range slices.Sorted(maps.Keys(effectCases)) {
		t.Run(name, func(t *testing.T) {
			ec := effectCases[name]
			dir := t.TempDir()
			child := testtools.StartChild(t, "TestEffectCrashHelper", envEffectDir+"="+dir, envEffectCase+"="+name)
			f, hash, done := -1, "", false
			notes := map[string]string{}
			var said []string // what the helper printed: its failure, if it ends
			for hash == "" || !done {
				line, ok := child.Line()
				if !ok {
					t.Fatalf("the helper ended before it stalled:\n%s", strings.Join(said, "\n"))
				}
				said = append(said, line)
				fields := strings.Fields(line)
				switch {
				case len(fields) == 2 && fields[0] == "follower":
					f, _ = strconv.Atoi(fields[1])
				case len(fields) == 2 && fields[0] == "stalled":
					hash = fields[1]
				case len(fields) == 3 && fields[0] == "note":
					notes[fields[1]] = fields[2]
				case line == "done":
					done = true
				}
			}
			child.Kill()
			c := ec.cluster(t, dir)
			indexes := checkEffectWithoutBatch(t, c, f, ec.kind, hash)
			ec.made(t, c, f, notes)
			checkEffectAppliedOnce(t, c, f, ec, hash, indexes)
			ec.again(t, c, f, notes)
		})
	}
}

// checkEffectWithoutBatch checks that the killed follower's log holds
// the command whose effect it stalled at after its applied index, and
// returns the indexes of the entries holding it (one, unless a proposal
// was made again).
func checkEffectWithoutBatch(t *testing.T, c *testCluster, f int, kind store.EffectKind, hash string) []uint64 {
	t.Helper()
	ctx := context.Background()
	s, err := c.openStore(f, effectCrashGroup)
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
	var indexes []uint64
	for _, e := range ents {
		if len(e.GetData()) <= 8 {
			continue
		}
		cmd, err := store.DecodeCommand(e.GetData()[8:]) // after the proposal ID
		if err == nil && cmd.EffectKind == kind && len(cmd.Effect) > 0 && effectHash(cmd.Effect) == hash {
			indexes = append(indexes, e.GetIndex())
		}
	}
	if len(indexes) == 0 {
		t.Fatalf("no entry after the applied index %d holds the command whose effect the follower made", applied)
	}
	return indexes
}

// checkEffectAppliedOnce runs the three nodes again on their folders:
// the follower applies the command at indexes again, its effect once
// each, and every replica ends with the same keys.
func checkEffectAppliedOnce(t *testing.T, c *testCluster, f int, ec effectCase, hash string, indexes []uint64) {
	t.Helper()
	const g = effectCrashGroup
	var again atomic.Int64
	c.wrapEffects = func(i int, kind store.EffectKind, fx store.Effects) store.Effects {
		if i != f || kind != ec.kind {
			return fx
		}
		return func(ctx context.Context, effect []byte) error {
			if effectHash(effect) == hash {
				again.Add(1)
			}
			return fx(ctx, effect)
		}
	}
	c.run(t, nil)
	l := c.servingLeader(g)
	c.sameEverywhere(g, l)
	last := indexes[len(indexes)-1]
	c.WaitFor("the follower to apply past the command", func() bool { return c.raftLog(f, g).Applied() >= last })
	if n := again.Load(); n != int64(len(indexes)) {
		t.Fatalf("the follower made the effect of the command at %v %d times on restart, want once each", indexes, n)
	}
}

// trailCase kills the follower at the step of run-b's file starting at
// seq (steps at seq 1, 3, 5, the seal at 7): its trail ends as the
// others', byte for byte, every line once, signed and verifying.
func trailCase(seq int64) effectCase {
	const g = effectCrashGroup
	return effectCase{kind: store.EffectTrail,
		run: func(c *testCluster, l int, arm func()) {
			must(c.nodes[l].store(g).CreateThread(context.Background(), store.Thread{ID: "t", Title: "t", Author: "ann"}))
			a := c.openRun(l, g, "run-a", effectRunStart)
			c.records(a, 0, 2)
			c.seal(a)
			c.sameTrails(g, 1, 0)
			arm()
			b := c.openRun(l, g, "run-b", effectRunStart.Add(time.Minute))
			for k := range 3 {
				c.records(b, 2+2*k, 2)
			}
			c.seal(b)
		},
		stall: func(effect []byte, _ int) bool {
			op, err := audit.DecodeFileOp(effect)
			return err == nil && strings.Contains(op.Name, "-run-b.") && op.Seq == seq
		},
		made: func(t *testing.T, c *testCluster, f int, _ map[string]string) {
			files, _ := filepath.Glob(filepath.Join(c.trail(f, g), "*", "*-run-b.jsonl*"))
			if len(files) != 1 {
				t.Fatalf("the killed follower's run-b files: %v", files)
			}
			data, err := os.ReadFile(files[0])
			if err != nil || int64(bytes.Count(data, []byte("\n"))) <= seq {
				t.Fatalf("the killed follower's file holds %d lines (%v): its effect at seq %d was not made", bytes.Count(data, []byte("\n")), err, seq)
			}
		},
		again: func(t *testing.T, c *testCluster, _ int, _ map[string]string) { c.sameTrails(g, 2, 0) },
	}
}
