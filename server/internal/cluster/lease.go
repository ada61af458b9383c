// Package cluster runs progressdb over several nodes (spec §11): etcd holds
// membership, the shard map and each shard's ownership with its fencing
// token; the chat data stays in each shard's own Pebble database.
package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/progressdb/progressdb/server/internal/retention"
	"github.com/progressdb/progressdb/server/internal/wire"
)

// EtcdCoordinator hands out one lease through etcd: a key held by an etcd
// lease (a concurrency.Session with the TTL), created only when absent.
// The key's creation revision is the fencing token: etcd revisions only
// grow, so every new holder gets a larger one than all before it.
type EtcdCoordinator struct {
	Client *clientv3.Client
	Key    string        // one key per lease, e.g. <cluster>/shards/<n>/owner
	TTL    time.Duration // lease lifetime; renewed every TTL/3
	Owner  string        // unique per process
	Host   string        // os.Hostname when empty
	PID    int           // os.Getpid when zero
	// Now is the holder's clock for its renew deadline (time.Now when nil).
	Now func() time.Time
	// Node and URL, when set, name the cluster node that holds the lease
	// and where it answers, for status.
	Node, URL string
	// OnError, when set, sees every renewal etcd did not answer
	// (progressdb_cluster_etcd_errors_total).
	OnError func(error)
}

var (
	_ retention.Coordinator = EtcdCoordinator{}
	_ retention.HeldLease   = (*etcdLease)(nil)
)

// holderValue is what the key holds: who the holder is. The epoch is the
// key's creation revision and the expiry its lease's, so neither is stored.
type holderValue struct {
	Owner      string    `json:"owner"`
	Host       string    `json:"host"`
	PID        int       `json:"pid"`
	AcquiredAt time.Time `json:"acquired_at"`
	Node       string    `json:"node,omitempty"`
	URL        string    `json:"url,omitempty"`
}

func (c EtcdCoordinator) withDefaults() (EtcdCoordinator, error) {
	switch {
	case c.Client == nil:
		return c, errors.New("etcd lease: no client")
	case c.Key == "":
		return c, errors.New("etcd lease: empty key")
	case c.TTL < time.Second:
		// etcd counts lease TTLs in whole seconds.
		return c, fmt.Errorf("etcd lease: TTL must be at least 1s, got %s", c.TTL)
	case c.Owner == "":
		return c, errors.New("etcd lease: empty owner")
	}
	if err := retention.FillHolder(&c.Host, &c.PID, &c.Now); err != nil {
		return c, fmt.Errorf("etcd lease: %w", err)
	}
	return c, nil
}

// failed reports an etcd call that did not succeed, unless the caller
// ended it.
func (c EtcdCoordinator) failed(err error) {
	if c.OnError != nil && !errors.Is(err, context.Canceled) {
		c.OnError(err)
	}
}

// ttlSeconds rounds the TTL up: etcd's lease may outlive our deadline,
// never the other way round.
func (c EtcdCoordinator) ttlSeconds() int64 { return int64((c.TTL + time.Second - 1) / time.Second) }

// Acquire takes the lease or fails at once with a *retention.LeaseHeldError
// naming the holder; it never queues.
func (c EtcdCoordinator) Acquire(ctx context.Context) (retention.HeldLease, error) {
	return c.acquire(ctx, nil, nil)
}

// ErrHandOver: a hand-over's transaction found the cluster changed (the
// shard map or the move it belongs to), so nothing was taken.
var ErrHandOver = errors.New("the cluster changed during the hand-over")

