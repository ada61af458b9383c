package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/cockroachdb/pebble/v2"
)

// A thread's retention override (spec §3.1) is stored under the thread's
// own keys, thread:<tid>:retention, so a purge of the thread takes it
// along. idx:pol:<tid> lists the threads that have one, so that a run
// reads the overrides in O(overrides), never every thread.
const (
	policySuffix  = "retention"
	policyIndexNS = "idx:pol:"
)

func policyKey(tid string) []byte {
	return append(appendThreadPrefix(nil, tid), policySuffix...)
}

func policyIndexKey(tid string) []byte { return append([]byte(policyIndexNS), tid...) }

// RetentionOverride is one thread's retention policy override. A nil field
// inherits the global value; MaxAge 0 and MaxMessages 0 turn those
// policies off for the thread. Values are checked by the retention
// package, which knows the minimum period; the store refuses only
// negative ones.
type RetentionOverride struct {
	Period        *time.Duration `json:"period,omitempty"`
	MessagePeriod *time.Duration `json:"message_period,omitempty"`
	MaxAge        *time.Duration `json:"max_age,omitempty"`
	MaxMessages   *int           `json:"max_messages,omitempty"`
}

// IsZero reports whether the override sets nothing.
func (o RetentionOverride) IsZero() bool {
	return o.Period == nil && o.MessagePeriod == nil && o.MaxAge == nil && o.MaxMessages == nil
}

func (o RetentionOverride) check() error {
	for _, d := range []*time.Duration{o.Period, o.MessagePeriod, o.MaxAge} {
		if d != nil && *d < 0 {
			return fmt.Errorf("%w: negative duration %s in retention override", ErrInvalidArgument, *d)
		}
	}
	if o.MaxMessages != nil && *o.MaxMessages < 0 {
		return fmt.Errorf("%w: negative max_messages %d in retention override", ErrInvalidArgument, *o.MaxMessages)
	}
	return nil
}

// RetentionOverride returns the override of thread tid and whether it has
// one. ErrNotFound when the thread does not exist.
func (s *Store) RetentionOverride(ctx context.Context, tid string) (RetentionOverride, bool, error) {
	if err := ctx.Err(); err != nil {
		return RetentionOverride{}, false, err
	}
	if err := ValidateID(tid); err != nil {
		return RetentionOverride{}, false, err
	}
	if _, err := s.readThread(tid); err != nil && !errors.Is(err, ErrMalformed) {
		return RetentionOverride{}, false, err
	}
	return s.readOverride(tid)
}

func (s *Store) readOverride(tid string) (RetentionOverride, bool, error) {
	v, err := s.get(policyKey(tid))
	if errors.Is(err, ErrNotFound) {
		return RetentionOverride{}, false, nil
	}
	if err != nil {
		return RetentionOverride{}, false, err
	}
	o, err := decodeOverride(tid, v)
	return o, err == nil, err
}

func decodeOverride(tid string, v []byte) (RetentionOverride, error) {
	var o RetentionOverride
	if err := json.Unmarshal(v, &o); err != nil {
		return RetentionOverride{}, fmt.Errorf("retention override of thread %s: %w: %w", tid, ErrMalformed, err)
	}
	if err := o.check(); err != nil {
		return RetentionOverride{}, fmt.Errorf("retention override of thread %s: %w: %w", tid, ErrMalformed, err)
	}
	return o, nil
}

// SetRetentionOverride stores thread tid's override, replacing any earlier
// one; an override that sets nothing removes it. The record and its index
// entry are one synced batch, written under the thread's lock. A thread
// whose purge has begun, or one of whose messages is past its claim's
// re-check (claims.go), answers ErrPurgeInProgress.
func (s *Store) SetRetentionOverride(ctx context.Context, tid string, o RetentionOverride) error {
	if err := o.check(); err != nil {
		return err
	}
	return s.writeOverride(ctx, tid, &o)
}

// DeleteRetentionOverride removes thread tid's override (the thread
// inherits every global value again). Removing none is not an error.
func (s *Store) DeleteRetentionOverride(ctx context.Context, tid string) error {
	return s.writeOverride(ctx, tid, nil)
}

func (s *Store) writeOverride(ctx context.Context, tid string, o *RetentionOverride) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := ValidateID(tid); err != nil {
		return err
	}
	h := s.hold(tid)
	defer h.release()
	for _, refuse := range []func(context.Context, string, string) error{s.refusePurging, s.refuseConfirmed} {
		if err := refuse(ctx, tid, "retention override of thread"); err != nil {
			return err
		}
	}
	if _, err := s.readThread(tid); err != nil && !errors.Is(err, ErrMalformed) {
		return err
	}
	b := s.db.NewBatch()
	if o == nil || o.IsZero() {
		_ = b.Delete(policyKey(tid), nil)
		_ = b.Delete(policyIndexKey(tid), nil)
	} else {
		v, err := encode(*o)
		if err != nil {
			_ = b.Close()
			return err
		}
		_ = b.Set(policyKey(tid), v, nil)
		_ = b.Set(policyIndexKey(tid), nil, nil)
	}
	if err := s.apply(ctx, write{kind: writeState, batch: b, sync: true, under: h}); err != nil {
		return fmt.Errorf("retention override of thread %s: %w", tid, err)
	}
	return nil
}

// OverrideEntry is one thread's override as listed by ScanRetentionOverrides.
// Err is set (wrapping ErrMalformed) when the record cannot be read; the
// thread is listed all the same, so a run can report it.
type OverrideEntry struct {
	ThreadID string
	Override RetentionOverride
	Err      error
}

// ScanRetentionOverrides calls fn for every thread with an override, in
// thread ID order, reading the index and each record: the cost is the
// number of overrides, not of threads. Index entries whose record is gone
// are skipped. fn may return ErrStopScan to stop early.
func (s *Store) ScanRetentionOverrides(ctx context.Context, fn func(OverrideEntry) error) error {
	it, err := s.db.NewIter(&pebble.IterOptions{
		LowerBound: []byte(policyIndexNS),
		UpperBound: upperBound([]byte(policyIndexNS)),
	})
	if err != nil {
		return fmt.Errorf("scan retention overrides: %w", err)
	}
	defer it.Close()
	for valid := it.First(); valid; valid = it.Next() {
		if err := ctx.Err(); err != nil {
			return err
		}
		tid := string(it.Key()[len(policyIndexNS):])
		if ValidateID(tid) != nil {
			continue
		}
		o, found, err := s.readOverride(tid)
		switch {
		case err != nil && !errors.Is(err, ErrMalformed):
			return fmt.Errorf("scan retention overrides: %w", err)
		case err == nil && !found:
			continue // purged with its thread; the entry goes with the purge
		}
		if err := fn(OverrideEntry{ThreadID: tid, Override: o, Err: err}); err != nil {
			if errors.Is(err, ErrStopScan) {
				return nil
			}
			return err
		}
	}
	if err := it.Error(); err != nil {
		return fmt.Errorf("scan retention overrides: %w", err)
	}
	return nil
}

// CountRetentionOverrides returns the number of threads with an override,
// from the override index: O(overrides).
func (s *Store) CountRetentionOverrides(ctx context.Context) (int, error) {
	n := 0
	err := s.ScanRetentionOverrides(ctx, func(OverrideEntry) error { n++; return nil })
	return n, err
}
