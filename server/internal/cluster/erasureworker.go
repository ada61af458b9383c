package cluster

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/progressdb/progressdb/server/internal/retention"
	"github.com/progressdb/progressdb/server/pkg/keystore"
)

// DefaultErasureRetry is how often a node looks again at the erasures its
// shards owe while some are not completed (a run going, a pause, a shard
// whose service is not started yet): a watch of etcd and this node's
// ownership changes wake it at once otherwise.
const DefaultErasureRetry = time.Second

// ErasureShards are shards whose part in erasures a node runs: the shards
// it owns (*Owner), or the replicated shards its replicas lead.
type ErasureShards interface {
	// Owned lists the shards whose parts run here now.
	Owned() []int
	// Changed is closed at the next change of Owned (or of Moving).
	Changed() <-chan struct{}
	// Moving reports whether shard n is frozen for a move: its part
	// waits.
	Moving(n int) bool
}

// ErasureWorkerOptions configure an ErasureWorker.
type ErasureWorkerOptions struct {
	Client *clientv3.Client
	Keys   Keys
	// Owner is the shards this node owns; Leader, when set, the
	// replicated shards it leads: the parts of both run here.
	Owner  ErasureShards
	Leader ErasureShards
	// ReceiptKey is the cluster's, which opens the authors in etcd.
	ReceiptKey []byte
	// Service is owned shard n's part in erasures; nil while it has none
	// (a shard just moved here, not started yet).
	Service func(n int) retention.ShardEraser
	Logger  *slog.Logger
	// Retry is DefaultErasureRetry when 0.
	Retry time.Duration
	// Keep is how long a completed erasure's record stays in etcd
	// (DefaultErasureKeep when 0).
	Keep time.Duration
	// Now is time.Now when nil.
	Now func() time.Time
	// OnEtcdError, when set, sees every etcd call that failed.
	OnEtcdError func(error)
}

// ErasureWorker has every shard this node owns (or, replicated, leads)
// adopt the cluster's open erasures (spec §11.1): at start, on every new
// record (an etcd watch), whenever this node gains or regains a shard
// (or its lead), and again while a shard's
// part is not completed; a part completed is written into the record.
// So a shard whose owner was down or moving when the erasure was asked
// for finishes it once it has an owner again, with no new request.
type ErasureWorker struct {
	o    ErasureWorkerOptions
	stop context.CancelFunc
	done chan struct{}
	// opened keeps authors unsealed once per erasure.
	mu     sync.Mutex
	opened map[string]string
	failed map[string]bool // records whose author does not open, logged once
}

