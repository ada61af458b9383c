package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	neturl "net/url"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/progressdb/progressdb/server/internal/api"
	"github.com/progressdb/progressdb/server/pkg/store"
)

// B9 measures the write path and the thread listing from outside: the real
// HTTP server (api.New behind api.Serve) on a loopback port, driven by a
// closed-loop Go load generator in this process, side by side with raw
// Pebble committing the same two keys per message (the version and the log
// entry) with Sync at the same concurrency. Both run on one store
// configuration (store.Open's Pebble options), on a fresh database each.

// b9Cell is one shape and concurrency of the write measurement.
type b9Cell struct {
	shape   string // "one thread" or "1,000 threads"
	threads int
	writers int

	apiRate, rawRate, stRate []float64 // messages/s per repetition
	apiP50, apiP99           []float64 // ns
	rawP50, rawP99           []float64
	stP99                    []float64
	// writes per fsync of the log (group commit's batches), per repetition
	apiBatch, stBatch, rawBatch []float64
}

// b9Load is one closed-loop measurement's outcome.
type b9Load struct {
	n     int64
	dur   time.Duration
	lat   []time.Duration // sorted
	syncs uint64          // the log's fsyncs over the timed loop (0: not counted)
}

// perSync is the writes each of the log's fsyncs made durable, on average.
func (l b9Load) perSync() float64 {
	if l.syncs == 0 {
		return 0
	}
	return float64(l.n) / float64(l.syncs)
}

