package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/progressdb/progressdb/server/internal/startstop"
)

// ShardLeader is held, under its node's etcd session, by the node whose
// replica leads shard n's Raft group: advisory, for routing
// (docs/replication-design.md §9). Raft, not this key, decides who leads.
func (k Keys) ShardLeader(n int) string {
	return "/" + k.Name + "/shards/" + strconv.Itoa(n) + "/leader"
}

// Leader is what a shard's leader record holds.
type Leader struct {
	Node    string `json:"node"`
	Term    uint64 `json:"term"`
	Replica uint64 `json:"replica"`
}

// ParseLeader reads a leader record's value.
func ParseLeader(v []byte) (Leader, error) {
	var l Leader
	if err := json.Unmarshal(v, &l); err != nil {
		return Leader{}, fmt.Errorf("leader record %q: %w", v, err)
	}
	if l.Node == "" || l.Term == 0 || l.Replica == 0 {
		return Leader{}, fmt.Errorf("leader record %q: node, term and replica are required", v)
	}
	return l, nil
}

// LeadersOptions configure a node's Leaders.
type LeadersOptions struct {
	Client *clientv3.Client
	Keys   Keys
	Node   string        // this node's ID
	TTL    time.Duration // the session's: its records go within it once the node dies
	Logger *slog.Logger
	// OnEtcdError, when set, sees every etcd call that failed.
	OnEtcdError func(error)
}

// Leaders publishes the leader records of the shards whose group a
// replica of this node leads, under one etcd session of the node: Lead
// and StepDown record what the replicas say, and a goroutine brings etcd
// there, again after any failure. A record never replaces one of a
// later term, and a step down deletes only this node's own record, so
// that a slow node cannot undo its successor's. When the session is lost
// (a partition longer than the TTL) every record is published again
// under a new one.
type Leaders struct {
	o    LeadersOptions
	life startstop.Base
	kick chan struct{} // one token: something changed

	mu   sync.Mutex
	want map[int]Leader // shards led now; guarded by mu
	gone map[int]Leader // records to delete, if still this node's; guarded by mu
}

