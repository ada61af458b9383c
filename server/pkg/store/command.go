package store

// Writes as Raft commands (docs/replication-design.md §5). A replicated
// store does not commit the batch a write built: apply hands it to its
// group as a Command and waits until this replica applied it
// (ApplyCommand, raftapply.go). Evaluation stays where it was: the reads,
// the clock and the IDs of a write happen on the leader, under the
// thread's stripes, which stay held until the command is applied here or
// known to fail, so the next read-check-write of the thread sees it.

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
)

// Errors of a replicated store's writes. Each means the write should be
// sent again, to the group's leader (503 with Retry-After).
var (
	// ErrNotLeader refuses a write on a replica that does not lead its
	// group, or leads it but has not yet applied every entry of earlier
	// terms. Nothing was proposed.
	ErrNotLeader = errors.New("not the leader of the shard's replica group")
	// ErrProposalDropped: the write was proposed and will never be
	// applied (raft refused it, or it reached the log in another term
	// than the one it was evaluated in).
	ErrProposalDropped = errors.New("proposal dropped")
	// ErrAmbiguous: the write was proposed, and this replica stopped
	// waiting for it (its context ended, it lost the leadership, it
	// stopped) before it knew the outcome: it may yet be applied, once.
	ErrAmbiguous = errors.New("outcome of the proposal unknown")
	// ErrNotReplicated: what was asked is for a replicated store only.
	ErrNotReplicated = errors.New("the store is not replicated")
)

// Command is a write of a replicated store as its group's log carries it:
// the batch the leader built and what it means. Every replica applies it
// from these fields alone.
type Command struct {
	// ID names the command; a replica applies an ID once (its dedupe
	// key), however often the log holds it.
	ID uint64
	// Term is the leader's term the command was evaluated in: it is
	// applied only from an entry of that term (ApplyCommand).
	Term uint64
	// Kind is the store's write kind (opaque outside the store).
	Kind uint8
	// Repr is the batch (pebble.Batch.Repr).
	Repr []byte
	// Effect is a change of the replica's folder outside its database
	// that the command makes before its batch (a retention run's audit
	// lines, a change of the shard's key store): every replica applies
	// it with its store's Effects of the kind EffectKind.
	Effect     []byte
	EffectKind EffectKind
}

// EffectKind says what a command's effect changes, and so which of the
// replica's Effects applies it: one channel carries them all.
type EffectKind uint8

// The kinds of effects.
const (
	// EffectTrail is a step of a retention run's audit file.
	EffectTrail EffectKind = 1
	// EffectKeys is a change of the shard's key store.
	EffectKeys EffectKind = 2
	// EffectBlobs is a change of the shard's file:// attachments folder
	// (an upload's bytes, their move into place, a deletion).
	EffectBlobs EffectKind = 3

	effectKinds = 4
)

// Versions of an encoded command's layout: 2 adds the effect (always
// the audit trail's), 3 its kind; an effect's version is written only
// for a command that has one.
const (
	commandVersion           = 1
	commandVersionEffect     = 2
	commandVersionEffectKind = 3
)

// commandHeader is the version, the kind, the ID and the term.
const commandHeader = 1 + 1 + 8 + 8

// Encode returns the command as its log entry carries it.
func (c Command) Encode() []byte {
	b := make([]byte, commandHeader, commandHeader+binary.MaxVarintLen64+len(c.Effect)+len(c.Repr))
	b[0], b[1] = commandVersion, c.Kind
	binary.BigEndian.PutUint64(b[2:], c.ID)
	binary.BigEndian.PutUint64(b[10:], c.Term)
	if len(c.Effect) > 0 {
		b[0] = commandVersionEffectKind
		b = append(b, byte(c.EffectKind))
		b = append(binary.AppendUvarint(b, uint64(len(c.Effect))), c.Effect...)
	}
	return append(b, c.Repr...)
}

// DecodeCommand reads an encoded command; Repr shares data.
func DecodeCommand(data []byte) (Command, error) {
	if len(data) < commandHeader {
		return Command{}, fmt.Errorf("command: %w: %d bytes", ErrMalformed, len(data))
	}
	c := Command{
		Kind: data[1],
		ID:   binary.BigEndian.Uint64(data[2:]),
		Term: binary.BigEndian.Uint64(data[10:]),
		Repr: data[commandHeader:],
	}
	switch data[0] {
	case commandVersion:
	case commandVersionEffect, commandVersionEffectKind:
		c.EffectKind = EffectTrail
		if data[0] == commandVersionEffectKind {
			if len(c.Repr) == 0 || c.Repr[0] == 0 || c.Repr[0] >= effectKinds {
				return Command{}, fmt.Errorf("command: %w: effect kind", ErrMalformed)
			}
			c.EffectKind, c.Repr = EffectKind(c.Repr[0]), c.Repr[1:]
		}
		n, w := binary.Uvarint(c.Repr)
		if w <= 0 || n == 0 || n > uint64(len(c.Repr)-w) {
			return Command{}, fmt.Errorf("command: %w: effect of %d bytes", ErrMalformed, n)
		}
		c.Effect, c.Repr = c.Repr[w:w+int(n)], c.Repr[w+int(n):]
	default:
		return Command{}, fmt.Errorf("command: %w: version %d", ErrMalformed, data[0])
	}
	return c, nil
}

// Effects applies a command's effect (Command.Effect) on this replica,
// before the command's batch. It must be idempotent: a replica that
// crashed after the effect and before the batch applies the command
// again. An error stops the replica's group (it neither skips the
// command nor goes on).
type Effects func(ctx context.Context, effect []byte) error

