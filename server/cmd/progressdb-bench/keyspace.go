package main

import (
	"bytes"
	"context"
	"fmt"

	"github.com/cockroachdb/pebble/v2"
)

// Key namespaces (spec §2, and the store's package documentation for the
// deletion index). The bench reads raw keys to build the baselines it
// compares the runner with.
const (
	nsThread   = "thread:"
	nsVersion  = "version:msg:"
	nsDelIndex = "idx:del:"
	logInfix   = ":log:"
	metaSuffix = ":meta"
)

// prefixEnd is the exclusive upper bound of the keys starting with p, where
// p ends in ':' (';' is the next byte).
func prefixEnd(p string) []byte {
	b := []byte(p)
	b[len(b)-1] = ';'
	return b
}

func threadPrefix(tid string) string  { return nsThread + tid + ":" }
func versionPrefix(mid string) string { return nsVersion + mid + ":" }
func lastSegment(key []byte) string   { return string(key[bytes.LastIndexByte(key, ':')+1:]) }
func isLogKey(key []byte) bool        { return bytes.Contains(key, []byte(logInfix)) }
func isMetaKey(key []byte) bool       { return bytes.HasSuffix(key, []byte(metaSuffix)) }
func span(prefix string) [2][]byte    { return [2][]byte{[]byte(prefix), prefixEnd(prefix)} }
func iterOpts(s [2][]byte) *pebble.IterOptions {
	return &pebble.IterOptions{LowerBound: s[0], UpperBound: s[1]}
}

// forEachKey calls fn with every key in [lo, hi). The key is only valid
// during the call.
func forEachKey(db *pebble.DB, s [2][]byte, fn func(k, v []byte) error) error {
	it, err := db.NewIter(iterOpts(s))
	if err != nil {
		return err
	}
	for it.First(); it.Valid(); it.Next() {
		v, err := it.ValueAndErr()
		if err != nil {
			it.Close()
			return err
		}
		if err := fn(it.Key(), v); err != nil {
			it.Close()
			return err
		}
	}
	if err := it.Error(); err != nil {
		it.Close()
		return err
	}
	return it.Close()
}

// countKeys counts the keys in [lo, hi).
func countKeys(db *pebble.DB, s [2][]byte) (int64, error) {
	var n int64
	err := forEachKey(db, s, func(_, _ []byte) error { n++; return nil })
	return n, err
}

// indexKeys maps item IDs to their deletion-index keys (threads and
// messages alike; IDs are unique across both).
func indexKeys(db *pebble.DB) (map[string][]byte, error) {
	m := map[string][]byte{}
	err := forEachKey(db, span(nsDelIndex), func(k, _ []byte) error {
		m[lastSegment(k)] = bytes.Clone(k)
		return nil
	})
	return m, err
}

// threadKeySet lists every key of the given threads, as the spec defines a
// thread's keys (everything under thread:<tid>: and version:msg:<mid>: for
// each of its messages), plus the deletion-index entries of the thread and
// its messages. Metadata comes last for each thread.
func threadKeySet(ctx context.Context, db *pebble.DB, tids []string) ([][]byte, error) {
	idx, err := indexKeys(db)
	if err != nil {
		return nil, err
	}
	var keys [][]byte
	for _, tid := range tids {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		var meta []byte
		err := forEachKey(db, span(threadPrefix(tid)), func(k, _ []byte) error {
			if isMetaKey(k) {
				meta = bytes.Clone(k)
				return nil
			}
			keys = append(keys, bytes.Clone(k))
			if !isLogKey(k) {
				return nil
			}
			mid := lastSegment(k)
			if ik, ok := idx[mid]; ok {
				keys = append(keys, ik)
			}
			return forEachKey(db, span(versionPrefix(mid)), func(vk, _ []byte) error {
				keys = append(keys, bytes.Clone(vk))
				return nil
			})
		})
		if err != nil {
			return nil, fmt.Errorf("keys of %s: %w", tid, err)
		}
		if ik, ok := idx[tid]; ok {
			keys = append(keys, ik)
		}
		if meta != nil {
			keys = append(keys, meta)
		}
	}
	return keys, nil
}

// countDataKeys counts the keys of the data namespaces: threads, versions
// and the deletion index (not the server's own state).
func countDataKeys(db *pebble.DB) (int64, error) {
	var total int64
	for _, p := range []string{nsThread, nsVersion, nsDelIndex} {
		n, err := countKeys(db, span(p))
		if err != nil {
			return 0, err
		}
		total += n
	}
	return total, nil
}
