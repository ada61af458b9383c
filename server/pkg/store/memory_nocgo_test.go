//go:build !cgo

package store_test

// Without cgo, Pebble's memtables and block cache live on the Go heap;
// memory measurements subtract them (see liveHeap).
const pebbleOnGoHeap = true