func runB9(ctx context.Context, b *bench) (*section, error) {
	sec := &section{}
	dur := time.Duration(float64(2*time.Second) * b.o.scale)
	dur = max(dur, 300*time.Millisecond)
	maxOps := int64(b.scaled(200_000, 2_000))
	reps := b.reps(3)

	var cells []*b9Cell
	for _, shape := range []struct {
		name    string
		threads int
	}{{"one thread", 1}, {"1,000 threads", 1000}} {
		for _, w := range []int{1, 16, 64} {
			cells = append(cells, &b9Cell{shape: shape.name, threads: shape.threads, writers: w})
		}
	}
	sec.setup = append(sec.setup, fmt.Sprintf(
		"Writes: every cell starts a fresh database, creates its threads, and then N writers each send "+
			"`POST /v1/threads/{tid}/messages` (server-generated IDs, a ~60-byte JSON body) in a closed loop for %s "+
			"(at most %s messages), over keep-alive connections to the real server (`api.New` behind `api.Serve`, "+
			"127.0.0.1, same process). Each 201 is durable. Beside it, raw Pebble on a fresh database with the "+
			"same options commits the same two keys per message (version and log entry, same values) in one "+
			"batch with `Sync`, at the same concurrency: the floor. The store column calls `Store.AppendMessage` "+
			"from as many goroutines, without HTTP, to tell the storage path from the HTTP layer. Spread writers "+
			"pick threads round-robin over 1,000 threads. Every database first takes a tenth of the time in "+
			"untimed writes (the first fsyncs of a new log are slow). %d repetitions, interleaved (raw, store, "+
			"API, cell by cell); medians, with range.",
		dur, count(maxOps), reps))

	fs, err := fsyncProbe(b.dir("b9", "fsync"), 400)
	if err != nil {
		return sec, fmt.Errorf("fsync probe: %w", err)
	}
	sec.setup = append(sec.setup, fs.describe())
	b.logf("B9: %s", fs.describe())

	for rep := range reps {
		for _, c := range cells {
			if err := ctx.Err(); err != nil {
				return sec, err
			}
			prof := func(layer string) *cellProfile {
				if c.threads != 1 {
					return nil
				}
				p := b.profile(fmt.Sprintf("b9-one-%d-%s-rep%d", c.writers, layer, rep+1))
				if p != nil {
					p.trace = true
				}
				return p
			}
			raw, err := b9Raw(ctx, b.dir("b9", fmt.Sprintf("raw-%d-%d-%d", c.threads, c.writers, rep)), c, dur, maxOps, prof("raw"))
			if err != nil {
				return sec, fmt.Errorf("raw %s × %d: %w", c.shape, c.writers, err)
			}
			stl, err := b9Store(ctx, b.dir("b9", fmt.Sprintf("store-%d-%d-%d", c.threads, c.writers, rep)), c, dur, maxOps, prof("store"))
			if err != nil {
				return sec, fmt.Errorf("store %s × %d: %w", c.shape, c.writers, err)
			}
			ap, err := b9API(ctx, b.dir("b9", fmt.Sprintf("api-%d-%d-%d", c.threads, c.writers, rep)), c, dur, maxOps, prof("api"))
			if err != nil {
				return sec, fmt.Errorf("api %s × %d: %w", c.shape, c.writers, err)
			}
			c.apiBatch = append(c.apiBatch, ap.perSync())
			c.stBatch = append(c.stBatch, stl.perSync())
			c.rawBatch = append(c.rawBatch, raw.perSync())
			c.stRate = append(c.stRate, rate(stl.n, stl.dur))
			c.stP99 = append(c.stP99, float64(percentile(stl.lat, 99)))
			c.rawRate = append(c.rawRate, rate(raw.n, raw.dur))
			c.apiRate = append(c.apiRate, rate(ap.n, ap.dur))
			c.rawP50 = append(c.rawP50, float64(percentile(raw.lat, 50)))
			c.rawP99 = append(c.rawP99, float64(percentile(raw.lat, 99)))
			c.apiP50 = append(c.apiP50, float64(percentile(ap.lat, 50)))
			c.apiP99 = append(c.apiP99, float64(percentile(ap.lat, 99)))
			name := fmt.Sprintf("B9/threads=%d/writers=%d", c.threads, c.writers)
			b.goBench(name+"/api", ap.n, benchMetric{rate(ap.n, ap.dur), "msgs/s"}, benchMetric{float64(percentile(ap.lat, 99)) / 1e3, "p99-us"})
			b.goBench(name+"/store", stl.n, benchMetric{rate(stl.n, stl.dur), "msgs/s"}, benchMetric{float64(percentile(stl.lat, 99)) / 1e3, "p99-us"})
			b.goBench(name+"/raw", raw.n, benchMetric{rate(raw.n, raw.dur), "msgs/s"}, benchMetric{float64(percentile(raw.lat, 99)) / 1e3, "p99-us"})
			// The ratio holds better than either rate on a shared machine.
			b.goBench(name+"/api-vs-raw", ap.n, benchMetric{rate(ap.n, ap.dur) / rate(raw.n, raw.dur), "api/raw"})
			if c.threads == 1 && c.writers == 16 && len(cells[0].apiRate) == rep+1 {
				// One hot thread: what 16 writers gain over one, this repetition.
				b.goBench("B9/threads=1/writers=16-vs-1", ap.n,
					benchMetric{rate(ap.n, ap.dur) / cells[0].apiRate[rep], "api-16/1"},
					benchMetric{rate(stl.n, stl.dur) / cells[0].stRate[rep], "store-16/1"})
			}
			b.logf("B9 rep %d: %s × %d writers: api %s p99 %s, store %s, raw %s p99 %s; writes per fsync: api %.1f, store %.1f, raw %.1f",
				rep+1, c.shape, c.writers,
				fmtRate(rate(ap.n, ap.dur)), fmtDur(percentile(ap.lat, 99)), fmtRate(rate(stl.n, stl.dur)),
				fmtRate(rate(raw.n, raw.dur)), fmtDur(percentile(raw.lat, 99)), ap.perSync(), stl.perSync(), raw.perSync())
		}
	}

	t := table{
		caption: "Synced writes: the API against raw Pebble at the same concurrency.",
		header:  []string{"shape", "writers", "API msgs/s", "raw Pebble commits/s", "API / raw", "store msgs/s (no HTTP)", "store / raw", "API p50", "API p99", "raw p50", "raw p99", "p99 API / raw", "store p99", "writes per fsync: API, store, raw"},
	}
	for _, c := range cells {
		t.add(c.shape, strconv.Itoa(c.writers),
			spread(c.apiRate, fmtRate), spread(c.rawRate, fmtRate),
			fmtRatio(median(c.apiRate)/median(c.rawRate)),
			spread(c.stRate, fmtRate), fmtRatio(median(c.stRate)/median(c.rawRate)),
			fmtDurF(median(c.apiP50)), fmtDurF(median(c.apiP99)),
			fmtDurF(median(c.rawP50)), fmtDurF(median(c.rawP99)),
			fmtRatio(median(c.apiP99)/median(c.rawP99)), fmtDurF(median(c.stP99)),
			fmt.Sprintf("%.1f, %.1f, %.1f", median(c.apiBatch), median(c.stBatch), median(c.rawBatch)))
	}
	sec.tables = append(sec.tables, t)

	one1, one16 := cells[0], cells[1]
	gain := median(one16.apiRate) / median(one1.apiRate)
	sec.addTarget("16 writers on one thread vs 1 writer", "≥ 4×",
		fmt.Sprintf("%s (%s vs %s)", fmtRatio(gain), fmtRate(median(one16.apiRate)), fmtRate(median(one1.apiRate))), gain >= 4)
	r1 := median(one1.apiRate) / median(one1.rawRate)
	sec.addTarget("one thread, 1 writer, vs raw Pebble", "≥ 50%",
		fmt.Sprintf("%s (%s vs %s)", fmtPct(r1), fmtRate(median(one1.apiRate)), fmtRate(median(one1.rawRate))), r1 >= 0.5)
	for _, c := range cells[3:] {
		r := median(c.apiRate) / median(c.rawRate)
		sec.addTarget(fmt.Sprintf("spread writes, %d writers, vs raw Pebble", c.writers), "≥ 50%",
			fmt.Sprintf("%s (%s vs %s)", fmtPct(r), fmtRate(median(c.apiRate)), fmtRate(median(c.rawRate))), r >= 0.5)
	}
	worst, worstCell := 0.0, cells[0]
	for _, c := range cells {
		if r := median(c.apiP99) / median(c.rawP99); r > worst {
			worst, worstCell = r, c
		}
	}
	sec.addTarget("API p99 vs raw p99 (worst cell)", "≤ 4×",
		fmt.Sprintf("%s (%s × %d: %s vs %s)", fmtRatio(worst), worstCell.shape, worstCell.writers,
			fmtDurF(median(worstCell.apiP99)), fmtDurF(median(worstCell.rawP99))), worst <= 4)

	for _, c := range cells[:3] {
		sec.notes = append(sec.notes, fmt.Sprintf(
			"One thread, %d writer(s): each fsync of the log carried %.1f writes through the API, %.1f through the "+
				"store, %.1f for raw Pebble. Where the store's batches match raw Pebble's, group commit fills them as "+
				"well as the engine allows and the stripe costs nothing there; where the API's are smaller, its "+
				"writers spend the time of a sync outside the store (HTTP, and CPU: the load generator shares this "+
				"process).", c.writers, median(c.apiBatch), median(c.stBatch), median(c.rawBatch)))
	}
	if err := b9Listing(ctx, b, sec); err != nil {
		return sec, err
	}
	return sec, nil
}