// acquire is Acquire in a transaction that also requires cmps and applies
// ops with the key's creation, all or nothing.
func (c EtcdCoordinator) acquire(ctx context.Context, cmps []clientv3.Cmp, ops []clientv3.Op) (retention.HeldLease, error) {
	c, err := c.withDefaults()
	if err != nil {
		return nil, err
	}
	// Taken before the grant: the etcd lease lives at least TTL from here.
	start := c.Now()
	grant, err := c.Client.Grant(ctx, c.ttlSeconds())
	if err != nil {
		return nil, fmt.Errorf("etcd lease %s: grant: %w", c.Key, err)
	}
	val, err := json.Marshal(holderValue{Owner: c.Owner, Host: c.Host, PID: c.PID, AcquiredAt: start.UTC(),
		Node: c.Node, URL: c.URL})
	if err != nil {
		return nil, fmt.Errorf("etcd lease: encode holder: %w", err)
	}
	resp, err := c.Client.Txn(ctx).
		If(append([]clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(c.Key), "=", 0)}, cmps...)...).
		Then(append([]clientv3.Op{clientv3.OpPut(c.Key, string(val), clientv3.WithLease(grant.ID))}, ops...)...).
		Else(clientv3.OpGet(c.Key)).
		Commit()
	if err != nil {
		c.revoke(grant.ID)
		return nil, fmt.Errorf("etcd lease %s: %w", c.Key, err)
	}
	if !resp.Succeeded {
		c.revoke(grant.ID)
		if len(cmps) > 0 && len(resp.Responses[0].GetResponseRange().GetKvs()) == 0 {
			return nil, fmt.Errorf("etcd lease %s: %w", c.Key, ErrHandOver)
		}
		return nil, c.heldError(ctx, resp)
	}
	// The session keeps the etcd lease alive in the background; the
	// holder's own renewals (Renew) set its deadline.
	sess, err := concurrency.NewSession(c.Client, concurrency.WithLease(grant.ID))
	if err != nil {
		c.revoke(grant.ID)
		return nil, fmt.Errorf("etcd lease %s: session: %w", c.Key, err)
	}
	at := start.UTC()
	l := &etcdLease{
		c:        c,
		sess:     sess,
		released: make(chan struct{}),
		lostc:    make(chan struct{}),
		info: retention.LeaseInfo{Owner: c.Owner, Host: c.Host, PID: c.PID, Epoch: resp.Header.Revision,
			AcquiredAt: wire.At(at), RenewedAt: wire.At(at), Expires: wire.At(at.Add(c.TTL))},
		renewed: start,
	}
	go l.watch()
	return l, nil
}

// heldError describes the holder from the failed transaction's read.
func (c EtcdCoordinator) heldError(ctx context.Context, resp *clientv3.TxnResponse) error {
	var holder retention.LeaseInfo
	if rr := resp.Responses[0].GetResponseRange(); rr != nil && len(rr.Kvs) > 0 {
		kv := rr.Kvs[0]
		var v holderValue
		if json.Unmarshal(kv.Value, &v) == nil {
			holder = retention.LeaseInfo{Owner: v.Owner, Host: v.Host, PID: v.PID, AcquiredAt: wire.At(v.AcquiredAt)}
		}
		holder.Epoch = kv.CreateRevision
		// When the holder's etcd lease runs out, unless renewed.
		if ttl, err := c.Client.TimeToLive(ctx, clientv3.LeaseID(kv.Lease)); err == nil && ttl.TTL > 0 {
			holder.Expires = wire.At(c.Now().Add(time.Duration(ttl.TTL) * time.Second).UTC())
		}
	}
	return &retention.LeaseHeldError{Holder: holder}
}

// revoke gives an etcd lease back, best effort: one not revoked expires.
func (c EtcdCoordinator) revoke(id clientv3.LeaseID) {
	ctx, cancel := context.WithTimeout(context.Background(), c.rpcTimeout())
	defer cancel()
	_, _ = c.Client.Revoke(ctx, id)
}

// rpcTimeout bounds one call to etcd made by a holder: a renewal that
// takes longer than a third of the TTL comes too late to help.
func (c EtcdCoordinator) rpcTimeout() time.Duration { return max(c.TTL/3, 100*time.Millisecond) }

// renewDeadline is how long after a renewal was sent the holder may still
// act: the etcd lease lives a full TTL from when etcd handled the renewal,
// which is after it was sent, so the holder stops a third of a TTL early.
func (c EtcdCoordinator) renewDeadline() time.Duration { return c.TTL * 2 / 3 }

// etcdLease is a held etcd lease.
type etcdLease struct {
	c        EtcdCoordinator
	sess     *concurrency.Session
	released chan struct{} // closed by Release: stops Heartbeat and watch
	lostc    chan struct{} // closed once lost is set

	io sync.Mutex // serialises Renew and Release

	mu      sync.Mutex // guards the fields below; never held during a call to etcd
	info    retention.LeaseInfo
	renewed time.Time // when the last successful renewal was sent
	lost    error     // non-nil once lost or released
}

func (l *etcdLease) Info() retention.LeaseInfo {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.info
}

func (l *etcdLease) Done() <-chan struct{} { return l.lostc }

func (l *etcdLease) Check() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.checkLocked()
}

func (l *etcdLease) checkLocked() error {
	if l.lost != nil {
		return l.lost
	}
	if deadline := l.renewed.Add(l.c.renewDeadline()); !l.c.Now().Before(deadline) {
		l.setLostLocked(fmt.Errorf("%w: expired: renew deadline %s passed", retention.ErrLeaseLost,
			deadline.UTC().Format(time.RFC3339Nano)))
	}
	return l.lost
}

// setLostLocked records the first loss and closes the lost signal.
func (l *etcdLease) setLostLocked(err error) {
	if l.lost == nil {
		l.lost = err
		close(l.lostc)
	}
}

