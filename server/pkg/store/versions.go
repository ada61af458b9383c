package store

import (
	"fmt"

	"github.com/cockroachdb/pebble/v2"
)

// versionReader reads the versions of many messages through one iterator,
// re-bounded per message: opening an iterator per message is what made
// earlier purges slow.
type versionReader struct {
	it           *pebble.Iterator
	lower, upper []byte // reused bound buffers; SetBounds copies them
}

func newVersionReader(r pebble.Reader) (*versionReader, error) {
	it, err := r.NewIter(&pebble.IterOptions{
		LowerBound: []byte(versionNS),
		UpperBound: upperBound([]byte(versionNS)),
	})
	if err != nil {
		return nil, fmt.Errorf("open version iterator: %w", err)
	}
	return &versionReader{it: it}, nil
}

func (r *versionReader) close() error { return r.it.Close() }

// bound limits the iterator to mid's versions; position it afterwards.
func (r *versionReader) bound(mid string) *pebble.Iterator {
	r.lower = appendVersionPrefix(r.lower[:0], mid)
	r.upper = append(append(r.upper[:0], versionNS...), mid...)
	r.upper = append(r.upper, ';')
	r.it.SetBounds(r.lower, r.upper)
	return r.it
}

// latest positions the iterator on mid's newest version. The key and value
// stay valid until the iterator moves.
func (r *versionReader) latest(mid string) (key, value []byte, ok bool, err error) {
	it := r.bound(mid)
	if !it.Last() {
		return nil, nil, false, it.Error()
	}
	value, err = it.ValueAndErr()
	if err != nil {
		return nil, nil, false, fmt.Errorf("read %s: %w", it.Key(), err)
	}
	return it.Key(), value, true, nil
}

// latestMessage decodes mid's newest version; ErrNotFound when it has none.
func (r *versionReader) latestMessage(mid string) (Message, error) {
	key, value, ok, err := r.latest(mid)
	if err != nil {
		return Message{}, err
	}
	if !ok {
		return Message{}, fmt.Errorf("message %s: %w", mid, ErrNotFound)
	}
	_, version, _ := parseVersionKey(key)
	return decodeMessage(mid, version, value)
}

// lastLive walks back from the newest version to the newest one that is not
// a tombstone (what a restore brings back). ok is false when there is none.
func (r *versionReader) lastLive(mid string) (m Message, ok bool, err error) {
	it := r.bound(mid)
	for valid := it.Last(); valid; valid = it.Prev() {
		value, err := it.ValueAndErr()
		if err != nil {
			return Message{}, false, fmt.Errorf("read %s: %w", it.Key(), err)
		}
		_, version, _ := parseVersionKey(it.Key())
		m, err := decodeMessage(mid, version, value)
		if err == nil && !m.Deleted {
			return m, true, nil
		}
	}
	return Message{}, false, it.Error()
}

// created returns mid's creation time: its first version's ts.
func (r *versionReader) created(mid string) (int64, error) {
	it := r.bound(mid)
	if !it.First() {
		if err := it.Error(); err != nil {
			return 0, err
		}
		return 0, fmt.Errorf("message %s: %w", mid, ErrNotFound)
	}
	v, err := it.ValueAndErr()
	if err != nil {
		return 0, fmt.Errorf("read %s: %w", it.Key(), err)
	}
	h, ok := decodeHead(v)
	if !ok {
		return 0, fmt.Errorf("message %s: %w: first version", mid, ErrMalformed)
	}
	return h.TS, nil
}
