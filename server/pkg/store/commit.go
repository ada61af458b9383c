package store

import (
	"context"
	"fmt"

	"github.com/cockroachdb/pebble/v2"
)

// The commit path. Every write of the store is a write value: a batch and
// what it means (its kind, whether it must be durable before it returns,
// the stripes its writer holds). apply is the one place a write is
// decided: it records an idempotency key's answer (idempotency.go),
// checks the fence (fence.go), applies the batch, makes the
// live-thread memory forget (livememo.go) and lets go of the writer's
// stripes, in that order. Nothing else in the package writes to Pebble.
// A write is built whole before apply sees it, so a replicated store
// proposes it to its group instead (command.go) and every replica applies
// the command through apply again (raftapply.go).

// writeKind says what a write means. It decides whether the fence is
// checked, whether the live-thread memory survives the write, and how the
// write is made durable.
type writeKind uint8

const (
	// writeUser is a thread or message change of the API. Its writer
	// holds the thread's stripes (write.held): they are let go once the
	// batch is applied, and apply returns once it is durable (group
	// commit, see applyGrouped). Counted in UserWrites.
	writeUser writeKind = iota + 1
	// writeAppend is a message append: a writeUser that changes no
	// thread's metadata, so the threads appends found live stay
	// remembered.
	writeAppend
	// writeReplay is a writeUser made as part of a replayed purge
	// (BeginReplayPurge): not synced on its own, since the purge's group
	// sync makes it durable before any record says purged, and a crash
	// before that only means the replay does it again. Not counted: it
	// does not compete with the purge it belongs to.
	writeReplay
	// writeState is the server's own bookkeeping: purge and stamp
	// markers, stamps, policies, audit heads, the identity, cursors, a
	// fence raise.
	writeState
	// writePurge is one delete batch of a purge.
	writePurge
	// writeIndex is one batch of an index rebuild.
	writeIndex
	// writeBulk is one batch of a bulk load.
	writeBulk
	// writeErase records whether purged content is left to erase
	// (eraseKey): owed before a purge, done after an erase.
	writeErase
	// writePause is the retention pause switch.
	writePause
	// writeLog writes no key: it makes earlier writes durable (Sync) or
	// probes Pebble's commit pipeline (Check).
	writeLog
	// writeRaft changes a replicated shard's Raft log and state (the
	// raft: keys, raftsave.go): entries, hard state, snapshot point,
	// applied index, in one batch.
	writeRaft
)

// unfenced says why a write of kind k is applied without the fence check,
// or "" when it is checked (every kind not named here).
func (k writeKind) unfenced() string {
	switch k {
	case writeBulk:
		return "a bulk load has no owner's context: it loads a database nothing else writes"
	case writeErase:
		return "it records the state of this folder's files, not the shard's content: owing an erase is always safe, " +
			"and an erase that finished made the files clean whoever asked for it"
	case writePause:
		return "an operator's switch, not a write of the shard's owner: it only stops deletes, " +
			"so it must land even on a database whose owner has moved on"
	case writeLog:
		return "it writes no key: it only makes earlier, already admitted writes durable"
	case writeRaft:
		return "a replica stores the entries its group's leader sent, whoever owns the shard: " +
			"the Raft log's order, not the ownership fence, decides which writes exist"
	}
	return ""
}

// grouped reports whether a write of kind k is applied under its writer's
// stripes and acknowledged once durable (applyGrouped).
func (k writeKind) grouped() bool { return k == writeUser || k == writeAppend }

// keepsMemo reports whether a write of kind k leaves every thread's
// liveness as it was, so the live-thread memory may survive it.
func (k writeKind) keepsMemo() bool { return k == writeAppend || k == writeLog || k == writeRaft }

// write is one batch and what it means.
type write struct {
	kind  writeKind
	batch *pebble.Batch
	// sync: durable before apply returns. Grouped kinds ignore it: they
	// are always durable before they return.
	sync bool
	// held is the writer's stripes (grouped kinds), let go as soon as the
	// batch is applied, after the live-thread memory forgot.
	held *held
	// under is the stripes a writer took for a read-check-write of
	// several writes (Store.hold, released by the writer): it is not
	// released with this write, but a replicated store proposes the
	// write in their term, and if the outcome is still unknown when the
	// writer gives up they go with the write (propose), so that the
	// next writer of the thread sees it.
	under *held
	// effect is a replicated write's Command.Effect (ProposeEffect), of
	// effectKind.
	effect     []byte
	effectKind EffectKind
	// answer is what the write answers: when the request carries an
	// idempotency key (WithIdempotent), the key's records ride the batch.
	answer answer
	// applied: a command of the group's log (ApplyCommand). The log's
	// order decided it, so it is not fenced; the log holds it, so it is
	// committed without a sync of its own.
	applied bool
}

