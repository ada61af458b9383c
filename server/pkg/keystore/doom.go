package keystore

import (
	"bytes"
	"context"
	"fmt"
	"strconv"

	"github.com/cockroachdb/pebble/v2"

	"github.com/progressdb/progressdb/server/pkg/erase"
)

// A thread purge destroys its keys in two steps (spec §12, format 3):
//
//	d:<tid>   the thread's keys are destroyed: nothing reads them any more
//
// DestroyThread writes the marker, synced, and deletes the author-index
// entries; the thread's own entries (k:<tid>:…) are deleted by the erase
// step, one purge's threads after another, each flushed into tables of
// its own before its span is compacted (erase.Options.Prepare). Deletes of
// far-apart threads flushed together would make tables spanning every
// thread between them, and compacting those rewrites the whole store: the
// erase would cost what the store holds rather than what it destroys. The
// markers are durable, so a restart finishes the erase of exactly those
// threads; the erase deletes a marker once its span is erased.
const doomNS = "d:"

func doomKey(tid string) []byte { return []byte(doomNS + tid) }

// doomGap: neighbouring doomed threads with less than this much data
// between them are deleted and compacted together. The key store's tables
// are tableSize, so this is a few tables: one flush and compaction per
// thread would cost more than rewriting them.
const doomGap = 4 * tableSize

// tableSize is the target size of the key store's tables: small, so that
// erasing a thread rewrites little beside it.
const tableSize = 64 << 10

// doomed reports whether tid's keys are destroyed and not yet erased.
func (ks *KeyStore) doomed(tid string) (bool, error) {
	_, ok, err := ks.get(doomKey(tid))
	return ok, err
}

// doom commits a thread destroy's batch with its marker, raising the
// store's format first: a binary of an earlier format would read a doomed
// thread's keys as live.
func (ks *KeyStore) doom(b *pebble.Batch, tid string) error {
	// Bind's lock order: bindMu, then mu.
	ks.bindMu.Lock()
	defer ks.bindMu.Unlock()
	ks.mu.Lock()
	defer ks.mu.Unlock()
	// A token of its own: an erase clears only the markers it erased, not
	// one a destroy wrote again meanwhile (the thread created again and
	// purged again).
	_ = b.Set(doomKey(tid), []byte(newID()), nil)
	raise := ks.format < FormatNewest
	id := ks.id
	if raise {
		id = ks.formatBatch(b)
	}
	if err := b.Commit(pebble.Sync); err != nil {
		return err
	}
	if raise {
		ks.format, ks.id = FormatNewest, id
	}
	ks.destroys++
	return nil
}

// formatBatch records FormatNewest, with an identity when the store (of
// format 1) has none, and returns the store's identity; the caller holds
// bindMu and mu.
func (ks *KeyStore) formatBatch(b *pebble.Batch) string {
	_ = b.Set([]byte(formatKey), []byte(strconv.Itoa(FormatNewest)), nil)
	if ks.id != "" {
		return ks.id
	}
	id := newID()
	_ = b.Set([]byte(idKey), []byte(id), nil)
	_ = b.Set([]byte(databaseKey), []byte(ks.database), nil)
	return id
}

// undoom makes a doomed thread new again, for a thread created again
// under its ID before the erase: its old entries are deleted at once
// (synced), and their span is owed as a key destroyed one by one is, so
// that the new keys are not erased with the old ones. The caller holds
// tid's stripe.
func (ks *KeyStore) undoom(tid string) error {
	gone, err := ks.doomed(tid)
	if err != nil || !gone {
		return err
	}
	it, err := ks.db.NewIter(&pebble.IterOptions{LowerBound: threadPrefix(tid), UpperBound: threadEnd(tid)})
	if err != nil {
		return err
	}
	b := ks.db.NewBatch()
	defer b.Close()
	for valid := it.First(); valid; valid = it.Next() {
		_ = b.Delete(it.Key(), nil)
	}
	if err := it.Close(); err != nil {
		return err
	}
	_ = b.Delete(doomKey(tid), nil)
	return ks.commitDestroy(b, []erase.Span{{Start: threadPrefix(tid), End: threadEnd(tid)}}, pebble.Sync)
}

// doom is a doomed thread and its marker's token.
type doom struct{ tid, token string }

