package keystore

import (
	"bytes"
	"context"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"

	"github.com/cockroachdb/pebble/v2"

	"github.com/progressdb/progressdb/server/pkg/erase"
	"github.com/progressdb/progressdb/server/pkg/store"
)

// A replicated shard's key store (spec §15, docs/replication-design.md
// §10) changes only through the shard's Raft log: every replica holds
// the same keys. The replica that leads evaluates a change (a new key's
// DEK, wrapped by the KEK; which keys a destroy removes) and hands it to
// its Proposer as an op; every replica, the leader included, applies
// the op to its own key store (ApplyOp) before the command's batch. The
// leader never writes its keys outside the log.
//
// The author index key must be the same on every replica, or a follower
// that becomes leader would not find an author's keys. A group's
// replicas that start empty make their stores with one derived from the
// group's secret (Options.GroupSecret, held in etcd wrapped by the KEK);
// a shard grown from one copy into a group keeps its store's own
// (JoinGroup), which every other replica receives with the store in its
// first snapshot. The key is wrapped in ks:secret:index either way, so a
// store finds its authors opened with or without the secret. The
// group's secret seals the ops, so that a copy of the data folder, whose
// Raft log holds them until it is dropped, carries no wrapped DEK and no
// author's HMAC readable without etcd's secret.
//
// Each op applies idempotently: a replica killed after an op and before
// its command's batch applies it again, and every later op after it.

// ErrReplicated refuses what a replicated key store does not do outside
// its group's log (a KEK rotation rewrites every value in place).
var ErrReplicated = errors.New("the key store is a replica of a Raft group's")

// Proposer hands an op to the shard's group and returns once this
// replica applied it (ApplyOp). destroys says that the op destroys what
// earlier entries hold: every replica then drops its log up to it and
// erases it (store.ProposeDestroy).
type Proposer func(ctx context.Context, op []byte, destroys bool) error

// GroupSecretSize is the length of Options.GroupSecret.
const GroupSecretSize = 32

// The ops, as they travel sealed.
const (
	opCreate          = "create"
	opDestroyThread   = "destroy_thread"
	opDestroyKeys     = "destroy_keys"
	opPutErasure      = "put_erasure"
	opCompleteErasure = "complete_erasure"
)

// op is one change of the key store.
type op struct {
	Op     string `json:"op"`
	Thread string `json:"thread,omitempty"`
	// MAC is the author's HMAC (create), Number the key's number and
	// Wrapped its DEK wrapped by the KEK.
	MAC     []byte  `json:"mac,omitempty"`
	Number  uint32  `json:"number,omitempty"`
	Wrapped []byte  `json:"wrapped,omitempty"`
	Keys    []opKey `json:"keys,omitempty"`
	ID      string  `json:"id,omitempty"`
	Sealed  []byte  `json:"sealed,omitempty"`
}

// opKey is one key a destroy_keys op removes, with its author's HMAC.
type opKey struct {
	Thread string `json:"thread"`
	Number uint32 `json:"number"`
	MAC    []byte `json:"mac"`
}

// opAD binds a sealed op to its use.
var opAD = []byte("pdb-keyop-1")

// groupKeys are what a key store derives from its group's secret.
type groupKeys struct {
	// index keys the author index of a store made for the group.
	index []byte
	seal  groupSeal
}

// groupSeal seals the ops; id names the secret it came from, so that a
// store is never given two.
type groupSeal struct {
	ops cipher.AEAD
	id  [16]byte
}

