package main

import (
	"context"
	"fmt"
	"runtime"
	"runtime/metrics"
	"sync"
	"time"
)

// B3: memory. One thread of a million messages purged by a run while a
// goroutine samples the Go heap every few milliseconds.

const heapSampleEvery = 2 * time.Millisecond

func runB3(ctx context.Context, b *bench) (*section, error) {
	sec := &section{}
	msgs := b.scaled(1_000_000, 1000)
	sec.setup = append(sec.setup,
		fmt.Sprintf("One eligible thread of %s messages (one version each) is the only thread in the database. "+
			"A run with production defaults purges it while a goroutine reads `runtime/metrics` "+
			"(`/memory/classes/heap/objects:bytes`, the heap's live and not yet swept objects, i.e. HeapAlloc) every %s. "+
			"Heap growth is the peak sample minus the heap after a forced GC just before the run; "+
			"allocated is the growth of `/gc/heap/allocs:bytes` over the run. "+
			"The thread's size on disk is `EstimateDiskUsage` over `thread:<tid>:` and over `version:msg:` "+
			"(all its messages' versions: it is the only thread), after flush and full compaction.",
			count(int64(msgs)), heapSampleEvery))

	sd, err := openSeeded(b.dir("b3"))
	if err != nil {
		return sec, err
	}
	defer sd.close()
	ps := []threadPlan{{id: "b3-t00000000", messages: msgs, versions: 1, deleted: true}}
	g := newGenerator("b3", time.Now())
	if _, err := g.seed(ctx, b, sd.st, "B3: seeding", ps, false); err != nil {
		return sec, err
	}
	if err := sd.settle(ctx); err != nil {
		return sec, err
	}
	var disk uint64
	for _, p := range []string{threadPrefix(ps[0].id), nsVersion} {
		s := span(p)
		u, err := sd.db().EstimateDiskUsage(s[0], s[1])
		if err != nil {
			return sec, err
		}
		disk += u
	}

	reps := b.reps(3)
	var growth, allocs, times, keys []float64
	var gcs []float64
	for i := range reps {
		f, err := sd.fork("run")
		if err != nil {
			return sec, err
		}
		r, _, err := newRunner(f, pacing{})
		if err != nil {
			f.close()
			return sec, err
		}
		hs := startHeapSampler()
		res, el, err := runOnce(ctx, r)
		h := hs.stop()
		if cerr := f.close(); err == nil {
			err = cerr
		}
		if err != nil {
			return sec, err
		}
		growth = append(growth, float64(h.peakGrowth))
		allocs = append(allocs, float64(h.allocated))
		times = append(times, float64(el))
		keys = append(keys, float64(res.KeysDeleted))
		gcs = append(gcs, float64(h.gcs))
		b.logf("B3: rep %d/%d: %s keys in %s, heap growth %s, allocated %s, %d GCs, %d samples",
			i+1, reps, count(res.KeysDeleted), fmtDur(el), fmtBytes(float64(h.peakGrowth)), fmtBytes(float64(h.allocated)), h.gcs, h.samples)
	}
	t := table{header: []string{"Thread", "Size on disk", "Keys deleted", "Run time", "Peak heap growth", "Allocated during run", "GC cycles"}}
	t.add(fmt.Sprintf("%s messages", count(int64(msgs))), fmtBytes(float64(disk)), count(int64(median(keys))),
		spread(times, fmtDurF), spread(growth, fmtBytes), spread(allocs, fmtBytes), fmt.Sprintf("%.0f", median(gcs)))
	sec.tables = append(sec.tables, t)
	g64 := median(growth)
	sec.addTarget("peak Go heap growth purging one large thread", "≤ 64 MiB",
		fmt.Sprintf("%s (thread %s on disk)", fmtBytes(g64), fmtBytes(float64(disk))), g64 <= 64<<20)
	sec.notes = append(sec.notes, "Pebble's block cache and memtables are allocated outside the Go heap when "+
		"built with cgo (the default), so the heap figure is the store's and runner's own working memory.")
	return sec, nil
}

// heapSampler samples the Go heap from a goroutine.
type heapSampler struct {
	stopc chan struct{}
	wg    sync.WaitGroup

	base, baseAllocs, baseGCs uint64
	peak                      uint64
	samples                   int
}

type heapResult struct {
	peakGrowth uint64
	allocated  uint64
	gcs        uint64
	samples    int
}

var heapMetrics = []string{"/memory/classes/heap/objects:bytes", "/gc/heap/allocs:bytes", "/gc/cycles/total:gc-cycles"}

func readHeap(s []metrics.Sample) (heap, allocs, gcs uint64) {
	metrics.Read(s)
	return s[0].Value.Uint64(), s[1].Value.Uint64(), s[2].Value.Uint64()
}

func newSamples() []metrics.Sample {
	s := make([]metrics.Sample, len(heapMetrics))
	for i, name := range heapMetrics {
		s[i].Name = name
	}
	return s
}

func startHeapSampler() *heapSampler {
	h := &heapSampler{stopc: make(chan struct{})}
	runtime.GC()
	s := newSamples()
	h.base, h.baseAllocs, h.baseGCs = readHeap(s)
	h.peak = h.base
	h.wg.Add(1)
	go func() {
		defer h.wg.Done()
		s := newSamples()
		tick := time.NewTicker(heapSampleEvery)
		defer tick.Stop()
		for {
			heap, _, _ := readHeap(s)
			h.peak = max(h.peak, heap)
			h.samples++
			select {
			case <-h.stopc:
				return
			case <-tick.C:
			}
		}
	}()
	return h
}

func (h *heapSampler) stop() heapResult {
	close(h.stopc)
	h.wg.Wait()
	heap, allocs, gcs := readHeap(newSamples())
	h.peak = max(h.peak, heap)
	return heapResult{
		peakGrowth: h.peak - h.base,
		allocated:  allocs - h.baseAllocs,
		gcs:        gcs - h.baseGCs,
		samples:    h.samples,
	}
}
