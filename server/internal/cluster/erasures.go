package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/progressdb/progressdb/server/internal/retention"
	"github.com/progressdb/progressdb/server/internal/wire"
	"github.com/progressdb/progressdb/server/pkg/keystore"
	"github.com/progressdb/progressdb/server/pkg/store"
)

// Subject erasure on a cluster (spec §11.1). A request on any node
// records the erasure once, in etcd, with the author sealed under the
// cluster's receipt key (keystore.SealAuthor), and answers. Every node's
// ErasureWorker sees it and has each shard it owns adopt it: the shard
// runs the single-node erasure (spec §12) under the same ID, under its
// ownership, in its own audit trail. A shard done writes its counts into
// the record; the last one's write completes the erasure and deletes the
// author from etcd in the same transaction. What stays is the status:
// the subject's HMAC, the times and each shard's counts, until the record
// is pruned DefaultErasureKeep after completion; each shard keeps its own
// part for good, as a single node does, and answers for it after
// (RecordFromShards).

// DefaultErasureKeep is how long a completed erasure's record stays in
// etcd. Every node's worker reads every record at each look, so records
// kept for ever would make that read grow without bound; a pruned
// erasure's status is answered from the shards' own parts, and its
// receipt's evidence is in the audit folders.
const DefaultErasureKeep = 30 * 24 * time.Hour

// Erasures is the prefix of the cluster's erasure records.
func (k Keys) Erasures() string { return "/" + k.Name + "/erasures/" }

// Erasure is erasure id's record.
func (k Keys) Erasure(id string) string { return k.Erasures() + id }

// ErasureRecord is a cluster's erasure in etcd.
type ErasureRecord struct {
	ID          string `json:"erasure_id"`
	Subject     string `json:"subject"` // hmac-sha256 of the author with the receipt key
	RequestedAt int64  `json:"requested_at"`
	CompletedAt int64  `json:"completed_at,omitempty"`
	Shards      int    `json:"shards"`
	// Author is sealed under the receipt key, bound to the ID; it is
	// deleted when the last shard completes.
	Author []byte `json:"author,omitempty"`
	// Done holds each completed shard's status, by shard.
	Done map[int]retention.ErasureStatus `json:"done,omitempty"`
}

// Open reports whether some shard has still to complete the erasure.
func (r ErasureRecord) Open() bool { return r.CompletedAt == 0 }

// NewErasureRecord is the record of a new erasure of author on a cluster
// of shards: the author sealed under receiptKey, the subject its HMAC.
func NewErasureRecord(receiptKey []byte, id, author string, shards int, at time.Time) (ErasureRecord, error) {
	sealed, err := keystore.SealAuthor(receiptKey, id, author)
	if err != nil {
		return ErasureRecord{}, err
	}
	return ErasureRecord{ID: id, Subject: keystore.SubjectOf(receiptKey, author), RequestedAt: at.UnixNano(),
		Shards: shards, Author: sealed}, nil
}

// RecordErasure writes a new erasure's record: one etcd transaction, which
// refuses an ID recorded already.
func RecordErasure(ctx context.Context, c *clientv3.Client, k Keys, rec ErasureRecord) error {
	v, err := json.Marshal(rec)
	if err != nil {
		return fmt.Errorf("record erasure %s: %w", rec.ID, err)
	}
	key := k.Erasure(rec.ID)
	resp, err := c.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
		Then(clientv3.OpPut(key, string(v))).Commit()
	if err != nil {
		return fmt.Errorf("record erasure %s: %w", rec.ID, err)
	}
	if !resp.Succeeded {
		return fmt.Errorf("record erasure %s: the ID is taken", rec.ID)
	}
	return nil
}

// ReadErasure reads erasure id's record and its revision
// (store.ErrNotFound when there is none).
func ReadErasure(ctx context.Context, c *clientv3.Client, k Keys, id string) (ErasureRecord, int64, error) {
	resp, err := c.Get(ctx, k.Erasure(id))
	if err != nil {
		return ErasureRecord{}, 0, fmt.Errorf("read erasure %s: %w", id, err)
	}
	if len(resp.Kvs) == 0 {
		return ErasureRecord{}, 0, fmt.Errorf("erasure %s: %w", id, store.ErrNotFound)
	}
	rec, err := decodeErasure(resp.Kvs[0].Key, resp.Kvs[0].Value)
	return rec, resp.Kvs[0].ModRevision, err
}

func decodeErasure(key, v []byte) (ErasureRecord, error) {
	var rec ErasureRecord
	if err := json.Unmarshal(v, &rec); err != nil || rec.ID == "" || rec.Shards < 1 {
		return ErasureRecord{}, fmt.Errorf("%s is not an erasure record: %w", key, store.ErrMalformed)
	}
	return rec, nil
}