// b9Raw commits, at c.writers concurrency, what an append commits.
func b9Raw(ctx context.Context, dir string, c *b9Cell, dur time.Duration, maxOps int64, prof *cellProfile) (b9Load, error) {
	st, err := store.Open(dir, store.Options{})
	if err != nil {
		return b9Load{}, err
	}
	defer st.Close()
	return b9Drive(ctx, c.writers, dur, maxOps, st.DB(), prof, b9RawOp(st, c))
}

// b9RawOp is one raw commit of what an append commits (the version and the
// log entry, in one batch with Sync), to one of c's threads.
func b9RawOp(st *store.Store, c *b9Cell) func(w, k int) error {
	db := st.DB()
	body := json.RawMessage(`{"text":"a message of about sixty bytes, like a short chat line"}`)
	tids := b9Threads(c.threads)
	return func(w, k int) error {
		mid, tid := st.NewID(), tids[(w+k*c.writers)%len(tids)]
		now := time.Now().UnixNano()
		v, err := json.Marshal(store.Message{ID: mid, Thread: tid, Author: "writer", Body: body, TS: now, Version: 1})
		if err != nil {
			return err
		}
		bt := db.NewBatch()
		_ = bt.Set([]byte("version:msg:"+mid+":00000000000000000001"), v, nil)
		_ = bt.Set([]byte(fmt.Sprintf("thread:%s:log:%020d:%s", tid, now, mid)), []byte(mid), nil)
		defer bt.Close()
		return bt.Commit(pebble.Sync)
	}
}

