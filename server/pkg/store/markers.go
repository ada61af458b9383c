package store

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/cockroachdb/pebble/v2"
)

// Purge and stamp markers are pending audit records: written with the
// change they record, read back by the next run, cleared once the audit
// file holding their records is synced. One pair of helpers serves both.

// marker is a pending audit record stored under a key of its kind and ID.
type marker interface {
	PurgeMarker | StampMarker
	item() (ItemKind, string)
}

func (m PurgeMarker) item() (ItemKind, string) { return m.Kind, m.ID }
func (m StampMarker) item() (ItemKind, string) { return m.Kind, m.ID }

// pendingMarkers lists the markers under ns whose key is key(kind, id).
// Markers that cannot be decoded, or that sit under another key, are left
// out: they describe nothing a run could record.
func pendingMarkers[M marker](ctx context.Context, s *Store, what, ns string, key func(ItemKind, string) []byte) ([]M, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	it, err := s.db.NewIter(&pebble.IterOptions{
		LowerBound: []byte(ns),
		UpperBound: upperBound([]byte(ns)),
	})
	if err != nil {
		return nil, fmt.Errorf("pending %s: %w", what, err)
	}
	defer it.Close()
	var out []M
	for valid := it.First(); valid; valid = it.Next() {
		value, err := it.ValueAndErr()
		if err != nil {
			return nil, fmt.Errorf("pending %s: %w", what, err)
		}
		var m M
		if json.Unmarshal(value, &m) != nil {
			continue
		}
		kind, id := m.item()
		if checkKind(kind) != nil || string(it.Key()) != string(key(kind, id)) {
			continue
		}
		out = append(out, m)
	}
	if err := it.Error(); err != nil {
		return nil, fmt.Errorf("pending %s: %w", what, err)
	}
	return out, nil
}

// clearMarkers removes markers (synced) once their audit records are durable.
func clearMarkers[M marker](ctx context.Context, s *Store, what string, key func(ItemKind, string) []byte, ms []M) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if len(ms) == 0 {
		return nil
	}
	b := s.db.NewBatch()
	for _, m := range ms {
		kind, id := m.item()
		if err := checkKind(kind); err != nil {
			b.Close()
			return err
		}
		if err := ValidateID(id); err != nil {
			b.Close()
			return err
		}
		_ = b.Delete(key(kind, id), nil)
	}
	if err := s.apply(ctx, write{kind: writeState, batch: b, sync: true}); err != nil {
		return fmt.Errorf("clear %s: %w", what, err)
	}
	return nil
}