// doomedThreads lists the doomed threads, in key order.
func (ks *KeyStore) doomedThreads() ([]doom, error) {
	it, err := ks.db.NewIter(prefixRange([]byte(doomNS)))
	if err != nil {
		return nil, err
	}
	defer it.Close()
	var ds []doom
	for valid := it.First(); valid; valid = it.Next() {
		ds = append(ds, doom{tid: string(it.Key()[len(doomNS):]), token: string(it.Value())})
	}
	if err := it.Error(); err != nil {
		return nil, fmt.Errorf("doomed threads: %w", err)
	}
	return ds, nil
}

// stillDoomed reports whether d's marker is still the one listed; the
// caller holds d.tid's stripe.
func (ks *KeyStore) stillDoomed(d doom) (bool, error) {
	v, ok, err := ks.get(doomKey(d.tid))
	return ok && string(v) == d.token, err
}

// doomGroup is doomed threads erased together: their span, the union of
// theirs.
type doomGroup struct {
	span    erase.Span
	threads []doom
}

// groupDoomed gathers doomed threads whose spans lie close together.
func (ks *KeyStore) groupDoomed(ds []doom) []doomGroup {
	var spans []erase.Span
	for _, d := range ds {
		spans = append(spans, erase.Span{Start: threadPrefix(d.tid), End: threadEnd(d.tid)})
	}
	merged := erase.Merge(ks.db, spans, doomGap)
	groups := make([]doomGroup, len(merged))
	for i, m := range merged {
		groups[i].span = m
	}
	g := 0
	for i, d := range ds {
		for bytes.Compare(spans[i].Start, groups[g].span.End) >= 0 {
			g++
		}
		groups[g].threads = append(groups[g].threads, d)
	}
	return groups
}

// deleteDoomed deletes every entry of the threads still doomed (not
// their markers), unsynced: the markers keep the debt until the erase is
// done. It reports whether it deleted anything.
func (ks *KeyStore) deleteDoomed(ds []doom) (bool, error) {
	wrote := false
	for _, d := range ds {
		w, err := ks.deleteDoomedOne(d)
		if err != nil {
			return wrote, fmt.Errorf("delete keys of thread %s: %w", d.tid, err)
		}
		wrote = wrote || w
	}
	return wrote, nil
}

// deleteDoomedOne deletes a doomed thread's entries under its stripe: a
// thread created again meanwhile (undoom) keeps its new keys.
func (ks *KeyStore) deleteDoomedOne(d doom) (bool, error) {
	mu := ks.stripe(d.tid)
	mu.Lock()
	defer mu.Unlock()
	if ok, err := ks.stillDoomed(d); err != nil || !ok {
		return false, err
	}
	it, err := ks.db.NewIter(&pebble.IterOptions{LowerBound: threadPrefix(d.tid), UpperBound: threadEnd(d.tid)})
	if err != nil {
		return false, err
	}
	b := ks.db.NewBatch()
	defer b.Close()
	for valid := it.First(); valid; valid = it.Next() {
		_ = b.Delete(it.Key(), nil)
	}
	if err := it.Close(); err != nil {
		return false, err
	}
	if b.Empty() {
		return false, nil
	}
	return true, b.Commit(pebble.NoSync)
}

// clearDoomed deletes the markers of erased threads, synced, each only if
// it is still the one the erase listed.
func (ks *KeyStore) clearDoomed(ds []doom) error {
	if len(ds) == 0 {
		return nil
	}
	for _, d := range ds {
		if err := ks.clearDoomedOne(d); err != nil {
			return err
		}
	}
	return ks.db.LogData(nil, pebble.Sync)
}

func (ks *KeyStore) clearDoomedOne(d doom) error {
	mu := ks.stripe(d.tid)
	mu.Lock()
	defer mu.Unlock()
	if ok, err := ks.stillDoomed(d); err != nil || !ok {
		return err
	}
	return ks.db.Delete(doomKey(d.tid), pebble.NoSync)
}

// Compact compacts the whole store into its bottom tables, as those of a
// store that has run for a while are: benchmarks and tests settle a
// freshly filled store with it. It is no erase (Erase is).
func (ks *KeyStore) Compact(ctx context.Context) error {
	if err := ks.live(ctx); err != nil {
		return err
	}
	if err := ks.db.Flush(); err != nil {
		return fmt.Errorf("compact key store: %w", err)
	}
	if err := ks.db.Compact(ctx, []byte{0}, []byte{0xff}, false); err != nil {
		return fmt.Errorf("compact key store: %w", err)
	}
	return nil
}