// b9OpenWithThreads opens a store in dir and creates n threads in it.
func b9OpenWithThreads(ctx context.Context, dir string, n int) (*store.Store, []string, error) {
	st, err := store.Open(dir, store.Options{})
	if err != nil {
		return nil, nil, err
	}
	tids := b9Threads(n)
	for _, tid := range tids {
		if _, err := st.CreateThread(ctx, store.Thread{ID: tid, Title: "bench", Author: "writer"}); err != nil {
			st.Close()
			return nil, nil, err
		}
	}
	return st, tids, nil
}

// b9Store appends through the store itself, at c.writers concurrency.
func b9Store(ctx context.Context, dir string, c *b9Cell, dur time.Duration, maxOps int64, prof *cellProfile) (b9Load, error) {
	st, tids, err := b9OpenWithThreads(ctx, dir, c.threads)
	if err != nil {
		return b9Load{}, err
	}
	defer st.Close()
	body := json.RawMessage(`{"text":"a message of about sixty bytes, like a short chat line"}`)
	return b9Drive(ctx, c.writers, dur, maxOps, st.DB(), prof, func(w, k int) error {
		_, err := st.AppendMessage(ctx, tids[(w+k*c.writers)%len(tids)], store.Message{Author: "writer", Body: body})
		return err
	})
}

// b9API runs the real server on loopback and appends through it.
func b9API(ctx context.Context, dir string, c *b9Cell, dur time.Duration, maxOps int64, prof *cellProfile) (b9Load, error) {
	st, tids, err := b9OpenWithThreads(ctx, dir, c.threads)
	if err != nil {
		return b9Load{}, err
	}
	defer st.Close()
	url, client, stop, err := b9Serve(ctx, st, c.writers)
	if err != nil {
		return b9Load{}, err
	}
	defer stop()
	body := []byte(`{"author":"writer","body":{"text":"a message of about sixty bytes, like a short chat line"}}`)
	return b9Drive(ctx, c.writers, dur, maxOps, st.DB(), prof, func(w, k int) error {
		tid := tids[(w+k*c.writers)%len(tids)]
		resp, err := client.Post(url+"/v1/threads/"+tid+"/messages", "application/json", bytes.NewReader(body))
		if err != nil {
			return err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusCreated {
			return fmt.Errorf("append: status %d", resp.StatusCode)
		}
		return nil
	})
}

// b9Serve starts the real HTTP server for st on a loopback port and
// returns its URL and a client with a connection per writer.
func b9Serve(ctx context.Context, st *store.Store, conns int) (string, *http.Client, func(), error) {
	return serveAPI(ctx, api.Options{Store: st}, conns)
}

// serveAPI is b9Serve of a server built with opts (B15: with attachments).
func serveAPI(ctx context.Context, opts api.Options, conns int) (string, *http.Client, func(), error) {
	h, err := api.New(opts)
	if err != nil {
		return "", nil, nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, nil, err
	}
	sctx, cancel := context.WithCancel(ctx)
	served := make(chan struct{})
	go func() {
		_ = api.Serve(sctx, ln, h, nil)
		close(served)
	}()
	tr := &http.Transport{MaxIdleConns: conns + 4, MaxIdleConnsPerHost: conns + 4}
	client := &http.Client{Transport: tr, Timeout: time.Minute}
	stop := func() {
		tr.CloseIdleConnections()
		cancel()
		<-served
	}
	return "http://" + ln.Addr().String(), client, stop, nil
}

func b9Threads(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("b9-t%04d", i)
	}
	return out
}

