package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/progressdb/progressdb/audit"
	"github.com/progressdb/progressdb/server/internal/backup"
	"github.com/progressdb/progressdb/server/internal/cluster/etcdtest"
	"github.com/progressdb/progressdb/server/internal/retention"
	"github.com/progressdb/progressdb/server/pkg/config"
	"github.com/progressdb/progressdb/server/pkg/store"
)

// moveNode is one node of a move test: its ownership, its shards' stores
// in its own folders, a retention runner per shard, and its part in moves.
type moveNode struct {
	t       testing.TB
	id      string
	dir     string
	owner   *Owner
	shards  *Shards
	cfg     config.Retention
	mu      sync.Mutex
	runners map[int]*retention.Runner
	node    *Node
}

func startMoveNode(t testing.TB, ctx context.Context, srv *etcdtest.Server, k Keys, id string) *moveNode {
	t.Helper()
	mn := &moveNode{t: t, id: id, dir: filepath.Join(t.TempDir(), id), runners: make(map[int]*retention.Runner)}
	mn.cfg = config.Retention{Enabled: true, Period: 24 * time.Hour, MessagePeriod: 24 * time.Hour,
		AuditPath: filepath.Join(mn.dir, "audit"), BatchSize: 100, Erase: true}
	m, err := ReadMap(ctx, srv.Client(t), k)
	if err != nil {
		t.Fatal(err)
	}
	mn.shards, err = OpenShards(filepath.Join(mn.dir, "data"), m.HeldBy(id), store.Options{}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = mn.shards.Close() })
	mn.owner, err = StartOwner(ctx, OwnerOptions{Client: srv.Client(t), Keys: k, Node: id, Owner: id + "/1", TTL: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(mn.owner.Close)
	for _, n := range m.HeldBy(id) {
		mn.attach(n)
	}
	mn.node, err = NewNode(NodeOptions{Node: id, Owner: mn.owner, Shards: mn.shards, Retention: mn.cfg, Version: "test",
		MoveGrace: 100 * time.Millisecond,
		Holder: func(n int) (backup.Holder, bool) {
			mn.mu.Lock()
			defer mn.mu.Unlock()
			r, ok := mn.runners[n]
			return r, ok
		},
		Attach: mn.attach,
		Detach: func(n int) {
			mn.mu.Lock()
			defer mn.mu.Unlock()
			delete(mn.runners, n)
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	return mn
}

// attach builds shard n's runner as a node does: under the shard's
// ownership, fenced, with the shard's own audit folder; it purges as if
// two days had passed.
func (mn *moveNode) attach(n int) {
	st, ok := mn.shards.Store(n)
	if !ok {
		mn.t.Fatalf("%s: shard %d not held", mn.id, n)
	}
	rc := mn.cfg
	rc.AuditPath = ShardAuditPath(mn.cfg.AuditPath, n)
	shard := n
	r, err := retention.NewRunner(retention.RunnerOptions{Store: st, Config: rc, Coordinator: mn.owner.Coordinator(n),
		Fenced: true, Shard: &shard, Version: "test", Now: func() time.Time { return time.Now().Add(48 * time.Hour) }})
	if err != nil {
		mn.t.Fatal(err)
	}
	mn.mu.Lock()
	mn.runners[n] = r
	mn.mu.Unlock()
}

func (mn *moveNode) store(n int) *store.Store {
	mn.t.Helper()
	st, ok := mn.shards.Store(n)
	if !ok {
		mn.t.Fatalf("%s: shard %d not held", mn.id, n)
	}
	return st
}

// run runs shard n's retention and requires it to complete.
func (mn *moveNode) run(ctx context.Context, n int) retention.Result {
	mn.t.Helper()
	mn.mu.Lock()
	r := mn.runners[n]
	mn.mu.Unlock()
	res, err := r.Run(ctx, retention.RunRequest{Trigger: retention.TriggerCLI})
	if err != nil || res.Status != audit.RunCompleted {
		mn.t.Fatalf("%s: run on shard %d: %+v, %v", mn.id, n, res, err)
	}
	return res
}

// tidsIn returns count thread IDs of shard n (of shards).
func tidsIn(n, shards, count int, prefix string) []string {
	var out []string
	for i := 0; len(out) < count; i++ {
		if tid := fmt.Sprintf("%s-%03d", prefix, i); ShardOf(tid, shards) == n {
			out = append(out, tid)
		}
	}
	return out
}

// checkingSource is node A's part with a check at the hand-over: once
// the copy is taken, a write under the epoch A owned the shard with is
// refused by the fence, and leaves nothing.
type checkingSource struct {
	*Node
	t     *testing.T
	st    *store.Store
	epoch int64
}

func (s checkingSource) Release(ctx context.Context, n int) error {
	_, err := s.st.CreateThread(store.WithEpoch(ctx, s.epoch), store.Thread{ID: "late-write", Title: "x", Author: "y"})
	if !errors.Is(err, store.ErrFenced) {
		s.t.Errorf("a write under the old epoch after the fence = %v, want ErrFenced", err)
	}
	return s.Node.Release(ctx, n)
}

// TestMoveShard moves shard 0 from node A to node B while a client keeps
// writing through A: every write A acknowledged is on B, a thread A
// purged before the move stays purged, A's late writes are refused by
// the fence, A's copy is gone and its trail records the move and
// verifies, and B owns the shard with a larger epoch, serves it and runs
// its retention on the trail that came with it.
func TestMoveShard(t *testing.T) {
	t.Parallel()
	srv := etcdtest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	k := Keys{Name: "chat"}
	c := srv.Client(t)
	if err := CreateCluster(ctx, c, k, 2, []string{"node-a", "node-b"}); err != nil {
		t.Fatal(err)
	}
	a := startMoveNode(t, ctx, srv, k, "node-a")
	b := startMoveNode(t, ctx, srv, k, "node-b")
	oldEpoch, err := a.owner.WaitOwned(ctx, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.owner.WaitOwned(ctx, 1, 0); err != nil {
		t.Fatal(err)
	}

	// Before the move: threads in shard 0, one deleted and purged.
	src := a.store(0)
	wctx, err := a.owner.Fence(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	tids := tidsIn(0, 2, 6, "t")
	for _, tid := range tids {
		if _, err := src.CreateThread(wctx, store.Thread{ID: tid, Title: "x", Author: "y"}); err != nil {
			t.Fatal(err)
		}
	}
	gone := tids[0]
	if _, err := src.DeleteThread(wctx, gone); err != nil {
		t.Fatal(err)
	}
	if res := a.run(ctx, 0); res.Purged != 1 {
		t.Fatalf("purged %d before the move, want 1", res.Purged)
	}

	// A client writing through A all along: what A acknowledges is kept.
	var (
		ackMu sync.Mutex
		acked []string
		stop  = make(chan struct{})
		done  = make(chan struct{})
	)
	go func() {
		defer close(done)
		body, _ := json.Marshal("hello")
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			fctx, err := a.owner.Fence(ctx, 0)
			if err != nil {
				continue // 503: not owned, or being moved
			}
			st, ok := a.shards.Store(0)
			if !ok {
				return // moved away
			}
			mid := fmt.Sprintf("m-%05d", i)
			if _, err := st.AppendMessage(fctx, tids[1], store.Message{ID: mid, Author: "y", Body: body}); err == nil {
				ackMu.Lock()
				acked = append(acked, mid)
				ackMu.Unlock()
			}
			if i%16 == 15 {
				time.Sleep(time.Millisecond) // let the move get the fence's lock
			}
		}
	}()
	// Some writes are acknowledged before the move begins.
	for {
		ackMu.Lock()
		n := len(acked)
		ackMu.Unlock()
		if n >= 20 {
			break
		}
		time.Sleep(time.Millisecond)
	}

	res, err := MoveShard(ctx, MoveOptions{Client: c, Keys: k, Shard: 0, To: "node-b",
		Source: checkingSource{Node: a.node, t: t, st: src, epoch: oldEpoch}, Target: b.node})
	close(stop)
	<-done
	if err != nil {
		t.Fatalf("move: %v", err)
	}
	if !res.Removed || res.From != "node-a" || res.To != "node-b" {
		t.Fatalf("move result %+v", res)
	}
	if !(res.OldEpoch > oldEpoch && res.Epoch > res.OldEpoch) {
		t.Fatalf("epochs: owned with %d, fenced at %d, handed over at %d: each must be larger", oldEpoch, res.OldEpoch, res.Epoch)
	}

	// etcd: B is the shard's home and owner, with the hand-over's epoch.
	m, err := ReadMap(ctx, c, k)
	if err != nil || m.Homes[0] != "node-b" {
		t.Fatalf("map after the move: %+v, %v", m, err)
	}
	if e, err := b.owner.WaitOwned(ctx, 0, 0); err != nil || e != res.Epoch {
		t.Fatalf("B owns shard 0 with %d, %v; want %d", e, err, res.Epoch)
	}
	if _, err := a.owner.Epoch(0); !errors.Is(err, ErrNotOwner) {
		t.Fatalf("A after the move: %v, want ErrNotOwner", err)
	}
	if r, err := c.Get(ctx, k.ShardMove(0), clientv3.WithCountOnly()); err != nil || r.Count != 0 {
		t.Fatalf("move key left: %v, %v", r, err)
	}

	// Every acknowledged write is on B; what A purged is not.
	dst := b.store(0)
	for _, tid := range tids[1:] {
		if _, err := dst.GetThread(ctx, tid); err != nil {
			t.Fatalf("thread %s not on B: %v", tid, err)
		}
	}
	if _, err := dst.GetThread(ctx, gone); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("purged thread on B: %v", err)
	}
	ackMu.Lock()
	if len(acked) < 20 {
		t.Fatalf("%d writes acknowledged", len(acked))
	}
	for _, mid := range acked {
		if _, err := dst.GetMessage(ctx, tids[1], mid); err != nil {
			t.Fatalf("acknowledged message %s not on B: %v", mid, err)
		}
	}
	t.Logf("%d writes acknowledged by A, all on B", len(acked))
	ackMu.Unlock()
	if _, err := dst.GetThread(ctx, "late-write"); !errors.Is(err, store.ErrFenced) && !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("late write: %v", err)
	}

	// A's late write with its old epoch is refused on B's copy too.
	_, err = dst.CreateThread(store.WithEpoch(ctx, oldEpoch), store.Thread{ID: "late-2", Title: "x", Author: "y"})
	if !errors.Is(err, store.ErrFenced) {
		t.Fatalf("a write under A's epoch on B = %v, want ErrFenced", err)
	}

	// A's copy is gone; its trail says where the shard went and verifies.
	if _, err := os.Stat(ShardDBPath(filepath.Join(a.dir, "data"), 0)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("A's copy: %v, want it gone", err)
	}
	if _, held := a.shards.Store(0); held {
		t.Fatal("A still holds shard 0")
	}
	aTrail := ShardAuditPath(a.cfg.AuditPath, 0)
	moved := records(t, aTrail, audit.TriggerMove)
	if len(moved) != 1 {
		t.Fatalf("A's trail holds %d records of a move, want 1", len(moved))
	}
	h, f := readRecord(t, moved[0])
	if h.MovedTo != "node-b" || h.Shard == nil || *h.Shard != 0 || h.Epoch != oldEpoch {
		t.Fatalf("A's record of the move: %+v", h)
	}
	if f.Status != audit.RunCompleted || !f.Erased || f.Purged != 0 {
		t.Fatalf("A's record of the move: footer %+v", f)
	}
	verifyTrail(t, aTrail)

	// B: the trail came with the shard, the replay is recorded on it, and
	// the shard takes writes and retention under B's epoch.
	bTrail := ShardAuditPath(b.cfg.AuditPath, 0)
	if replays := records(t, bTrail, audit.TriggerRestore); len(replays) != 1 {
		t.Fatalf("B's trail holds %d replays, want 1", len(replays))
	}
	if got, want := len(records(t, bTrail, "")), len(records(t, aTrail, "")); got != want {
		t.Fatalf("B's trail holds %d runs, A's %d (before the move's record)", got, want)
	}
	bctx, err := b.owner.Fence(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := dst.DeleteThread(bctx, tids[2]); err != nil {
		t.Fatal(err)
	}
	if r := b.run(ctx, 0); r.Purged != 1 {
		t.Fatalf("B's run purged %d, want 1", r.Purged)
	}
	if got := dst.Epoch(); got != res.Epoch {
		t.Fatalf("B's copy has seen epoch %d, want %d", got, res.Epoch)
	}
	verifyTrail(t, bTrail)

	// And back to A, which held it: A's older trail of the shard, ending
	// with its record of the move away, is set aside whole; the shard's
	// trail goes on from B's; everything B held is on A.
	back, err := MoveShard(ctx, MoveOptions{Client: c, Keys: k, Shard: 0, To: "node-a", Source: b.node, Target: a.node})
	if err != nil || !back.Removed || back.Epoch <= res.Epoch {
		t.Fatalf("move back: %+v, %v", back, err)
	}
	home := a.store(0)
	for _, tid := range []string{tids[1], tids[3], tids[4], tids[5]} {
		if _, err := home.GetThread(ctx, tid); err != nil {
			t.Fatalf("thread %s not back on A: %v", tid, err)
		}
	}
	for _, tid := range []string{gone, tids[2]} {
		if _, err := home.GetThread(ctx, tid); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("purged thread %s back on A: %v", tid, err)
		}
	}
	ackMu.Lock()
	for _, mid := range acked {
		if _, err := home.GetMessage(ctx, tids[1], mid); err != nil {
			t.Fatalf("acknowledged message %s not back on A: %v", mid, err)
		}
	}
	ackMu.Unlock()
	aside, _ := filepath.Glob(aTrail + ".before-*")
	if len(aside) != 1 || len(records(t, aside[0], audit.TriggerMove)) != 1 {
		t.Fatalf("A's older trail set aside: %v", aside)
	}
	verifyTrail(t, aside[0])
	verifyTrail(t, aTrail)
	if len(records(t, aTrail, audit.TriggerRestore)) != 2 || len(records(t, aTrail, audit.TriggerMove)) != 0 {
		t.Fatalf("A's trail after the move back: %d replays, %d moves", len(records(t, aTrail, audit.TriggerRestore)),
			len(records(t, aTrail, audit.TriggerMove)))
	}
	verifyTrail(t, bTrail)
}

// TestMoveShardFailsBeforeHandOver: a target that cannot take the copy
// (its audit folder for the shard is not empty) fails the move; the shard
// stays home, is owned again with an epoch above the fence and takes
// writes, and the target keeps nothing of it.
func TestMoveShardFailsBeforeHandOver(t *testing.T) {
	t.Parallel()
	srv := etcdtest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	k := Keys{Name: "chat"}
	c := srv.Client(t)
	if err := CreateCluster(ctx, c, k, 2, []string{"node-a", "node-b"}); err != nil {
		t.Fatal(err)
	}
	a := startMoveNode(t, ctx, srv, k, "node-a")
	b := startMoveNode(t, ctx, srv, k, "node-b")
	oldEpoch, err := a.owner.WaitOwned(ctx, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	wctx, _ := a.owner.Fence(ctx, 0)
	tid := tidsIn(0, 2, 1, "t")[0]
	if _, err := a.store(0).CreateThread(wctx, store.Thread{ID: tid, Title: "x", Author: "y"}); err != nil {
		t.Fatal(err)
	}
	// B's folder for the shard holds something: the copy cannot go there.
	// B's audit folder for it holds something too, set aside by the move
	// and put back when it fails.
	var strays []string
	for _, dir := range []string{ShardDBPath(filepath.Join(b.dir, "data"), 0), ShardAuditPath(b.cfg.AuditPath, 0)} {
		stray := filepath.Join(dir, "note")
		if err := os.MkdirAll(dir, 0o750); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(stray, []byte("x"), 0o640); err != nil {
			t.Fatal(err)
		}
		strays = append(strays, stray)
	}

	_, err = MoveShard(ctx, MoveOptions{Client: c, Keys: k, Shard: 0, To: "node-b", Source: a.node, Target: b.node})
	if !errors.Is(err, backup.ErrNotEmpty) {
		t.Fatalf("move = %v, want ErrNotEmpty", err)
	}
	if m, _ := ReadMap(ctx, c, k); m.Homes[0] != "node-a" {
		t.Fatalf("home after a failed move: %s", m.Homes[0])
	}
	e, err := a.owner.WaitOwned(ctx, 0, oldEpoch)
	if err != nil {
		t.Fatal(err)
	}
	wctx, err = a.owner.Fence(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.store(0).CreateThread(wctx, store.Thread{ID: tid + "-after", Title: "x", Author: "y"}); err != nil {
		t.Fatalf("write after the failed move (epoch %d): %v", e, err)
	}
	if _, err := a.store(0).CreateThread(store.WithEpoch(ctx, oldEpoch), store.Thread{ID: tid + "-old", Title: "x", Author: "y"}); !errors.Is(err, store.ErrFenced) {
		t.Fatalf("write under the epoch before the move = %v, want ErrFenced", err)
	}
	if _, held := b.shards.Store(0); held {
		t.Fatal("B holds shard 0")
	}
	for _, stray := range strays {
		if _, err := os.Stat(stray); err != nil {
			t.Fatalf("B's own file: %v", err)
		}
	}
	if aside, _ := filepath.Glob(ShardAuditPath(b.cfg.AuditPath, 0) + ".before-*"); len(aside) != 0 {
		t.Fatalf("B's trail left aside: %v", aside)
	}
	if r, err := c.Get(ctx, k.ShardMove(0), clientv3.WithCountOnly()); err != nil || r.Count != 0 {
		t.Fatalf("move key left: %v, %v", r, err)
	}
	// A move to the node that holds it, or to a node not running, is refused.
	if _, err := MoveShard(ctx, MoveOptions{Client: c, Keys: k, Shard: 0, To: "node-a", Source: a.node, Target: a.node}); !errors.Is(err, ErrMoveTarget) {
		t.Fatalf("move to its home = %v, want ErrMoveTarget", err)
	}
	if _, err := MoveShard(ctx, MoveOptions{Client: c, Keys: k, Shard: 0, To: "node-z", Source: a.node, Target: b.node}); !errors.Is(err, ErrNodeDown) {
		t.Fatalf("move to a node not running = %v, want ErrNodeDown", err)
	}
}

// records lists the sealed files under dir whose header has trigger.
func records(t *testing.T, dir, trigger string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if path == dir && errors.Is(err, fs.ErrNotExist) {
			// A shard that never ran retention has no trail until a run
			// or a move writes its first header: no records yet.
			return filepath.SkipDir
		}
		if err != nil || !strings.HasSuffix(path, ".jsonl") {
			return err
		}
		if h, _ := readRecord(t, path); h.Trigger == trigger {
			out = append(out, path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// readRecord reads a sealed file's header and footer.
func readRecord(t *testing.T, path string) (audit.Header, audit.Footer) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	var h audit.Header
	var f audit.Footer
	if err := json.Unmarshal([]byte(lines[0]), &h); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &f); err != nil {
		t.Fatal(err)
	}
	return h, f
}

func verifyTrail(t *testing.T, dir string) {
	t.Helper()
	rep, err := audit.VerifyDirWith(dir, audit.VerifyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Problems) > 0 {
		t.Fatalf("trail %s does not verify: %+v", dir, rep.Problems)
	}
}

// TestMoveShardMoverDies: a mover that dies once the shard is fenced (the
// lease of its move key runs out) leaves nothing frozen: the home takes
// the shard up again with an epoch above the fence and its writes go on,
// while the epoch before the move stays refused. A mover that dies after
// the hand-over, before the old copy is removed, leaves the home to remove
// it and record the move.
func TestMoveShardMoverDies(t *testing.T) {
	t.Parallel()
	srv := etcdtest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	k := Keys{Name: "chat"}
	c := srv.Client(t)
	if err := CreateCluster(ctx, c, k, 2, []string{"node-a", "node-b"}); err != nil {
		t.Fatal(err)
	}
	a := startMoveNode(t, ctx, srv, k, "node-a")
	b := startMoveNode(t, ctx, srv, k, "node-b")
	oldEpoch, err := a.owner.WaitOwned(ctx, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	// A mover claims the move under its lease and fences the shard.
	claim := func() (clientv3.LeaseID, int64) {
		t.Helper()
		grant, err := c.Grant(ctx, 60)
		if err != nil {
			t.Fatal(err)
		}
		put, err := c.Put(ctx, k.ShardMove(0), `{"from":"node-a","to":"node-b"}`, clientv3.WithLease(grant.ID))
		if err != nil {
			t.Fatal(err)
		}
		if err := a.node.Fence(ctx, 0, put.Header.Revision); err != nil {
			t.Fatal(err)
		}
		if _, err := a.owner.Fence(ctx, 0); !errors.Is(err, ErrMoving) {
			t.Fatalf("writes while fenced: %v, want ErrMoving", err)
		}
		return grant.ID, put.Header.Revision
	}
	lease, fence := claim()
	srv.Revoke(t, lease) // the mover is gone: its key goes with its lease
	epoch, err := a.owner.WaitOwned(ctx, 0, fence)
	if err != nil {
		t.Fatal(err)
	}
	wctx, err := a.owner.Fence(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.store(0).CreateThread(wctx, store.Thread{ID: "after", Title: "x", Author: "y"}); err != nil {
		t.Fatalf("write after the move was undone (epoch %d): %v", epoch, err)
	}
	if _, err := a.store(0).CreateThread(store.WithEpoch(ctx, oldEpoch), store.Thread{ID: "old", Title: "x", Author: "y"}); !errors.Is(err, store.ErrFenced) {
		t.Fatalf("write under the epoch before the move: %v, want ErrFenced", err)
	}

	// Handed over, then the mover dies before the old copy is removed.
	lease, fence = claim()
	if err := a.node.Release(ctx, 0); err != nil {
		t.Fatal(err)
	}
	m, err := ReadMap(ctx, c, k)
	if err != nil {
		t.Fatal(err)
	}
	m.Homes[0] = "node-b"
	nm, _ := json.Marshal(m)
	if _, err := b.owner.Take(ctx, 0, []clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(k.ShardMove(0)), "=", fence)},
		[]clientv3.Op{clientv3.OpPut(k.ShardMap(), string(nm)), clientv3.OpDelete(k.ShardMove(0))}); err != nil {
		t.Fatal(err)
	}
	srv.Revoke(t, lease)
	for {
		if _, held := a.shards.Store(0); !held && len(records(t, ShardAuditPath(a.cfg.AuditPath, 0), audit.TriggerMove)) == 1 {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatal("node-a did not remove the copy a dead mover left")
		case <-time.After(10 * time.Millisecond):
		}
	}
	if _, err := os.Stat(ShardDBPath(filepath.Join(a.dir, "data"), 0)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("node-a's copy: %v", err)
	}
	verifyTrail(t, ShardAuditPath(a.cfg.AuditPath, 0))
}

// BenchmarkMoveShard moves a shard of 32 MiB of messages (2048 threads of
// 16 messages of 1 KiB) between two nodes in one process, on one disk:
// how long a move takes, and how long the shard's writes wait for it
// (from the fence to the hand-over, which is most of it).
//
//	go test -run '^$' -bench MoveShard -benchtime 1x ./server/internal/cluster
func BenchmarkMoveShard(b *testing.B) {
	srv := etcdtest.Start(b)
	ctx := context.Background()
	k := Keys{Name: "chat"}
	c := srv.Client(b)
	if err := CreateCluster(ctx, c, k, 1, []string{"node-a", "node-b"}); err != nil {
		b.Fatal(err)
	}
	nodes := map[string]*moveNode{"node-a": startMoveNode(b, ctx, srv, k, "node-a"),
		"node-b": startMoveNode(b, ctx, srv, k, "node-b")}
	if _, err := nodes["node-a"].owner.WaitOwned(ctx, 0, 0); err != nil {
		b.Fatal(err)
	}
	const threads, perThread, bodySize = 2048, 16, 1024
	body, _ := json.Marshal(strings.Repeat("x", bodySize))
	bk := nodes["node-a"].store(0).NewBulk()
	for i := range threads {
		tid := fmt.Sprintf("t%05d", i)
		if err := bk.PutThread(store.Thread{ID: tid, Title: "x", Author: "y", CreatedTS: 1}); err != nil {
			b.Fatal(err)
		}
		for j := range perThread {
			if err := bk.PutMessage([]store.Message{{ID: fmt.Sprintf("%s-m%02d", tid, j), Thread: tid, Author: "y",
				Body: body, TS: int64(j + 1), Version: 1}}); err != nil {
				b.Fatal(err)
			}
		}
	}
	if err := bk.Close(); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	start := time.Now()
	res, err := MoveShard(ctx, MoveOptions{Client: c, Keys: k, Shard: 0, To: "node-b", Source: nodes["node-a"].node,
		Target: nodes["node-b"].node})
	total := time.Since(start)
	if err != nil || !res.Removed || res.Messages != threads*perThread {
		b.Fatalf("move: %+v, %v", res, err)
	}
	b.ReportMetric(total.Seconds(), "s/move")
	b.ReportMetric(float64(threads*perThread*bodySize)/(1<<20)/total.Seconds(), "MiB/s")
}