// deriveGroupKeys derives the author index key, the ops' AEAD and the
// secret's ID from a group's secret (HKDF-SHA256).
func deriveGroupKeys(secret []byte) (*groupKeys, error) {
	if len(secret) != GroupSecretSize {
		return nil, fmt.Errorf("group secret of %d bytes, not %d", len(secret), GroupSecretSize)
	}
	index, err := hkdf.Key(sha256.New, secret, nil, "progressdb key store: author index", 32)
	if err != nil {
		return nil, err
	}
	opKey, err := hkdf.Key(sha256.New, secret, nil, "progressdb key store: ops", 32)
	if err != nil {
		return nil, err
	}
	defer clear(opKey)
	id, err := hkdf.Key(sha256.New, secret, nil, "progressdb key store: group id", 16)
	if err != nil {
		return nil, err
	}
	g := &groupKeys{index: index}
	copy(g.seal.id[:], id)
	g.seal.ops, err = newAEAD(opKey)
	return g, err
}

// JoinGroup gives an open store its group's secret, as
// Options.GroupSecret gives it at Open: the home of a shard grown from
// one copy into a group opened its store before the group existed.
// Only the ops' seal comes from the secret: the author index keeps the
// key the store was made with, so that nothing is rewritten (an HMAC
// cannot be recomputed without the author, who is held only sealed in
// the data) and a crash at any point leaves the store as it was. The
// other replicas receive the store, its index key wrapped in it, with
// their first snapshot. A store given another secret before refuses.
func (ks *KeyStore) JoinGroup(secret []byte) error {
	g, err := deriveGroupKeys(secret)
	if err != nil {
		return fmt.Errorf("join the key store to its group: %w", err)
	}
	clear(g.index)
	if ks.ops.CompareAndSwap(nil, &g.seal) {
		return nil
	}
	if ks.ops.Load().id != g.seal.id {
		return fmt.Errorf("join the key store to its group: %w: it has another group's secret", ErrReplicated)
	}
	return nil
}

// Replicate makes every change of the key store an op handed to p; nil
// would make it local again, which a replica never does. The store must
// have been opened with Options.GroupSecret, or joined to its group.
func (ks *KeyStore) Replicate(p Proposer) error {
	if ks.ops.Load() == nil {
		return fmt.Errorf("replicate the key store: %w: opened without a group secret", ErrReplicated)
	}
	if p == nil {
		ks.repl.Store(nil)
		return nil
	}
	ks.repl.Store(&p)
	// A store that owes an erase (a crash after a destroy, a snapshot
	// of a leader's that owed one) is erased now: a follower runs no
	// retention that would.
	if erased, err := ks.Erased(ks.bgCtx); err == nil && !erased {
		ks.eraseSoon()
	}
	return nil
}

// Replicated reports whether the store's changes are ops of a group.
func (ks *KeyStore) Replicated() bool { return ks.repl.Load() != nil }

// ReplicateThrough makes ks, the key store of the replicated store st
// (its Sealer), a replica of st's group: its changes are proposed through
// st (a destroy as a purge, store.ProposeDestroy) and applied by st's
// commands on every replica (store.EffectKeys). Call it once st has its
// Proposer and before its group runs.
func (ks *KeyStore) ReplicateThrough(st *store.Store) error {
	if err := ks.Replicate(func(ctx context.Context, op []byte, destroys bool) error {
		if destroys {
			return st.ProposeDestroy(ctx, store.EffectKeys, op)
		}
		return st.ProposeEffect(ctx, store.EffectKeys, op)
	}); err != nil {
		return err
	}
	st.SetEffects(store.EffectKeys, ks.ApplyOp)
	return nil
}

// propose seals o and hands it to the group.
func (ks *KeyStore) propose(ctx context.Context, p *Proposer, o op, destroys bool) error {
	plain, err := json.Marshal(o)
	if err != nil {
		return err
	}
	defer clear(plain)
	return (*p)(ctx, ks.ops.Load().ops.Seal(nil, nil, plain, opAD), destroys)
}

