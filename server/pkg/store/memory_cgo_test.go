//go:build cgo

package store_test

// With cgo, Pebble allocates its memtables and block cache outside the Go
// heap, so heap measurements see only what the store itself holds.
const pebbleOnGoHeap = false
