package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/progressdb/progressdb/server/pkg/store"
)

// B14 measures what a request costs in CPU: the server's process time (user
// and system, Pebble's background work included) over a timed closed loop,
// divided by the requests answered. The clients are a child process
// (loadgen.go) on loopback, so their work is not counted; beside each HTTP
// figure, the same operation called on the store from goroutines in this
// process tells the HTTP layer's share, and raw Pebble synced commits of
// what an append writes are the floor.

// b14Cell is one operation at one concurrency, measured three ways.
type b14Cell struct {
	name    string // "append" or "read page of 100"
	key     string // Go benchmark name part
	clients int
	raw     bool // has a raw Pebble floor

	apiCPU, stCPU, rawCPU    []float64 // ns per request
	apiRate, stRate, rawRate []float64 // per second
	apiAllocs, stAllocs      []float64 // heap allocations per request
}

const (
	b14Body    = `{"text":"a message of about sixty bytes, like a short chat line"}`
	b14Request = `{"author":"writer","body":` + b14Body + `}`
	b14Thread  = "b14-read"
)

func runB14(ctx context.Context, b *bench) (*section, error) {
	sec := &section{}
	dur := max(time.Duration(float64(2*time.Second)*b.o.scale), 300*time.Millisecond)
	maxOps := int64(b.scaled(200_000, 2_000))
	reps := b.reps(3)
	threadLen := b.scaled(1000, 1000)
	cells := []*b14Cell{
		{name: "append", key: "append", clients: 1, raw: true},
		{name: "append", key: "append", clients: 16, raw: true},
		{name: "read page of 100", key: "read100", clients: 1},
	}
	sec.setup = append(sec.setup, fmt.Sprintf(
		"CPU per request: this process's user and system time (getrusage, Pebble's background work "+
			"included) over a timed closed loop of %s (at most %s requests), divided by the requests answered. "+
			"**API**: the real server (`api.New` behind `api.Serve`) on 127.0.0.1 in this process, driven by a "+
			"load generator in a child process (keep-alive connections, one per client), so that only the "+
			"server's work is counted. **store**: the same operation called on `store.Store` from as many "+
			"goroutines in this process: API minus store is the HTTP layer's share. **raw**: raw Pebble "+
			"committing what an append writes (two keys) in one batch with `Sync`: the floor. Appends go to one "+
			"thread (server-generated IDs, a ~60-byte body; every 201 is durable), each cell on a fresh "+
			"database after untimed warm-up writes. The read is `GET /v1/threads/{tid}/messages?limit=100` "+
			"(the first page) of a thread of %d messages, flushed and compacted. Allocations are this process's "+
			"heap allocations per request over the same loop (Pebble's included). %d repetitions, interleaved; "+
			"medians, with range. `-profile DIR` writes each cell's CPU and allocation profiles (CONTRIBUTING.md).",
		dur, count(maxOps), threadLen, reps))

	fs, err := fsyncProbe(b.dir("b14", "fsync"), 400)
	if err != nil {
		return sec, fmt.Errorf("fsync probe: %w", err)
	}
	sec.setup = append(sec.setup, fs.describe()+" On a fast-fsync machine 16 clients are bound by CPU, so CPU per "+
		"append is the measure there; on a slow one, the rates are bound by the syncs.")

	read, err := b14SeedRead(ctx, b.dir("b14", "read"), threadLen)
	if err != nil {
		return sec, fmt.Errorf("seed the read thread: %w", err)
	}
	defer read.close()

	for rep := range reps {
		for _, c := range cells {
			if err := ctx.Err(); err != nil {
				return sec, err
			}
			var ap, st, raw cpuLoad
			var err error
			if c.raw {
				raw, err = b14Raw(ctx, b.dir("b14", fmt.Sprintf("raw-%d-%d", c.clients, rep)), c.clients, dur, maxOps)
				if err != nil {
					return sec, fmt.Errorf("raw append × %d: %w", c.clients, err)
				}
				c.rawCPU = append(c.rawCPU, float64(raw.perOp()))
				c.rawRate = append(c.rawRate, rate(raw.n, raw.dur))
			}
			prof := func(layer string) *cellProfile {
				return b.profile(fmt.Sprintf("b14-%s-%d-%s-rep%d", c.key, c.clients, layer, rep+1))
			}
			if c.key == "append" {
				st, err = b14StoreAppend(ctx, b.dir("b14", fmt.Sprintf("store-%d-%d", c.clients, rep)), c.clients, dur, maxOps, prof("store"))
			} else {
				st, err = b14StoreRead(ctx, read.st, c.clients, dur, maxOps, prof("store"))
			}
			if err != nil {
				return sec, fmt.Errorf("store %s × %d: %w", c.name, c.clients, err)
			}
			if c.key == "append" {
				ap, err = b14APIAppend(ctx, b.dir("b14", fmt.Sprintf("api-%d-%d", c.clients, rep)), c.clients, dur, maxOps, prof("api"))
			} else {
				ap, err = b14APIRead(ctx, read.st, c.clients, dur, maxOps, prof("api"))
			}
			if err != nil {
				return sec, fmt.Errorf("api %s × %d: %w", c.name, c.clients, err)
			}
			c.stCPU = append(c.stCPU, float64(st.perOp()))
			c.stRate = append(c.stRate, rate(st.n, st.dur))
			c.apiCPU = append(c.apiCPU, float64(ap.perOp()))
			c.apiRate = append(c.apiRate, rate(ap.n, ap.dur))
			c.stAllocs = append(c.stAllocs, st.allocsPerOp())
			c.apiAllocs = append(c.apiAllocs, ap.allocsPerOp())
			name := fmt.Sprintf("B14/%s/clients=%d", c.key, c.clients)
			b.goBench(name+"/api", ap.n, benchMetric{float64(ap.perOp()) / 1e3, "cpu-us/op"}, benchMetric{rate(ap.n, ap.dur), "req/s"}, benchMetric{ap.allocsPerOp(), "allocs/op"})
			b.goBench(name+"/store", st.n, benchMetric{float64(st.perOp()) / 1e3, "cpu-us/op"}, benchMetric{rate(st.n, st.dur), "ops/s"}, benchMetric{st.allocsPerOp(), "allocs/op"})
			if c.raw {
				b.goBench(name+"/raw", raw.n, benchMetric{float64(raw.perOp()) / 1e3, "cpu-us/op"}, benchMetric{rate(raw.n, raw.dur), "ops/s"})
			}
			b.logf("B14 rep %d: %s × %d: api %s CPU/req (%s), store %s, raw %s", rep+1, c.name, c.clients,
				fmtDur(ap.perOp()), fmtRate(rate(ap.n, ap.dur)), fmtDur(st.perOp()), fmtDur(raw.perOp()))
		}
	}

	t := table{
		caption: "CPU time per request (process user + system over the cell) and rate.",
		header:  []string{"operation", "clients", "API CPU/req", "store CPU/op", "HTTP share", "raw Pebble CPU/commit", "API req/s", "store ops/s", "raw commits/s", "API allocs/req", "store allocs/op"},
	}
	for _, c := range cells {
		rawCPU, rawRate := "–", "–"
		if c.raw {
			rawCPU, rawRate = spread(c.rawCPU, fmtDurF), spread(c.rawRate, fmtRate)
		}
		t.add(c.name, fmt.Sprint(c.clients), spread(c.apiCPU, fmtDurF), spread(c.stCPU, fmtDurF),
			fmtDurF(median(c.apiCPU)-median(c.stCPU)), rawCPU,
			spread(c.apiRate, fmtRate), spread(c.stRate, fmtRate), rawRate,
			fmt.Sprintf("%.0f", median(c.apiAllocs)), fmt.Sprintf("%.0f", median(c.stAllocs)))
	}
	sec.tables = append(sec.tables, t)
	for _, c := range cells[:2] {
		api, st, raw := median(c.apiCPU), median(c.stCPU), median(c.rawCPU)
		sec.notes = append(sec.notes, fmt.Sprintf(
			"Append, %d client(s): raw Pebble's synced commit costs %s of CPU (the floor: the log write and "+
				"fdatasync, most of it system time, and at 16 clients shared by the commits of one sync), the "+
				"store %s (%s of raw: the live count read, the thread's record read once and remembered, the "+
				"message's keys and indexes, four more keys in the memtable than raw's two, the lock), the API %s: HTTP adds %s (reading and parsing the request, the socket write of the "+
				"answer, net/http's goroutines and the wake-ups between them, the body's checks, the answer's "+
				"encoding).",
			c.clients, fmtDurF(raw), fmtDurF(st), fmtRatio(st/raw), fmtDurF(api), fmtDurF(api-st)))
	}
	c16 := cells[1]
	share := (median(c16.apiCPU) - median(c16.stCPU)) / median(c16.stCPU)
	sec.addTarget("HTTP share of an append's CPU / the store's own, 16 clients", "≤ 2.5×",
		fmt.Sprintf("%s (HTTP %s, store %s)", fmtRatio(share), fmtDurF(median(c16.apiCPU)-median(c16.stCPU)),
			fmtDurF(median(c16.stCPU))), share <= 2.5)
	for _, tg := range []struct {
		cell *b14Cell
		max  time.Duration
	}{{cells[1], 100 * time.Microsecond}, {cells[0], 250 * time.Microsecond}, {cells[2], 700 * time.Microsecond}} {
		got := time.Duration(median(tg.cell.apiCPU))
		sec.addTarget(fmt.Sprintf("API %s, %d client(s), CPU per request", tg.cell.name, tg.cell.clients),
			"≤ "+fmtDur(tg.max), fmt.Sprintf("%s (store %s)", fmtDur(got), fmtDurF(median(tg.cell.stCPU))), got <= tg.max)
	}
	return sec, nil
}

