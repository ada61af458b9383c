package store

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/hex"
	"fmt"

	"github.com/progressdb/progressdb/server/pkg/erase"
)

// raftDedupeNS + <term, 20 digits> + ":" + <command ID, 16 hex digits>:
// the index the command was applied at. A command is applied only in an
// entry of the term it was evaluated in, so once a replica applies an
// entry of a later term no key of an earlier one can match again: they
// are dropped then (one range tombstone), which bounds the keys to the
// commands of the current term until log truncation drops them with the
// entries (design §11).
const raftDedupeNS = "raft:dedupe:"

func raftDedupeTerm(term uint64) []byte {
	return appendPadded(append(make([]byte, 0, len(raftDedupeNS)+padWidth+17), raftDedupeNS...), int64(term))
}

func raftDedupeKey(term, id uint64) []byte {
	return hex.AppendEncode(append(raftDedupeTerm(term), ':'), binary.BigEndian.AppendUint64(nil, id))
}

// ApplyCommand applies the command data (Command.Encode) committed at
// index, in an entry of term, on this replica: one batch holding the
// command's batch, its dedupe key and the applied index, through apply
// with the command's kind, so that the store's memory follows it as it
// follows a write made here, and a crash leaves all of it or none. A
// command already applied is not applied again; one evaluated in another
// term is not applied at all (a leader's evaluation holds only under its
// own lease): ApplyCommand records the index and returns an error
// wrapping ErrProposalDropped for its proposer. Any other error means
// the command could not be applied, and the replica must not go on.
func (s *Store) ApplyCommand(ctx context.Context, index, term uint64, data []byte) error {
	l, err := s.RaftLog(ctx)
	if err != nil {
		return err
	}
	cmd, err := DecodeCommand(data)
	if err != nil {
		return fmt.Errorf("entry %d: %w", index, err)
	}
	kind := writeKind(cmd.Kind)
	if !kind.proposed() {
		return fmt.Errorf("entry %d: command: %w: write kind %d", index, ErrMalformed, cmd.Kind)
	}
	dedupe := raftDedupeKey(cmd.Term, cmd.ID)
	dup, err := s.has(dedupe)
	if err != nil {
		return err
	}
	b := s.db.NewBatch()
	var outcome error
	var purged []erase.Span
	switch {
	case dup:
		kind = writeRaft // only the applied index
	case cmd.Term != term:
		kind = writeRaft
		outcome = fmt.Errorf("%w: evaluated in term %d, committed in term %d", ErrProposalDropped, cmd.Term, term)
	default:
		if err := b.SetRepr(bytes.Clone(cmd.Repr)); err != nil {
			_ = b.Close()
			return fmt.Errorf("entry %d: command: %w: %w", index, ErrMalformed, err)
		}
		if len(cmd.Effect) > 0 {
			// Before the batch, so that its applied index is saved only
			// once the effect is made (a crash between makes it again).
			if err := s.applyEffect(ctx, cmd.EffectKind, cmd.Effect); err != nil {
				_ = b.Close()
				return fmt.Errorf("entry %d: %w", index, err)
			}
		}
		if kind == writePurge {
			// This replica's files now hold purged content: the erase
			// is owed here (sys:erased) until the group erased it
			// (EraseApplied), in the purge's own batch.
			if purged, err = purgedSpans(b); err != nil {
				_ = b.Close()
				return fmt.Errorf("entry %d: command: %w", index, err)
			}
			if len(cmd.Effect) > 0 {
				// A destroy (ProposeDestroy): what it destroyed is in
				// the log's entries up to it, which the erase covers.
				purged = append(purged, erase.Span{Start: raftLogKey(0), End: raftLogKey(index + 1)})
			}
			_ = b.Delete([]byte(eraseKey), nil)
		}
		_ = b.Set(dedupe, appendPadded(nil, int64(index)), nil)
	}
	if term > l.dedupeFloor() {
		_ = b.DeleteRange([]byte(raftDedupeNS), raftDedupeTerm(term), nil)
	}
	_ = b.Set([]byte(raftAppliedKey), appendPadded(nil, int64(index)), nil)
	if kind == writePurge {
		l.purgeMu.Lock()
		defer l.purgeMu.Unlock()
	}
	if err := s.apply(ctx, write{kind: kind, batch: b, applied: true}); err != nil {
		return fmt.Errorf("apply entry %d: %w", index, err)
	}
	l.noteApplied(index, term)
	if kind == writePurge {
		l.notePurge(index, purged)
	}
	return outcome
}

// dedupeFloor is the term below which this process dropped the dedupe
// keys (0: none yet).
func (l *RaftLog) dedupeFloor() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.dedupe
}

// noteApplied records a command's apply, committed with its index.
func (l *RaftLog) noteApplied(index, term uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.applied = max(l.applied, index)
	l.dedupe = max(l.dedupe, term)
}

// applyEffect makes a command's effect with the store's Effects of its
// kind.
func (s *Store) applyEffect(ctx context.Context, kind EffectKind, effect []byte) error {
	fx := s.effects[kind].Load()
	if fx == nil {
		return fmt.Errorf("command effect: %w: no effects of kind %d are set on this replica", ErrNotReplicated, kind)
	}
	if err := (*fx)(ctx, effect); err != nil {
		return fmt.Errorf("command effect: %w", err)
	}
	return nil
}
