package cluster

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"

	"github.com/progressdb/progressdb/server/pkg/store"
)

func TestShardMemoryBudget(t *testing.T) {
	if got := ShardMemTableSize(1); got != store.DefaultMemTableSize {
		t.Errorf("one shard: memtable %d, want a single store's %d", got, store.DefaultMemTableSize)
	}
	for _, owned := range []int{1, 2, 4, 16, 64, 1024} {
		mt := ShardMemTableSize(owned)
		if mt < minShardMemTable || mt > store.DefaultMemTableSize {
			t.Errorf("%d shards: memtable %d out of [4 MiB, 32 MiB]", owned, mt)
		}
		// Blocks keep a single store's cache beside every memtable reservation.
		if c := NodeCacheSize(owned); c-2*int64(owned)*int64(mt) != store.CacheSize {
			t.Errorf("%d shards: cache %d leaves %d for blocks", owned, c, c-2*int64(owned)*int64(mt))
		}
	}
	if ShardMemTableSize(16) != 4<<20 || NodeCacheSize(16) != 256<<20 {
		t.Errorf("16 shards: memtable %d, cache %d; want 4 MiB and 256 MiB", ShardMemTableSize(16), NodeCacheSize(16))
	}
}

// TestShardsAreSeparateDatabases: each shard is a complete store in its own
// folder under shards/; a thread written to its shard is there and in no
// other, and stays there after the node reopens its shards.
func TestShardsAreSeparateDatabases(t *testing.T) {
	dir := t.TempDir()
	const total = 4
	held := []int{0, 1, 2, 3}
	sh, err := OpenShards(dir, held, store.Options{}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	byShard := make(map[int][]string)
	for i := range 40 {
		tid := fmt.Sprintf("thread-%02d", i)
		n := ShardOf(tid, total)
		st, ok := sh.Store(n)
		if !ok {
			t.Fatalf("shard %d not held", n)
		}
		if _, err := st.CreateThread(ctx, store.Thread{ID: tid, Title: "x", Author: "y"}); err != nil {
			t.Fatal(err)
		}
		byShard[n] = append(byShard[n], tid)
	}
	if err := sh.Close(); err != nil {
		t.Fatal(err)
	}
	for _, n := range held {
		if !hasManifest(t, filepath.Join(dir, "shards", strconv.Itoa(n))) {
			t.Fatalf("shard %d has no database of its own", n)
		}
	}

	sh, err = OpenShards(dir, held, store.Options{}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer sh.Close()
	if got := sh.Numbers(); len(got) != total {
		t.Fatalf("Numbers = %v", got)
	}
	for n, tids := range byShard {
		for _, tid := range tids {
			for _, m := range held {
				st, _ := sh.Store(m)
				_, err := st.GetThread(ctx, tid)
				if m == n && err != nil {
					t.Fatalf("%s missing from its shard %d: %v", tid, n, err)
				}
				if m != n && !errors.Is(err, store.ErrNotFound) {
					t.Fatalf("%s (shard %d) found in shard %d: %v", tid, n, m, err)
				}
			}
		}
	}
}

func hasManifest(t *testing.T, dir string) bool {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		return false
	}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), "MANIFEST-") {
			return true
		}
	}
	return false
}

// BenchmarkNodeMemory measures what a node's shards cost in memory: the
// same data (64 MiB of messages) loaded and read back through one store (a
// single node) or spread over 16 shards sharing one cache. Run one size per
// process, since peak RSS only grows:
//
//	go test -run '^$' -bench 'NodeMemory/shards=16$' -benchtime 1x ./server/internal/cluster
func BenchmarkNodeMemory(b *testing.B) {
	for _, shards := range []int{1, 16} {
		b.Run(fmt.Sprintf("shards=%d", shards), func(b *testing.B) {
			before := procStatus(b, "VmRSS")
			dir := b.TempDir()
			var open func() (func(n int) *store.Store, func() error)
			if shards == 1 {
				open = func() (func(int) *store.Store, func() error) {
					st, err := store.Open(filepath.Join(dir, "db"), store.Options{})
					if err != nil {
						b.Fatal(err)
					}
					return func(int) *store.Store { return st }, st.Close
				}
			} else {
				open = func() (func(int) *store.Store, func() error) {
					ns := make([]int, shards)
					for i := range ns {
						ns[i] = i
					}
					sh, err := OpenShards(dir, ns, store.Options{}, nil, nil)
					if err != nil {
						b.Fatal(err)
					}
					return func(n int) *store.Store { st, _ := sh.Store(n); return st }, sh.Close
				}
			}
			get, closeAll := open()
			defer closeAll()
			const threads, perThread, bodySize = 2048, 16, 2048
			body, _ := json.Marshal(strings.Repeat("x", bodySize))
			bulks := make(map[int]*store.Bulk)
			for i := range threads {
				tid := fmt.Sprintf("t%05d", i)
				n := ShardOf(tid, shards)
				bk := bulks[n]
				if bk == nil {
					bk = get(n).NewBulk()
					bulks[n] = bk
				}
				if err := bk.PutThread(store.Thread{ID: tid, Title: "x", Author: "y", CreatedTS: 1}); err != nil {
					b.Fatal(err)
				}
				for j := range perThread {
					m := store.Message{ID: fmt.Sprintf("%s-m%02d", tid, j), Thread: tid, Author: "y", Body: body,
						TS: int64(j + 1), Version: 1}
					if err := bk.PutMessage([]store.Message{m}); err != nil {
						b.Fatal(err)
					}
				}
			}
			for n, bk := range bulks {
				if err := bk.Close(); err != nil {
					b.Fatal(err)
				}
				// A bulk load's batches are larger than half a shard's
				// memtable, so Pebble keeps each whole until a flush; API
				// writes are small. Flushed, the figures are a serving node's.
				if err := get(n).DB().Flush(); err != nil {
					b.Fatal(err)
				}
			}
			ctx := context.Background()
			for i := range threads {
				tid := fmt.Sprintf("t%05d", i)
				for j := range perThread {
					if _, err := get(ShardOf(tid, shards)).GetMessage(ctx, tid, fmt.Sprintf("%s-m%02d", tid, j)); err != nil {
						b.Fatal(err)
					}
				}
			}
			// Where it goes: the block cache (shared: counted once), the
			// memtables, and the Go heap.
			var memtables, cache int64
			seen := make(map[*store.Store]bool)
			for n := range shards {
				st := get(n)
				if seen[st] {
					continue
				}
				seen[st] = true
				m := st.DB().Metrics()
				memtables += int64(m.MemTable.Size)
				cache = m.BlockCache.Size
			}
			// Garbage of the load (its batches) is not what a node keeps.
			debug.FreeOSMemory()
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			b.ReportMetric(float64(cache)/(1<<20), "cache-MiB")
			b.ReportMetric(float64(memtables)/(1<<20), "memtables-MiB")
			b.ReportMetric(float64(ms.HeapInuse)/(1<<20), "go-heap-MiB")
			b.ReportMetric(float64(procStatus(b, "VmRSS")-before)/(1<<20), "rss-growth-MiB")
			b.ReportMetric(float64(procStatus(b, "VmHWM"))/(1<<20), "peak-rss-MiB")
		})
	}
}

// procStatus reads a memory figure (kB) of /proc/self/status, in bytes.
func procStatus(b *testing.B, field string) int64 {
	b.Helper()
	f, err := os.Open("/proc/self/status")
	if err != nil {
		b.Skip("no /proc/self/status:", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), field+":"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				b.Fatal(err)
			}
			return kb << 10
		}
	}
	b.Fatalf("%s not in /proc/self/status", field)
	return 0
}