// b9Drive runs op from n writers untimed for a tenth of dur, then in a
// closed loop until dur has passed or maxOps operations completed, and
// returns the count and the latencies of the timed part, profiled when
// prof is not nil, and the fsyncs of db's log over it (db may be nil).
func b9Drive(ctx context.Context, n int, dur time.Duration, maxOps int64, db *pebble.DB, prof *cellProfile, op func(w, k int) error) (b9Load, error) {
	if _, err := b9Loop(ctx, n, dur/10, maxOps/10, op); err != nil {
		return b9Load{}, err
	}
	if err := prof.start(); err != nil {
		return b9Load{}, err
	}
	var s0 walSnapshot
	if db != nil {
		s0 = readWALSync(db)
	}
	l, err := b9Loop(ctx, n, dur, maxOps, op)
	if db != nil {
		_, l.syncs = walSyncPercentile(s0, readWALSync(db), 50)
	}
	return l, errors.Join(err, prof.stop())
}

func b9Loop(ctx context.Context, n int, dur time.Duration, maxOps int64, op func(w, k int) error) (b9Load, error) {
	var (
		done   atomic.Int64
		mu     sync.Mutex
		all    []time.Duration
		firstE error
		wg     sync.WaitGroup
	)
	deadline := time.Now().Add(dur)
	start := time.Now()
	for w := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			lat := make([]time.Duration, 0, 1024)
			for k := 0; ctx.Err() == nil && time.Now().Before(deadline); k++ {
				if done.Add(1) > maxOps {
					break
				}
				t0 := time.Now()
				if err := op(w, k); err != nil {
					mu.Lock()
					if firstE == nil {
						firstE = err
					}
					mu.Unlock()
					break
				}
				lat = append(lat, time.Since(t0))
			}
			mu.Lock()
			all = append(all, lat...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	if firstE != nil {
		return b9Load{}, firstE
	}
	if err := ctx.Err(); err != nil {
		return b9Load{}, err
	}
	slices.Sort(all)
	return b9Load{n: int64(len(all)), dur: elapsed, lat: all}, nil
}

// b9Listing seeds threads of which a fraction is soft-deleted (spread
// evenly, so every page of live threads lies among deleted ones) and times
// GET /v1/threads pages through the real server.
func b9Listing(ctx context.Context, b *bench, sec *section) error {
	n := b.scaled(200_000, 5_000)
	const pages = 200
	t := table{
		caption: fmt.Sprintf("Listing: `GET /v1/threads?limit=100` over %s threads (flushed and compacted), the first page 21 times (median) and %d pages at cursors spread over the live threads, through the real server, one client.", count(int64(n)), pages),
		header:  []string{"deleted", "live threads", "first page", "page p50", "page p99"},
	}
	worst, worstP99 := time.Duration(0), time.Duration(0)
	for _, frac := range []float64{0, 0.99} {
		if err := ctx.Err(); err != nil {
			return err
		}
		first, p50, p99, live, err := b9ListOnce(ctx, b, n, frac, pages)
		if err != nil {
			return fmt.Errorf("listing at %s deleted: %w", fmtPct(frac), err)
		}
		worst, worstP99 = max(worst, p50, first), max(worstP99, p99)
		b.goBench(fmt.Sprintf("B9/listing/deleted=%g", frac), int64(pages),
			benchMetric{float64(p50) / 1e3, "p50-us"}, benchMetric{float64(p99) / 1e3, "p99-us"})
		t.add(fmtPct(frac), count(int64(live)), fmtDur(first), fmtDur(p50), fmtDur(p99))
		b.logf("B9 listing %s deleted: first %s, p50 %s, p99 %s", fmtPct(frac), fmtDur(first), fmtDur(p50), fmtDur(p99))
	}
	sec.tables = append(sec.tables, t)
	sec.addTarget("thread listing page, any deleted fraction (median)", "≤ 5 ms",
		fmt.Sprintf("%s (p99 %s)", fmtDur(worst), fmtDur(worstP99)), worst <= 5*time.Millisecond)
	return nil
}

func b9ListOnce(ctx context.Context, b *bench, n int, frac float64, pages int) (first, p50, p99 time.Duration, live int, err error) {
	dir := b.dir("b9", fmt.Sprintf("list-%d-%g", n, frac))
	sd, err := openSeeded(dir)
	if err != nil {
		return 0, 0, 0, 0, err
	}
	defer sd.close()
	now := time.Now().UnixNano()
	bulk := sd.st.NewBulk()
	var liveIDs []string
	every := 0
	if frac > 0 {
		every = int(1 / (1 - frac)) // one live thread in every `every`
	}
	for i := range n {
		t := store.Thread{ID: fmt.Sprintf("b9-l%07d", i), Title: "a thread", Author: "writer", CreatedTS: now, UpdatedTS: now}
		if every > 0 && i%every != 0 {
			t.Deleted, t.DeletedTS = true, now
		} else {
			liveIDs = append(liveIDs, t.ID)
		}
		if err := bulk.PutThread(t); err != nil {
			return 0, 0, 0, 0, err
		}
	}
	if err := bulk.Close(); err != nil {
		return 0, 0, 0, 0, err
	}
	if err := sd.settle(ctx); err != nil {
		return 0, 0, 0, 0, err
	}
	url, client, stop, err := b9Serve(ctx, sd.st, 1)
	if err != nil {
		return 0, 0, 0, 0, err
	}
	defer stop()

	get := func(cursor string) (time.Duration, string, error) {
		t0 := time.Now()
		resp, err := client.Get(url + "/v1/threads?limit=100&cursor=" + neturl.QueryEscape(cursor))
		if err != nil {
			return 0, "", err
		}
		var out struct {
			Threads    []json.RawMessage `json:"threads"` // counted, not read
			NextCursor string            `json:"next_cursor"`
		}
		err = json.NewDecoder(resp.Body).Decode(&out)
		resp.Body.Close()
		d := time.Since(t0)
		if err != nil {
			return 0, "", err
		}
		if resp.StatusCode != http.StatusOK || (len(out.Threads) == 0 && cursor == "") {
			return 0, "", errors.New("listing answered " + resp.Status + " with no threads")
		}
		return d, out.NextCursor, nil
	}
	// The cursors are the server's own, one per page of a walk over the
	// listing (which warms the connection): their form is the server's.
	var cursors []string
	for c := ""; ; {
		_, next, err := get(c)
		if err != nil {
			return 0, 0, 0, 0, err
		}
		if next == "" {
			break
		}
		cursors = append(cursors, next)
		c = next
	}
	if len(cursors) == 0 {
		cursors = []string{""}
	}
	firsts := make([]time.Duration, 0, 21)
	for range 21 {
		d, _, err := get("")
		if err != nil {
			return 0, 0, 0, 0, err
		}
		firsts = append(firsts, d)
	}
	first = medianDur(firsts)
	lat := make([]time.Duration, 0, pages)
	for i := range pages {
		d, _, err := get(cursors[(i*7919)%len(cursors)])
		if err != nil {
			return 0, 0, 0, 0, err
		}
		lat = append(lat, d)
	}
	slices.Sort(lat)
	return first, percentile(lat, 50), percentile(lat, 99), len(liveIDs), nil
}