// ApplyOp applies an op on this replica (the command's effect, before
// its batch), synced. It is idempotent: applied again after a crash, and
// followed again by the ops after it, it leaves the store as the first
// time did. A destroy starts the erase of the key store's files in the
// background (Erase).
func (ks *KeyStore) ApplyOp(ctx context.Context, sealed []byte) error {
	if err := ks.live(ctx); err != nil {
		return err
	}
	g := ks.ops.Load()
	if g == nil {
		return fmt.Errorf("key store op: %w: opened without a group secret", ErrReplicated)
	}
	plain, err := g.ops.Open(nil, nil, sealed, opAD)
	if err != nil {
		return fmt.Errorf("key store op: does not open with the group's secret: %w", err)
	}
	defer clear(plain)
	var o op
	if err := json.Unmarshal(plain, &o); err != nil {
		return fmt.Errorf("key store op: %w", err)
	}
	switch o.Op {
	case opCreate:
		return ks.applyCreate(o)
	case opDestroyThread:
		if err := checkThread(o.Thread); err != nil {
			return err
		}
		_, err = ks.destroyThread(o.Thread)
	case opDestroyKeys:
		err = ks.applyDestroyKeys(o.Keys)
	case opPutErasure:
		err = ks.putErasure(o.ID, o.Sealed)
	case opCompleteErasure:
		err = ks.completeErasure(o.ID)
	default:
		return fmt.Errorf("key store op: unknown op %q", o.Op)
	}
	if err != nil {
		return fmt.Errorf("key store op %s: %w", o.Op, err)
	}
	if o.Op != opPutErasure {
		ks.eraseSoon()
	}
	return nil
}

// applyCreate writes key o.Number of (o.Thread, o.MAC) unless the
// thread's counter is past it (applied already, or the author's key
// destroyed since) or the author has a key there.
func (ks *KeyStore) applyCreate(o op) error {
	if err := checkThread(o.Thread); err != nil {
		return err
	}
	if len(o.MAC) != 32 || o.Number == 0 || len(o.Wrapped) < 2 {
		return errors.New("key store op create: malformed")
	}
	var mac [32]byte
	copy(mac[:], o.MAC)
	mu := ks.stripe(o.Thread)
	mu.Lock()
	defer mu.Unlock()
	next, err := ks.next(o.Thread)
	if err != nil {
		return err
	}
	if _, has, err := ks.get(authorEntry(o.Thread, mac)); err != nil || has || next > o.Number {
		return err
	}
	b := ks.db.NewBatch()
	defer b.Close()
	ks.putKey(b, o.Thread, mac, o.Number, o.Wrapped)
	return b.Commit(pebble.Sync)
}

// applyDestroyKeys deletes keys with their author entries, synced.
func (ks *KeyStore) applyDestroyKeys(keys []opKey) error {
	for _, k := range keys {
		if err := checkThread(k.Thread); err != nil {
			return err
		}
		if len(k.MAC) != 32 {
			return errors.New("malformed key")
		}
		var mac [32]byte
		copy(mac[:], k.MAC)
		if _, err := ks.destroyKey(KeyRef{Thread: k.Thread, Number: k.Number}, mac); err != nil {
			return err
		}
	}
	return ks.db.LogData(nil, pebble.Sync)
}

// createReplicated makes the author's key in the thread through the
// group: the leader's DEK, wrapped, numbered from its counter. Creations
// of one thread are made one at a time (creating), so that two authors
// never propose one number; the apply decides, and the key is read back.
func (ks *KeyStore) createReplicated(ctx context.Context, p *Proposer, tid string, mac [32]byte) (uint32, cipher.AEAD, error) {
	cm := &ks.creating[stripeOf(tid, len(ks.creating))]
	cm.Lock()
	defer cm.Unlock()
	if num, a, ok, err := ks.lookup(ctx, tid, mac); err != nil || ok {
		return num, a, err
	}
	num, err := ks.next(tid)
	if err != nil {
		return 0, nil, err
	}
	dek := make([]byte, 32)
	defer clear(dek)
	if _, err := rand.Read(dek); err != nil {
		return 0, nil, err
	}
	wrapped, err := ks.wrap(ctx, ks.wrapGen(), dek)
	if err != nil {
		return 0, nil, err
	}
	if err := ks.propose(ctx, p, op{Op: opCreate, Thread: tid, MAC: mac[:], Number: num, Wrapped: wrapped}, false); err != nil {
		return 0, nil, err
	}
	got, a, ok, err := ks.lookup(ctx, tid, mac)
	switch {
	case err != nil:
		return 0, nil, err
	case !ok:
		return 0, nil, fmt.Errorf("key %d: %w (applied, and gone since)", num, ErrNoKey)
	}
	return got, a, nil
}