// NewLeaders returns a node's Leaders; Start runs it.
func NewLeaders(o LeadersOptions) (*Leaders, error) {
	if o.Client == nil || o.Node == "" || o.TTL <= 0 {
		return nil, errors.New("cluster: leader records need a client, a node ID and a TTL")
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return &Leaders{o: o, kick: make(chan struct{}, 1), want: make(map[int]Leader), gone: make(map[int]Leader)}, nil
}

// Lead records that this node's replica leads shard n in term.
func (p *Leaders) Lead(n int, term, replica uint64) {
	p.mu.Lock()
	p.want[n] = Leader{Node: p.o.Node, Term: term, Replica: replica}
	delete(p.gone, n) // the new record replaces the old
	p.mu.Unlock()
	p.poke()
}

// StepDown records that this node's replica no longer leads shard n.
func (p *Leaders) StepDown(n int) {
	p.mu.Lock()
	if l, ok := p.want[n]; ok {
		delete(p.want, n)
		p.gone[n] = l
	}
	p.mu.Unlock()
	p.poke()
}

func (p *Leaders) poke() {
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

// Start publishes until ctx ends or Stop.
func (p *Leaders) Start(ctx context.Context) { p.life.Start(ctx, nil, p.run) }

// Stop ends the session, which deletes every record of this node at once.
func (p *Leaders) Stop() { p.life.Stop() }

// retry is the pause after a failed etcd call.
func (p *Leaders) retry() time.Duration { return max(p.o.TTL/10, 100*time.Millisecond) }

func (p *Leaders) failed(err error) {
	if p.o.OnEtcdError != nil && !errors.Is(err, context.Canceled) {
		p.o.OnEtcdError(err)
	}
}

func (p *Leaders) run(ctx context.Context) {
	ttl := max(int64((p.o.TTL+time.Second-1)/time.Second), 1)
	for ctx.Err() == nil {
		sess, err := p.session(ctx, ttl)
		if err != nil {
			p.failed(err)
			p.o.Logger.Warn("cluster_leader_session_failed", "node", p.o.Node, "err", err)
			sleep(ctx, p.retry())
			continue
		}
		p.serve(ctx, sess)
		// Revoked at a stop, so that the records go now rather than
		// after the TTL; a lost session's lease is gone already.
		_ = sess.Close()
		if ctx.Err() == nil {
			p.o.Logger.Warn("cluster_leader_session_lost", "node", p.o.Node)
		}
	}
}

// session grants a lease, which a stop may interrupt, and keeps it alive
// until the session is closed: not ended by ctx, so that Close can still
// revoke it when ctx ended.
func (p *Leaders) session(ctx context.Context, ttl int64) (*concurrency.Session, error) {
	gctx, cancel := context.WithTimeout(ctx, p.retry()*5)
	defer cancel()
	grant, err := p.o.Client.Grant(gctx, ttl)
	if err != nil {
		return nil, fmt.Errorf("grant a lease: %w", err)
	}
	return concurrency.NewSession(p.o.Client, concurrency.WithLease(grant.ID), concurrency.WithTTL(int(ttl)),
		concurrency.WithContext(context.WithoutCancel(ctx)))
}

// serve keeps etcd at what the replicas say under sess, until ctx ends
// or the session is lost.
func (p *Leaders) serve(ctx context.Context, sess *concurrency.Session) {
	done := make(map[int]Leader) // published under this session
	for {
		behind := p.sync(ctx, sess, done)
		var again <-chan time.Time
		if behind {
			again = time.After(p.retry())
		}
		select {
		case <-ctx.Done():
			return
		case <-sess.Done():
			return
		case <-p.kick:
		case <-again:
		}
	}
}

// sync publishes and deletes what changed; true when a call failed.
func (p *Leaders) sync(ctx context.Context, sess *concurrency.Session, done map[int]Leader) bool {
	p.mu.Lock()
	want := make(map[int]Leader, len(p.want))
	for n, l := range p.want {
		want[n] = l
	}
	gone := make(map[int]Leader, len(p.gone))
	for n, l := range p.gone {
		gone[n] = l
	}
	p.mu.Unlock()
	behind := false
	for n, l := range want {
		if done[n] == l {
			continue
		}
		if err := p.publish(ctx, sess, n, l); err != nil {
			p.failed(err)
			if ctx.Err() != nil {
				return true
			}
			p.o.Logger.Warn("cluster_leader_publish_failed", "shard", n, "term", l.Term, "err", err)
			behind = true
			continue
		}
		done[n] = l
	}
	for n, l := range gone {
		if err := p.clear(ctx, n, l); err != nil {
			p.failed(err)
			if ctx.Err() != nil {
				return true // stopping: the session's end deletes the records
			}
			p.o.Logger.Warn("cluster_leader_clear_failed", "shard", n, "term", l.Term, "err", err)
			behind = true
			continue
		}
		delete(done, n)
		p.mu.Lock()
		if p.gone[n] == l {
			delete(p.gone, n)
		}
		p.mu.Unlock()
	}
	return behind
}

// publish puts l as shard n's record under sess, unless a record of a
// later term is there: compare-and-swap on the revision read, so that a
// successor's record written meanwhile is seen.
func (p *Leaders) publish(ctx context.Context, sess *concurrency.Session, n int, l Leader) error {
	key := p.o.Keys.ShardLeader(n)
	val, err := json.Marshal(l)
	if err != nil {
		return err
	}
	for {
		cctx, cancel := context.WithTimeout(ctx, p.retry()*5)
		get, err := p.o.Client.Get(cctx, key)
		if err != nil {
			cancel()
			return fmt.Errorf("read %s: %w", key, err)
		}
		var rev int64
		if len(get.Kvs) > 0 {
			kv := get.Kvs[0]
			if have, err := ParseLeader(kv.Value); err == nil && have.Term > l.Term {
				cancel()
				return nil // a later term's leader published: ours is history
			}
			rev = kv.ModRevision
		}
		txn, err := p.o.Client.Txn(cctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", rev)).
			Then(clientv3.OpPut(key, string(val), clientv3.WithLease(sess.Lease()))).Commit()
		cancel()
		if err != nil {
			return fmt.Errorf("write %s: %w", key, err)
		}
		if txn.Succeeded {
			return nil
		}
	}
}

// clear deletes shard n's record if it is still l.
func (p *Leaders) clear(ctx context.Context, n int, l Leader) error {
	key := p.o.Keys.ShardLeader(n)
	val, err := json.Marshal(l)
	if err != nil {
		return err
	}
	cctx, cancel := context.WithTimeout(ctx, p.retry()*5)
	defer cancel()
	if _, err := p.o.Client.Txn(cctx).If(clientv3.Compare(clientv3.Value(key), "=", string(val))).
		Then(clientv3.OpDelete(key)).Commit(); err != nil {
		return fmt.Errorf("delete %s: %w", key, err)
	}
	return nil
}

// sleep waits d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}
