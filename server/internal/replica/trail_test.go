package replica_test

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/progressdb/progressdb/audit"
	"github.com/progressdb/progressdb/server/pkg/store"
)

// trailKey signs the test runs' footers, as PROGRESSDB_AUDIT_SIGNING_KEY
// does every node's.
var trailKey = ed25519.NewKeyFromSeed(bytes.Repeat([]byte{7}, ed25519.SeedSize))

// openRun starts run id's audit file through replica (g, l)'s store, as a
// retention runner over a replicated store does: every replica writes it
// from the log.
func (c *testCluster) openRun(l int, g uint64, id string, started time.Time) *audit.Writer {
	c.T.Helper()
	s := c.nodes[l].store(g)
	w, err := audit.CreateWith(c.trail(l, g), id, audit.Header{StartedAt: started, Owner: "leader", Epoch: 1},
		audit.Options{SigningKey: trailKey, Replicate: func(op audit.FileOp) error {
			data, err := op.Encode()
			if err != nil {
				return err
			}
			return s.ProposeEffect(context.Background(), store.EffectTrail, data)
		}})
	if err != nil {
		c.T.Fatal(err)
	}
	return w
}

// records writes n purged records of messages of thread t into w.
func (c *testCluster) records(w *audit.Writer, from, n int) {
	c.T.Helper()
	for k := from; k < from+n; k++ {
		if err := w.Item(audit.Item{ItemType: "message", ItemID: fmt.Sprint("m", k), ThreadID: "t", Status: audit.StatusPurged}); err != nil {
			c.T.Fatal(err)
		}
	}
	if err := w.Sync(); err != nil {
		c.T.Fatal(err)
	}
}

// seal closes w with the counts of its records.
func (c *testCluster) seal(w *audit.Writer) {
	c.T.Helper()
	f := w.Counts()
	f.Status = audit.RunCompleted
	if _, err := w.Close(f); err != nil {
		c.T.Fatal(err)
	}
}

// trailFiles reads every file under root: relative path → bytes. false:
// a file listed went before it was read (a run's file sealed, renamed
// from its .inprogress name, while the trail was read), so the trail was
// changing: read it again.
func trailFiles(t *testing.T, root string) (map[string]string, bool) {
	t.Helper()
	out := map[string]string{}
	settled := true
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		if errors.Is(err, fs.ErrNotExist) {
			settled = false
			return fs.SkipAll
		}
		out[strings.TrimPrefix(p, root+string(filepath.Separator))] = string(b)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out, settled
}

// sameTrails waits until every running replica of g holds the same shard
// trail, byte for byte, and checks that it verifies on each (signatures
// included), holding the sealed files and files in progress given.
func (c *testCluster) sameTrails(g uint64, sealed, inProgress int) {
	c.T.Helper()
	var want map[string]string
	c.WaitFor(fmt.Sprintf("group %d's replicas to hold the same audit trail", g), func() bool {
		want = nil
		for i, nd := range c.nodes {
			if nd == nil {
				continue
			}
			got, settled := trailFiles(c.T, c.trail(i, g))
			if !settled {
				return false
			}
			if want == nil {
				want = got
			} else if !maps.Equal(got, want) {
				return false
			}
		}
		return true
	})
	for i, nd := range c.nodes {
		if nd == nil {
			continue
		}
		rep, err := audit.VerifyDirWith(c.trail(i, g), audit.VerifyOptions{PublicKey: trailKey.Public().(ed25519.PublicKey)})
		if err != nil {
			c.T.Fatal(err)
		}
		// A run going on holds no lease here: its file is reported as
		// in progress and nothing else.
		problems := slices.DeleteFunc(rep.Problems, func(p audit.Problem) bool { return slices.Contains(rep.InProgress, p.File) })
		if len(problems) > 0 || rep.Files != sealed || rep.Verified != sealed || len(rep.InProgress) != inProgress {
			c.T.Fatalf("node %d's trail: %d sealed files, %d verified, in progress %v (want %d and %d), problems %v; files %v",
				i, rep.Files, rep.Verified, rep.InProgress, sealed, inProgress, problems, slices.Sorted(maps.Keys(want)))
		}
	}
}

// A replica that catches up by snapshot gets the leader's shard trail
// with the database: sealed files, a run's file that went on while it was
// down, and one still in progress, which the commands after the snapshot
// continue and seal. Its trail then is the others', byte for byte, and
// verifies at once: no run's lines arrive for a file it lacks.
func TestSnapshotCarriesTheAuditTrail(t *testing.T) {
	c := newKeepingCluster(t, 5, 7)
	const g = 7
	ctx := context.Background()
	l := c.servingLeader(g)
	must(c.nodes[l].store(g).CreateThread(ctx, store.Thread{ID: "t", Title: "t", Author: "ann"}))
	march := time.Date(2026, 3, 30, 23, 0, 0, 0, time.UTC)
	a := c.openRun(l, g, "run-a", march)
	c.records(a, 0, 2)
	c.seal(a)
	b := c.openRun(l, g, "run-b", march.Add(time.Minute))
	c.records(b, 2, 2)
	c.sameTrails(g, 1, 1)

	f := (l + 1) % 3
	before := c.databaseID(f, g)
	c.stopBehind(g, l, f)
	// While f is down run b goes on and ends, and run c begins in the
	// next month: f's trail lacks all of it.
	c.records(b, 4, 3)
	c.seal(b)
	cr := c.openRun(l, g, "run-c", march.Add(2*time.Hour))
	c.records(cr, 7, 1)
	c.start(f)
	c.sameEverywhere(g, l)
	if got := c.databaseID(f, g); got == before {
		t.Fatal("the restarted replica did not catch up by snapshot")
	}
	c.sameTrails(g, 2, 1)
	for _, leftover := range []string{".snapshot", ".replaced"} {
		if _, err := os.Stat(c.trail(f, g) + leftover); !os.IsNotExist(err) {
			t.Errorf("%s left beside the trail: %v", leftover, err)
		}
	}
	// The run in progress at the snapshot goes on from the log on f too.
	c.records(cr, 8, 2)
	c.seal(cr)
	c.sameTrails(g, 3, 0)
}