// b14Measure runs op from n goroutines, untimed for a tenth of dur, then
// timed, and returns this process's CPU time over the timed part.
func b14Measure(ctx context.Context, n int, dur time.Duration, maxOps int64, prof *cellProfile, op func(w, k int) error) (cpuLoad, error) {
	if _, err := b9Loop(ctx, n, dur/10, maxOps/10, op); err != nil {
		return cpuLoad{}, err
	}
	if err := prof.start(); err != nil {
		return cpuLoad{}, err
	}
	m0 := mallocs()
	c0 := cpuTime()
	l, err := b9Loop(ctx, n, dur, maxOps, op)
	c1 := cpuTime()
	m1 := mallocs()
	if err := errors.Join(err, prof.stop()); err != nil {
		return cpuLoad{}, err
	}
	return cpuLoad{n: l.n, cpu: c1 - c0, dur: l.dur, mallocs: m1 - m0}, nil
}

func b14Raw(ctx context.Context, dir string, clients int, dur time.Duration, maxOps int64) (cpuLoad, error) {
	st, err := store.Open(dir, store.Options{})
	if err != nil {
		return cpuLoad{}, err
	}
	defer st.Close()
	return b14Measure(ctx, clients, dur, maxOps, nil, b9RawOp(st, &b9Cell{threads: 1, writers: clients}))
}