// lose marks the lease lost for reason and stops keeping it alive, so that
// etcd lets it expire and another node can take over.
func (l *etcdLease) lose(reason error) error {
	l.mu.Lock()
	l.setLostLocked(fmt.Errorf("%w: %w", retention.ErrLeaseLost, reason))
	err := l.lost
	l.mu.Unlock()
	l.sess.Orphan()
	return err
}

// Renew refreshes the etcd lease once and checks the key is still this
// holder's. etcd saying the lease or the key is gone loses the lease; an
// etcd that does not answer is an error the next heartbeat retries, until
// the renew deadline passes.
func (l *etcdLease) Renew(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	l.io.Lock()
	defer l.io.Unlock()
	if err := l.Check(); err != nil {
		return err
	}
	sent := l.c.Now()
	rctx, cancel := context.WithTimeout(ctx, l.c.rpcTimeout())
	defer cancel()
	ka, err := l.c.Client.KeepAliveOnce(rctx, l.sess.Lease())
	switch {
	case errors.Is(err, rpctypes.ErrLeaseNotFound):
		return l.lose(errors.New("etcd lease expired"))
	case err != nil:
		l.c.failed(err)
		return fmt.Errorf("renew etcd lease: %w", err)
	case ka.TTL <= 0:
		return l.lose(errors.New("etcd lease expired"))
	}
	get, err := l.c.Client.Get(rctx, l.c.Key)
	if err != nil {
		l.c.failed(err)
		return fmt.Errorf("renew etcd lease: read %s: %w", l.c.Key, err)
	}
	info := l.Info()
	if len(get.Kvs) == 0 {
		return l.lose(fmt.Errorf("key %s gone", l.c.Key))
	}
	if kv := get.Kvs[0]; kv.CreateRevision != info.Epoch || clientv3.LeaseID(kv.Lease) != l.sess.Lease() {
		var v holderValue
		_ = json.Unmarshal(kv.Value, &v)
		return l.lose(fmt.Errorf("taken over by %s (epoch %d)", v.Owner, kv.CreateRevision))
	}

	l.mu.Lock()
	defer l.mu.Unlock()
	if l.lost != nil {
		return l.lost // a renewal never revives a lost lease
	}
	if sent.After(l.renewed) {
		l.renewed = sent
		l.info.RenewedAt = wire.At(sent.UTC())
		l.info.Expires = wire.At(sent.UTC().Add(l.c.TTL))
	}
	return nil
}

// Heartbeat renews at once, then every TTL/3, until ctx ends, the lease
// is released or lost. A renewal etcd did not answer is tried again at
// the next tick. At once: a lease handed from one heartbeat to another
// (a node's registration, from Register to its Owner) may have been
// renewed last nearly TTL/3 ago, or had its renewal cancelled in flight,
// and a first renewal a whole TTL/3 later would find the renew deadline
// passed and lose it.
func (l *etcdLease) Heartbeat(ctx context.Context) {
	if err := l.Renew(ctx); errors.Is(err, retention.ErrLeaseLost) {
		return
	}
	t := time.NewTicker(max(l.c.TTL/3, time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-l.released:
			return
		case <-l.lostc:
			return
		case <-t.C:
			if err := l.Renew(ctx); errors.Is(err, retention.ErrLeaseLost) {
				return
			}
		}
	}
}

// watch loses the lease when the session stops keeping it alive (etcd
// revoked it, or it went unanswered for a whole TTL), and stops the
// session once the lease is lost some other way (Check past the renew
// deadline, Release), so that etcd lets it expire.
func (l *etcdLease) watch() {
	select {
	case <-l.sess.Done():
		_ = l.lose(errors.New("etcd session ended"))
	case <-l.lostc:
		l.sess.Orphan()
	}
}

// Release revokes the etcd lease, which deletes the key, so another node
// need not wait out the TTL. Revoking is safe even when the lease was
// lost: it only ever removes keys attached to this holder's own lease.
func (l *etcdLease) Release() error {
	l.io.Lock()
	defer l.io.Unlock()
	l.mu.Lock()
	select {
	case <-l.released:
		l.mu.Unlock()
		return nil
	default:
	}
	l.setLostLocked(fmt.Errorf("%w: released", retention.ErrLeaseLost))
	close(l.released)
	l.mu.Unlock()

	l.sess.Orphan()
	ctx, cancel := context.WithTimeout(context.Background(), l.c.rpcTimeout())
	defer cancel()
	if _, err := l.c.Client.Revoke(ctx, l.sess.Lease()); err != nil && !errors.Is(err, rpctypes.ErrLeaseNotFound) {
		return fmt.Errorf("etcd lease %s: revoke: %w", l.c.Key, err)
	}
	return nil
}