// SetEffects sets what applies the commands' effects of kind on this
// replica. Call it before the group runs: a command with an effect whose
// kind has no Effects stops the group.
func (s *Store) SetEffects(kind EffectKind, fx Effects) {
	if kind == 0 || kind >= effectKinds {
		panic(fmt.Sprintf("store: effect kind %d", kind))
	}
	if fx == nil {
		s.effects[kind].Store(nil)
		return
	}
	s.effects[kind].Store(&fx)
}

// ProposeEffect proposes a command that makes effect (of kind) on every
// replica (its store's Effects) and writes nothing in the database but
// its applied index, and returns once this replica applied it. Only a
// replicated store has effects: another answers ErrNotReplicated.
func (s *Store) ProposeEffect(ctx context.Context, kind EffectKind, effect []byte) error {
	return s.proposeEffect(ctx, writeState, kind, effect)
}

// ProposeDestroy is ProposeEffect for an effect that destroys what
// earlier entries of the log hold (a data key, a sealed author): the
// command is a purge, so that every replica drops its log up to it and
// erases the dropped entries from its files, as after a purge of
// content (rafterase.go).
func (s *Store) ProposeDestroy(ctx context.Context, kind EffectKind, effect []byte) error {
	return s.proposeEffect(ctx, writePurge, kind, effect)
}

func (s *Store) proposeEffect(ctx context.Context, wk writeKind, kind EffectKind, effect []byte) error {
	if !s.Replicated() {
		return ErrNotReplicated
	}
	if len(effect) == 0 || kind == 0 || kind >= effectKinds {
		return fmt.Errorf("%w: empty effect, or of kind %d", ErrInvalidArgument, kind)
	}
	b := s.db.NewBatch()
	_ = b.LogData(nil, nil) // a batch of no key
	return s.apply(ctx, write{kind: wk, batch: b, effect: effect, effectKind: kind})
}

// Proposer is a replicated store's Raft group, as the store sees it
// (package replica implements it).
type Proposer interface {
	// Lease is the term in which this replica leads its group and has
	// applied every entry of earlier terms, so that its state is the
	// group's: a write evaluated now is proposed in that term. 0: this
	// replica must not evaluate writes (ErrNotLeader).
	Lease() uint64
	// Propose hands cmd to the group. The channel receives its outcome
	// once: nil when this replica applied it (ApplyCommand); an error
	// wrapping ErrNotLeader or ErrProposalDropped when it will never be
	// applied; ErrAmbiguous when this replica stopped leading or stopped
	// with cmd in flight. Every proposal gets an outcome.
	Propose(cmd Command) <-chan error
}

// replication is a store's Proposer, held by pointer so that the store
// reads it with one atomic load.
type replication struct{ p Proposer }

// Replicate makes the store's writes proposals to p (nil: back to
// committing them here). Writes that only concern this folder are still
// committed here: the Raft log itself, the erase state and log syncs.
// Call it once the group runs, before the store serves.
func (s *Store) Replicate(p Proposer) {
	if p == nil {
		s.repl.Store(nil)
		return
	}
	s.repl.Store(&replication{p: p})
}

// Replicated reports whether the store's writes are proposals.
func (s *Store) Replicated() bool { return s.repl.Load() != nil }

// proposed reports whether a write of kind k is a command of a replicated
// store: every change of the shard's content and state, not the writes
// that only concern this folder.
func (k writeKind) proposed() bool {
	switch k {
	case writeUser, writeAppend, writeReplay, writeState, writePurge, writeIndex, writeBulk, writePause:
		return true
	}
	return false // writeLog, writeRaft, writeErase: this folder's own
}

// propose hands w to the group instead of committing it, in the term its
// stripes were taken in (or the current lease for a write that holds
// none), and waits for the outcome. The stripes stay held until the
// outcome is known, even when ctx ends first: a write still in flight
// must be seen by the next one of its thread.
func (s *Store) propose(ctx context.Context, r *replication, w write) error {
	term := r.p.Lease()
	var refuse error
	switch {
	case ctx.Err() != nil:
		// Nothing proposed: a writer that gave up leaves nothing in
		// flight.
		refuse = ctx.Err()
	case w.held != nil:
		term = w.held.term
	case w.under != nil && !w.under.locked:
		// An earlier write under them was left in flight and took them.
		refuse = fmt.Errorf("%w: an earlier write under the same stripes is in flight", ErrAmbiguous)
	case w.under != nil:
		term = w.under.term
	}
	if refuse == nil && term == 0 {
		refuse = ErrNotLeader
	}
	if refuse != nil {
		s.settle(w)
		_ = w.batch.Close()
		return refuse
	}
	cmd := Command{ID: commandID(), Term: term, Kind: uint8(w.kind), Repr: bytes.Clone(w.batch.Repr()), Effect: w.effect,
		EffectKind: w.effectKind}
	_ = w.batch.Close()
	done := r.p.Propose(cmd)
	select {
	case err := <-done:
		s.settle(w)
		return err
	case <-ctx.Done():
		switch {
		case w.held != nil:
			w.held = w.held.handOver()
		case w.under != nil:
			w.held = w.under.handOver()
		}
		go func() {
			<-done
			s.settle(w)
		}()
		return fmt.Errorf("%w: %w", ErrAmbiguous, ctx.Err())
	}
}

// commandID is a random command ID, never 0: a replica group's own log
// entries (its replicas' erase reports) carry 0, which no command may.
func commandID() uint64 {
	for {
		if id := rand.Uint64(); id != 0 {
			return id
		}
	}
}