// apply decides a write: it checks the fence of ctx's token (unless the
// kind says why not), applies the batch, makes the live-thread memory
// forget (unless the kind keeps it) and releases the writer's stripes. It
// takes the batch: the caller must not use it again. A replicated store
// proposes the write instead (propose) and applies it when its group
// commits it (w.applied, ApplyCommand).
func (s *Store) apply(ctx context.Context, w write) error {
	if w.applied {
		return s.applyCommitted(w)
	}
	if w.kind == writeUser && replayWrite(ctx) {
		w.kind = writeReplay
	}
	if w.answer.thread != nil || w.answer.mid != "" || w.answer.inline {
		if p := idempotentFrom(ctx); p != nil {
			s.recordAnswer(w.batch, p, &w.answer)
		}
	}
	if r := s.repl.Load(); r != nil && w.kind.proposed() {
		if e, ok := EpochOf(ctx); ok {
			// An owner's write evaluated before the shard became a
			// group: its ownership ended with the switch.
			s.settle(w)
			_ = w.batch.Close()
			return fmt.Errorf("%w: write with epoch %d on a replicated store", ErrFenced, e)
		}
		// The Raft term replaces the fencing epoch (design §9).
		return s.propose(ctx, r, w)
	}
	release := func(bool) {}
	if w.kind.unfenced() == "" {
		r, err := s.admit(ctx, w.batch)
		if err != nil {
			s.settle(w)
			_ = w.batch.Close()
			return err
		}
		release = r
	}
	if w.kind.grouped() {
		return s.applyGrouped(w, release)
	}
	opts := pebble.NoSync
	if w.sync {
		opts = pebble.Sync
	}
	err := w.batch.Commit(opts)
	release(err == nil)
	s.settle(w)
	_ = w.batch.Close()
	if err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	return nil
}

// applyGrouped applies a user write while its writer still holds the
// thread's stripes (so the next read-check-write of the thread sees it),
// lets go of them, then waits until the batch is durable. Writers queued
// on the stripe apply their batches meanwhile and share the log's next
// fsync (group commit). A batch is visible before it is durable (that is
// so in Pebble even for a plain synced commit), but the log is synced in
// order, so no later write can survive a crash without the writes it
// read; the caller answers only after this returns.
func (s *Store) applyGrouped(w write, release func(applied bool)) error {
	// Counted before its record can be in the log, so that the sync that
	// carries it never begins before it is counted (syncBatches).
	s.batches.written()
	if err := s.db.ApplyNoSyncWait(w.batch, pebble.Sync); err != nil {
		// The batch may still sit in Pebble's commit queue: it is not
		// closed (returned to the pool), only dropped.
		release(false)
		s.settle(w)
		return fmt.Errorf("commit: %w", err)
	}
	release(true)
	s.settle(w)
	defer w.batch.Close()
	if err := w.batch.SyncWait(); err != nil {
		// The batch is applied (readers may have seen it) but its log
		// record is not durable, and Pebble's log stays failed: answering
		// an error and going on would serve writes a restart loses and
		// wedge every later commit. Stop instead (fail-stop).
		s.fatal.stop(fmt.Sprintf("commit: log sync failed: %v", err))
		return fmt.Errorf("commit: %w", err)
	}
	s.userWrites.Add(1)
	return nil
}

// applyCommitted applies a command of the group's log. It is not synced:
// the log's entry is on a quorum's disks, and a crash that loses this
// batch loses the applied index in it too, so the entry is applied again.
func (s *Store) applyCommitted(w write) error {
	err := w.batch.Commit(pebble.NoSync)
	if err == nil && w.kind.grouped() {
		s.userWrites.Add(1)
	}
	s.settle(w)
	_ = w.batch.Close()
	if err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	return nil
}

// settle runs once a write is applied or abandoned (a failed apply may
// still be applied): the live-thread memory forgets before the writer
// lets go of its stripes, so an append holding a stripe never trusts a
// liveness another writer just changed (liveMemo).
func (s *Store) settle(w write) {
	if !w.kind.keepsMemo() {
		s.threads.forget()
	}
	if w.held != nil {
		w.held.release()
	}
}

// set writes one key as server state.
func (s *Store) set(ctx context.Context, key, value []byte, sync bool) error {
	return s.setUnder(ctx, nil, key, value, sync)
}

// setUnder is set by a writer holding h (write.under).
func (s *Store) setUnder(ctx context.Context, h *held, key, value []byte, sync bool) error {
	b := s.db.NewBatch()
	_ = b.Set(key, value, nil)
	return s.apply(ctx, write{kind: writeState, batch: b, sync: sync, under: h})
}

// logWrite applies a batch that writes no key (writeLog).
func (s *Store) logWrite(ctx context.Context, sync bool) error {
	b := s.db.NewBatch()
	_ = b.LogData(nil, nil)
	return s.apply(ctx, write{kind: writeLog, batch: b, sync: sync})
}