func b14StoreAppend(ctx context.Context, dir string, clients int, dur time.Duration, maxOps int64, prof *cellProfile) (cpuLoad, error) {
	st, tids, err := b9OpenWithThreads(ctx, dir, 1)
	if err != nil {
		return cpuLoad{}, err
	}
	defer st.Close()
	body := json.RawMessage(b14Body)
	return b14Measure(ctx, clients, dur, maxOps, prof, func(int, int) error {
		_, err := st.AppendMessage(ctx, tids[0], store.Message{Author: "writer", Body: body})
		return err
	})
}

func b14StoreRead(ctx context.Context, st *store.Store, clients int, dur time.Duration, maxOps int64, prof *cellProfile) (cpuLoad, error) {
	return b14Measure(ctx, clients, dur, maxOps, prof, func(int, int) error {
		msgs, _, err := st.ListMessages(ctx, b14Thread, store.ListOptions{Limit: 100})
		if err == nil && len(msgs) != 100 {
			err = fmt.Errorf("page of %d messages, want 100", len(msgs))
		}
		return err
	})
}

func b14APIAppend(ctx context.Context, dir string, clients int, dur time.Duration, maxOps int64, prof *cellProfile) (cpuLoad, error) {
	st, tids, err := b9OpenWithThreads(ctx, dir, 1)
	if err != nil {
		return cpuLoad{}, err
	}
	defer st.Close()
	url, _, stop, err := b9Serve(ctx, st, clients)
	if err != nil {
		return cpuLoad{}, err
	}
	defer stop()
	return driveLoadgen(ctx, loadSpec{
		method: http.MethodPost, url: url + "/v1/threads/" + tids[0] + "/messages", body: b14Request,
		status: http.StatusCreated, clients: clients, warm: max(maxOps/100, 200), dur: dur, maxOps: maxOps,
		prof: prof,
	})
}

func b14APIRead(ctx context.Context, st *store.Store, clients int, dur time.Duration, maxOps int64, prof *cellProfile) (cpuLoad, error) {
	url, _, stop, err := b9Serve(ctx, st, clients)
	if err != nil {
		return cpuLoad{}, err
	}
	defer stop()
	return driveLoadgen(ctx, loadSpec{
		method: http.MethodGet, url: url + "/v1/threads/" + b14Thread + "/messages?limit=100",
		status: http.StatusOK, clients: clients, warm: max(maxOps/100, 200), dur: dur, maxOps: maxOps,
		prof: prof,
	})
}

// b14SeedRead makes the thread the read cells page through: n messages,
// appended from 16 goroutines, then flushed and compacted.
func b14SeedRead(ctx context.Context, dir string, n int) (*seeded, error) {
	sd, err := openSeeded(dir)
	if err != nil {
		return nil, err
	}
	if _, err := sd.st.CreateThread(ctx, store.Thread{ID: b14Thread, Title: "bench", Author: "writer"}); err != nil {
		sd.close()
		return nil, err
	}
	body := json.RawMessage(b14Body)
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
	)
	for w := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += 16 {
				if _, err := sd.st.AppendMessage(ctx, b14Thread, store.Message{Author: "writer", Body: body}); err != nil {
					mu.Lock()
					first = err
					mu.Unlock()
					return
				}
			}
		}()
	}
	wg.Wait()
	if first == nil {
		first = sd.settle(ctx)
	}
	if first != nil {
		sd.close()
		return nil, first
	}
	return sd, nil
}