// StartErasureWorker starts the worker; Close stops it.
func StartErasureWorker(ctx context.Context, o ErasureWorkerOptions) *ErasureWorker {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Retry <= 0 {
		o.Retry = DefaultErasureRetry
	}
	if o.Keep <= 0 {
		o.Keep = DefaultErasureKeep
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	ctx, stop := context.WithCancel(ctx)
	w := &ErasureWorker{o: o, stop: stop, done: make(chan struct{}), opened: map[string]string{}, failed: map[string]bool{}}
	go w.loop(ctx)
	return w
}

// Close stops the worker and waits for it. The runs it started go on
// under their shards' services, which their own Close stops.
func (w *ErasureWorker) Close() {
	w.stop()
	<-w.done
}

func (w *ErasureWorker) failedCall(err error) {
	if w.o.OnEtcdError != nil && !errors.Is(err, context.Canceled) {
		w.o.OnEtcdError(err)
	}
}

func (w *ErasureWorker) loop(ctx context.Context) {
	defer close(w.done)
	for ctx.Err() == nil {
		// Read before the ownerships: a change after this read wakes the
		// wait below.
		changed, led := w.o.Owner.Changed(), (<-chan struct{})(nil)
		if w.o.Leader != nil {
			led = w.o.Leader.Changed()
		}
		all, rev, err := listErasures(ctx, w.o.Client, w.o.Keys, func(err error) {
			w.o.Logger.Error("cluster_erasure_record_unreadable", "err", err)
		})
		owed, ends, prune := true, []<-chan struct{}(nil), time.Duration(0)
		if err != nil {
			w.failedCall(err)
			w.o.Logger.Warn("cluster_erasures_unreadable", "err", err)
		} else {
			var open []ErasureRecord
			for _, e := range all {
				if e.rec.Open() {
					open = append(open, e.rec)
				}
			}
			owed, ends = w.reconcile(ctx, open)
			prune = w.prune(ctx, all)
		}
		w.wait(ctx, changed, led, rev, owed, ends, prune)
	}
}

// pruneFloor is the least wait for the next record due for pruning.
const pruneFloor = 100 * time.Millisecond

// prune deletes the records of erasures completed more than Keep ago,
// and returns when the next one is due (0: none is).
func (w *ErasureWorker) prune(ctx context.Context, all []storedErasure) time.Duration {
	now := w.o.Now()
	n, next, err := pruneErasures(ctx, w.o.Client, w.o.Keys, all, now.Add(-w.o.Keep))
	if err != nil {
		w.failedCall(err)
		w.o.Logger.Warn("cluster_erasures_prune_failed", "err", err)
		return w.o.Retry
	}
	if n > 0 {
		w.o.Logger.Info("cluster_erasures_pruned", "records", n)
	}
	if next.IsZero() {
		return 0
	}
	// Never a busy loop, whatever the clocks of the nodes that completed
	// the records say.
	return max(next.Add(w.o.Keep).Sub(now), pruneFloor)
}

// wait returns at a change under the erasures' prefix after rev, a change
// of this node's ownerships or leaderships (led), the end of a run of a shard that owes a part
// (ends), (owed) after the retry interval, or (prune > 0) when the next
// completed record is due for pruning.
func (w *ErasureWorker) wait(ctx context.Context, changed, led <-chan struct{}, rev int64, owed bool, ends []<-chan struct{}, prune time.Duration) {
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ended := make(chan struct{}, 1)
	for _, e := range ends {
		go func() {
			select {
			case <-e:
				select {
				case ended <- struct{}{}:
				default:
				}
			case <-wctx.Done():
			}
		}()
	}
	var watch clientv3.WatchChan
	if rev > 0 {
		watch = w.o.Client.Watch(wctx, w.o.Keys.Erasures(), clientv3.WithPrefix(), clientv3.WithRev(rev+1))
	}
	var retry <-chan time.Time
	if owed && (prune <= 0 || w.o.Retry < prune) {
		prune = w.o.Retry
	}
	if prune > 0 {
		t := time.NewTimer(prune)
		defer t.Stop()
		retry = t.C
	}
	select {
	case <-ctx.Done():
	case <-changed:
	case <-led:
	case <-ended:
	case <-retry:
	case resp, ok := <-watch:
		if !ok || resp.Err() != nil {
			// A watch cut (compacted revision, etcd away): read again
			// after a pause, not in a tight loop.
			select {
			case <-ctx.Done():
			case <-time.After(w.o.Retry):
			}
		}
	}
}

// reconcile has each owned shard adopt each open erasure it has not
// completed, and reports whether some part is still owed here, with the
// end of the next run of each shard that owes one.
func (w *ErasureWorker) reconcile(ctx context.Context, open []ErasureRecord) (owed bool, ends []<-chan struct{}) {
	owned := w.o.Owner.Owned()
	// A shard waits while frozen for a move by what lists it: the owner
	// keeps a shard it grew into a group frozen, and its replica here
	// leads it.
	moving := map[int]bool{}
	for _, n := range owned {
		moving[n] = w.o.Owner.Moving(n)
	}
	if w.o.Leader != nil {
		for _, n := range w.o.Leader.Owned() {
			owned = append(owned, n)
			moving[n] = w.o.Leader.Moving(n)
		}
	}
	slices.Sort(owned)
	owned = slices.Compact(owned)
	live := make(map[string]bool, len(open))
	for _, rec := range open {
		live[rec.ID] = true
		author, ok := w.author(rec)
		if !ok {
			continue
		}
		for _, n := range owned {
			if _, done := rec.Done[n]; done || n >= rec.Shards || moving[n] {
				continue
			}
			if done, end := w.adopt(ctx, rec, author, n); !done {
				owed = true
				if end != nil {
					ends = append(ends, end)
				}
			}
		}
	}
	w.mu.Lock()
	for id := range w.opened {
		if !live[id] {
			delete(w.opened, id) // completed: the author is kept no longer
		}
	}
	w.mu.Unlock()
	return owed, ends
}

// adopt has shard n adopt erasure rec, and writes its part into the
// record once completed; it reports whether the part is done and, when
// not, what closes at the end of the shard's next run.
func (w *ErasureWorker) adopt(ctx context.Context, rec ErasureRecord, author string, n int) (bool, <-chan struct{}) {
	svc := w.o.Service(n)
	if svc == nil {
		return false, nil
	}
	// Taken first: a run that ends during Adopt closes it.
	end := svc.RunEnded()
	st, err := svc.Adopt(ctx, rec.ID, author, time.Unix(0, rec.RequestedAt))
	switch {
	case errors.Is(err, retention.ErrLeaseHeld), errors.Is(err, retention.ErrPaused), errors.Is(err, retention.ErrClosed):
		return false, end // asked again: a run ends, a pause is lifted, the shard moves on
	case err != nil:
		w.o.Logger.Warn("cluster_erasure_adopt_failed", "erasure_id", rec.ID, "shard", n, "err", err)
		return false, nil
	case st.Status != retention.ErasureCompleted:
		return false, end
	}
	after, err := ShardErased(ctx, w.o.Client, w.o.Keys, rec.ID, n, st)
	if err != nil {
		w.failedCall(err)
		w.o.Logger.Warn("cluster_erasure_shard_record_failed", "erasure_id", rec.ID, "shard", n, "err", err)
		return false, nil
	}
	w.o.Logger.Info("cluster_erasure_shard_completed", "erasure_id", rec.ID, "shard", n,
		"keys_destroyed", st.KeysDestroyed, "messages_purged", st.MessagesPurged)
	if !after.Open() {
		w.o.Logger.Info("cluster_erasure_completed", "erasure_id", rec.ID, "subject", rec.Subject)
	}
	return true, nil
}

// author opens rec's author with the receipt key, once per erasure.
func (w *ErasureWorker) author(rec ErasureRecord) (string, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if a, ok := w.opened[rec.ID]; ok {
		return a, true
	}
	a, err := keystore.OpenAuthor(w.o.ReceiptKey, rec.ID, rec.Author)
	if err != nil {
		if !w.failed[rec.ID] {
			w.failed[rec.ID] = true
			w.o.Logger.Error("cluster_erasure_author_unreadable", "erasure_id", rec.ID, "err", err)
		}
		return "", false
	}
	w.opened[rec.ID] = a
	return a, true
}