// OpenErasures lists the erasures some shard has still to complete, in ID
// order, and the etcd revision they were read at. A record that does not
// decode is passed to bad and left out.
func OpenErasures(ctx context.Context, c *clientv3.Client, k Keys, bad func(error)) ([]ErasureRecord, int64, error) {
	all, rev, err := listErasures(ctx, c, k, bad)
	var out []ErasureRecord
	for _, e := range all {
		if e.rec.Open() {
			out = append(out, e.rec)
		}
	}
	return out, rev, err
}

// storedErasure is a record as read, with its revision.
type storedErasure struct {
	rec ErasureRecord
	rev int64
}

// listErasures reads every erasure record, in ID order, and the etcd
// revision they were read at. A record that does not decode is passed to
// bad and left out.
func listErasures(ctx context.Context, c *clientv3.Client, k Keys, bad func(error)) ([]storedErasure, int64, error) {
	resp, err := c.Get(ctx, k.Erasures(), clientv3.WithPrefix())
	if err != nil {
		return nil, 0, fmt.Errorf("list erasures: %w", err)
	}
	var out []storedErasure
	for _, kv := range resp.Kvs {
		rec, err := decodeErasure(kv.Key, kv.Value)
		if err != nil {
			bad(err)
			continue
		}
		out = append(out, storedErasure{rec: rec, rev: kv.ModRevision})
	}
	return out, resp.Header.Revision, nil
}

// PruneErasures deletes the records of the erasures completed before
// cutoff, and returns how many it deleted. Records still open, or that
// do not decode, stay.
func PruneErasures(ctx context.Context, c *clientv3.Client, k Keys, cutoff time.Time) (int, error) {
	all, _, err := listErasures(ctx, c, k, func(error) {})
	if err != nil {
		return 0, err
	}
	n, _, err := pruneErasures(ctx, c, k, all, cutoff)
	return n, err
}

// pruneErasures deletes, of the records read, those completed before
// cutoff, and returns how many it deleted and the earliest completion
// time of the completed records left (zero when none). Each delete is
// conditional on the record being as read: nodes pruning together
// delete it once.
func pruneErasures(ctx context.Context, c *clientv3.Client, k Keys, all []storedErasure, cutoff time.Time) (int, time.Time, error) {
	deleted := 0
	var next time.Time
	for _, e := range all {
		if e.rec.Open() {
			continue
		}
		done := time.Unix(0, e.rec.CompletedAt)
		if !done.Before(cutoff) {
			if next.IsZero() || done.Before(next) {
				next = done
			}
			continue
		}
		key := k.Erasure(e.rec.ID)
		resp, err := c.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", e.rev)).
			Then(clientv3.OpDelete(key)).Commit()
		if err != nil {
			return deleted, next, fmt.Errorf("prune erasure %s: %w", e.rec.ID, err)
		}
		if resp.Succeeded {
			deleted++
		}
	}
	return deleted, next, nil
}

// RecordFromShards rebuilds the record of erasure id, pruned from etcd,
// from the parts its shards keep (parts, by shard, of the cluster's
// shards): what the record held, bar the author, which left it at
// completion. It reports false when no shard knows the erasure. A shard
// without a part shows pending, as in the record.
func RecordFromShards(id string, shards int, parts map[int]retention.ErasureStatus) (ErasureRecord, bool) {
	rec := ErasureRecord{ID: id, Shards: shards, Done: map[int]retention.ErasureStatus{}}
	known := false
	for n, st := range parts {
		if n < 0 || n >= shards {
			continue
		}
		known = true
		rec.Subject = st.Subject
		rec.RequestedAt = st.RequestedAt.UnixNano()
		if st.Status == retention.ErasureCompleted {
			st.Subject, st.Shards = "", nil
			rec.Done[n] = st
		}
	}
	if !known {
		return ErasureRecord{}, false
	}
	if len(rec.Done) == shards {
		for _, d := range rec.Done {
			rec.CompletedAt = max(rec.CompletedAt, d.CompletedAt.UnixNano())
		}
	}
	return rec, true
}

// ShardErased writes shard n's completed part of erasure id into its
// record, and completes the erasure when n was the last shard: the author
// leaves etcd in the same write. A compare-and-swap on the record, so
// that shards completing together do not overwrite each other.
func ShardErased(ctx context.Context, c *clientv3.Client, k Keys, id string, n int, st retention.ErasureStatus) (ErasureRecord, error) {
	for {
		rec, rev, err := ReadErasure(ctx, c, k, id)
		if err != nil {
			return ErasureRecord{}, err
		}
		if n < 0 || n >= rec.Shards {
			return rec, fmt.Errorf("erasure %s: shard %d is not one of its %d", id, n, rec.Shards)
		}
		if _, done := rec.Done[n]; done {
			return rec, nil
		}
		if rec.Done == nil {
			rec.Done = make(map[int]retention.ErasureStatus, rec.Shards)
		}
		st.Subject, st.Shards = "", nil // the record's own
		rec.Done[n] = st
		if len(rec.Done) == rec.Shards {
			for _, d := range rec.Done {
				rec.CompletedAt = max(rec.CompletedAt, d.CompletedAt.UnixNano())
			}
			rec.Author = nil
		}
		v, err := json.Marshal(rec)
		if err != nil {
			return rec, fmt.Errorf("erasure %s: %w", id, err)
		}
		key := k.Erasure(id)
		resp, err := c.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", rev)).
			Then(clientv3.OpPut(key, string(v))).Commit()
		if err != nil {
			return rec, fmt.Errorf("erasure %s: shard %d done: %w", id, n, err)
		}
		if resp.Succeeded {
			return rec, nil
		}
	}
}