// lookup finds the author's key in the thread (read and cached), under
// the thread's stripe.
func (ks *KeyStore) lookup(ctx context.Context, tid string, mac [32]byte) (uint32, cipher.AEAD, bool, error) {
	mu := ks.stripe(tid)
	mu.Lock()
	defer mu.Unlock()
	if num, a, ok := ks.cache.byAuthor(tid, mac); ok {
		return num, a, true, nil
	}
	v, ok, err := ks.get(authorEntry(tid, mac))
	if err != nil || !ok {
		return 0, nil, false, err
	}
	num, valid := parseNum(v)
	if !valid {
		return 0, nil, false, fmt.Errorf("key of thread %s: malformed author entry", tid)
	}
	a, err := ks.fill(ctx, tid, num)
	return num, a, err == nil, err
}

// destroyThreadReplicated proposes the destroy of a thread's keys and
// returns how many the leader's store held.
func (ks *KeyStore) destroyThreadReplicated(ctx context.Context, p *Proposer, tid string) (int, error) {
	keys, some, err := ks.threadKeys(tid)
	if err != nil || !some {
		return 0, err
	}
	if err := ks.propose(ctx, p, op{Op: opDestroyThread, Thread: tid}, true); err != nil {
		return 0, fmt.Errorf("destroy keys of thread %s: %w", tid, err)
	}
	return keys, nil
}

// threadKeys counts a thread's keys, and says whether it holds anything.
func (ks *KeyStore) threadKeys(tid string) (int, bool, error) {
	prefix := threadPrefix(tid)
	keyPrefix := append(threadPrefix(tid), "k:"...)
	it, err := ks.db.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: threadEnd(tid)})
	if err != nil {
		return 0, false, err
	}
	defer it.Close()
	n, some := 0, false
	for valid := it.First(); valid; valid = it.Next() {
		some = true
		if bytes.HasPrefix(it.Key(), keyPrefix) {
			n++
		}
	}
	return n, some, it.Error()
}

// destroyKeysReplicated proposes the destroy of the keys refs that the
// leader's store holds, and returns those.
func (ks *KeyStore) destroyKeysReplicated(ctx context.Context, p *Proposer, refs []KeyRef) ([]KeyRef, error) {
	var there []KeyRef
	var keys []opKey
	for _, ref := range refs {
		v, ok, err := ks.get(keyEntry(ref.Thread, ref.Number))
		if err != nil {
			return nil, err
		}
		if !ok || len(v) < 32 {
			continue
		}
		there = append(there, ref)
		keys = append(keys, opKey{Thread: ref.Thread, Number: ref.Number, MAC: v[:32]})
	}
	if len(keys) == 0 {
		return nil, nil
	}
	if err := ks.propose(ctx, p, op{Op: opDestroyKeys, Keys: keys}, true); err != nil {
		return nil, err
	}
	return there, nil
}

// eraseSoon starts the erase of what was destroyed, in the background,
// unless one is waiting to start: a follower's key store has no
// retention run to erase it, and the leader's run finds it done.
func (ks *KeyStore) eraseSoon() {
	select {
	case ks.eraseKick <- struct{}{}:
	default:
		return
	}
	ks.bg.Go(func() {
		<-ks.eraseKick
		if _, err := ks.Erase(ks.bgCtx, erase.Options{}); err != nil && ks.bgCtx.Err() == nil && ks.logger != nil {
			ks.logger.Warn("keystore_erase_failed", slog.Any("err", err))
		}
	})
}