// Status is the cluster's status of the erasure (GET /admin/erasures/{id}):
// each shard's part, from the record when it completed and from live
// (its owner's answer; absent: it has none now) otherwise, and their
// totals. It is completed only when every shard completed, pending while
// none has begun, failed while one failed and none goes, running
// otherwise.
func (r ErasureRecord) Status(live map[int]retention.ErasureStatus) retention.ErasureStatus {
	out := retention.ErasureStatus{ErasureID: r.ID, Subject: r.Subject, RequestedAt: wire.Nanos(r.RequestedAt),
		HeldThreads: []string{}, RunIDs: []string{}, Shards: make([]retention.ShardErasure, r.Shards)}
	counts := map[string]int{}
	var failed []string
	for n := range r.Shards {
		st, ok := r.Done[n]
		if !ok {
			st, ok = live[n]
		}
		if !ok || st.Status == "" {
			st = retention.ErasureStatus{Status: retention.ErasurePending}
		}
		held := st.HeldThreads
		if held == nil {
			held = []string{}
		}
		out.Shards[n] = retention.ShardErasure{Shard: n, Status: st.Status, KeysDestroyed: st.KeysDestroyed,
			VersionsPurged: st.VersionsPurged, MessagesPurged: st.MessagesPurged, HeldThreads: held, Error: st.Error}
		counts[st.Status]++
		if st.Status == retention.ErasureFailed {
			failed = append(failed, "shard "+strconv.Itoa(n)+": "+st.Error)
		}
		out.KeysDestroyed += st.KeysDestroyed
		out.VersionsPurged += st.VersionsPurged
		out.MessagesPurged += st.MessagesPurged
		out.HeldThreads = append(out.HeldThreads, st.HeldThreads...)
		out.RunIDs = append(out.RunIDs, st.RunIDs...)
	}
	slices.Sort(out.HeldThreads)
	switch {
	case !r.Open():
		// Every shard completed: the last one's write closed the record.
		out.Status, out.CompletedAt = retention.ErasureCompleted, wire.Nanos(r.CompletedAt)
	case counts[retention.ErasurePending] == r.Shards:
		out.Status = retention.ErasurePending
	case len(failed) > 0 && counts[retention.ErasureRunning] == 0:
		out.Status = retention.ErasureFailed
		out.Error = strings.Join(failed, "; ")
	default:
		out.Status = retention.ErasureRunning
	}
	return out
}

// Erasures records a cluster's erasures (POST /admin/erasures on any
// node) and reads them back.
type Erasures struct {
	Client *clientv3.Client
	Keys   Keys
	// ReceiptKey is the cluster's (spec §11.1).
	ReceiptKey []byte
	Shards     int
	// Pause is the cluster's switch: a paused cluster refuses a request,
	// as a paused node does, and records nothing.
	Pause retention.PauseSwitch
	Now   func() time.Time // time.Now when nil
}

// Request records a new erasure of author, in one etcd write; every
// shard's owner runs it from there.
func (e *Erasures) Request(ctx context.Context, author string) (ErasureRecord, error) {
	if e.Pause != nil {
		get := e.Pause.Get
		if b, ok := e.Pause.(retention.BatchPauseSwitch); ok {
			get = b.GetAtBatch // a recent read: the answer costs one etcd write
		}
		p, err := get(ctx)
		if err != nil {
			return ErasureRecord{}, fmt.Errorf("%w: %w", retention.ErrPaused, err)
		}
		if p.Paused {
			return ErasureRecord{}, retention.ErrPaused
		}
	}
	now := time.Now
	if e.Now != nil {
		now = e.Now
	}
	rec, err := NewErasureRecord(e.ReceiptKey, retention.NewErasureID(), author, e.Shards, now().UTC())
	if err != nil {
		return ErasureRecord{}, err
	}
	if err := RecordErasure(ctx, e.Client, e.Keys, rec); err != nil {
		return ErasureRecord{}, err
	}
	return rec, nil
}

// Read reads erasure id's record (store.ErrNotFound when unknown).
func (e *Erasures) Read(ctx context.Context, id string) (ErasureRecord, error) {
	rec, _, err := ReadErasure(ctx, e.Client, e.Keys, id)
	return rec, err
}
