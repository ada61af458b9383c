package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/progressdb/progressdb/server/pkg/store"
)

// Retention settings of every scenario: threads deleted deletedAge ago are
// eligible under period.
const (
	period     = 30 * 24 * time.Hour
	deletedAge = 40 * 24 * time.Hour
)

// threadPlan describes one thread to seed.
type threadPlan struct {
	id       string
	messages int
	versions int
	deleted  bool // soft-deleted long enough ago to be eligible
}

// keys is the number of keys the store holds for the thread: metadata, one
// log entry per message, every version, and the deletion-index entry of a
// deleted thread.
func (p threadPlan) keys() int64 {
	n := int64(1) + int64(p.messages)*int64(1+p.versions)
	if p.deleted {
		n++
	}
	return n
}

func planKeys(ps []threadPlan, includeDeleted bool) int64 {
	var n int64
	for _, p := range ps {
		if p.deleted && !includeDeleted {
			continue
		}
		n += p.keys()
	}
	return n
}

// threadsOf returns a scenario's threads: n with the given shape, every
// eligibleEvery-th one (from the first) soft-deleted and eligible, so
// deleted and live threads interleave in the keyspace. eligibleEvery 0
// means none is deleted.
func threadsOf(prefix string, first, n, messages, versions, eligibleEvery int) []threadPlan {
	ps := make([]threadPlan, 0, n)
	for i := first; i < first+n; i++ {
		ps = append(ps, threadPlan{
			id:       fmt.Sprintf("%s-t%08d", prefix, i),
			messages: messages,
			versions: versions,
			deleted:  eligibleEvery > 0 && i%eligibleEvery == 0,
		})
	}
	return ps
}

func eligibleIDs(ps []threadPlan) []string {
	var ids []string
	for _, p := range ps {
		if p.deleted {
			ids = append(ids, p.id)
		}
	}
	return ids
}

// generator builds deterministic, realistic-looking records. Message IDs
// come from one sequence shared by all threads, handed out round-robin, so
// a thread's messages are spread over the version keyspace the way
// time-sortable IDs of concurrent conversations are.
type generator struct {
	rnd    *rand.Rand
	now    time.Time
	prefix string
	seq    int64
}

func newGenerator(prefix string, now time.Time) *generator {
	return &generator{rnd: rand.New(rand.NewPCG(1, uint64(len(prefix)))), now: now, prefix: prefix}
}

var words = strings.Fields(`the a retention purge thread message version chat
	reply hello thanks meeting tomorrow deploy review build release note ticket
	customer question answer today later ok sure link file image update status
	check done please see attached morning evening plan draft final`)

func (g *generator) text(min, max int) string {
	n := min + g.rnd.IntN(max-min+1)
	var sb strings.Builder
	for i := range n {
		if i > 0 {
			sb.WriteByte(' ')
		}
		sb.WriteString(words[g.rnd.IntN(len(words))])
	}
	return sb.String()
}

func (g *generator) body() json.RawMessage {
	b, _ := json.Marshal(map[string]string{"text": g.text(8, 24)})
	return b
}

// seed writes the threads through store.Bulk: every thread's metadata,
// then their messages round-robin. With skipDeleted the deleted threads are
// left out but still use up their message IDs, so the live data is
// byte-identical to a seeding that includes them. It returns the keys
// written.
func (g *generator) seed(ctx context.Context, b *bench, st *store.Store, label string, ps []threadPlan, skipDeleted bool) (int64, error) {
	total := planKeys(ps, !skipDeleted)
	bulk := st.NewBulk()
	closed := false
	defer func() {
		if !closed {
			_ = bulk.Close()
		}
	}()
	created := g.now.Add(-100 * 24 * time.Hour)
	deletedTS := g.now.Add(-deletedAge).UnixNano()
	var written int64
	prog := newProgress(b, label, total)
	for i, p := range ps {
		t := store.Thread{
			ID:        p.id,
			Title:     g.text(2, 6),
			Author:    fmt.Sprintf("user%03d", i%500),
			CreatedTS: created.UnixNano(),
			UpdatedTS: created.UnixNano(),
		}
		if p.deleted {
			t.Deleted = true
			t.DeletedTS = deletedTS + int64(i)*int64(time.Millisecond)
			t.UpdatedTS = t.DeletedTS
		}
		if p.deleted && skipDeleted {
			continue // generated all the same, so the random stream stays in step
		}
		if p.deleted {
			written++
		}
		if err := bulk.PutThread(t); err != nil {
			return written, fmt.Errorf("seed thread %s: %w", p.id, err)
		}
		written++
	}
	maxMessages := 0
	for _, p := range ps {
		maxMessages = max(maxMessages, p.messages)
	}
	versions := make([]store.Message, 0, 8)
	for r := range maxMessages {
		if err := ctx.Err(); err != nil {
			return written, err
		}
		for _, p := range ps {
			if r >= p.messages {
				continue
			}
			g.seq++
			mid := fmt.Sprintf("%s-m%010d", g.prefix, g.seq)
			ts := created.UnixNano() + g.seq*int64(time.Millisecond)
			author := fmt.Sprintf("user%03d", g.rnd.IntN(500))
			versions = versions[:0]
			for v := 1; v <= p.versions; v++ {
				versions = append(versions, store.Message{
					ID:      mid,
					Thread:  p.id,
					Author:  author,
					Body:    g.body(),
					TS:      ts + int64(v-1)*int64(time.Second),
					Version: int64(v),
				})
			}
			if p.deleted && skipDeleted {
				continue
			}
			if err := bulk.PutMessage(versions); err != nil {
				return written, fmt.Errorf("seed message %s: %w", mid, err)
			}
			written += int64(1 + p.versions)
			prog.update(written)
		}
	}
	closed = true
	if err := bulk.Close(); err != nil {
		return written, fmt.Errorf("seed: %w", err)
	}
	prog.done(written)
	return written, nil
}

// progress reports long work on stderr every few seconds: done, rate and
// an estimate of the time left.
type progress struct {
	b            *bench
	label        string
	total        int64
	start, last  time.Time
	lastReported int64
}

func newProgress(b *bench, label string, total int64) *progress {
	now := time.Now()
	return &progress{b: b, label: label, total: total, start: now, last: now}
}

func (p *progress) update(done int64) {
	if done-p.lastReported < 10000 {
		return
	}
	p.lastReported = done
	now := time.Now()
	if now.Sub(p.last) < 3*time.Second {
		return
	}
	p.last = now
	el := now.Sub(p.start).Seconds()
	rate := float64(done) / el
	left := "?"
	if rate > 0 && p.total > done {
		left = time.Duration(float64(p.total-done) / rate * float64(time.Second)).Round(time.Second).String()
	}
	p.b.logf("%s: %s of %s keys (%s keys/s, ~%s left)", p.label, count(done), count(p.total), count(int64(rate)), left)
}

func (p *progress) done(n int64) {
	el := time.Since(p.start)
	p.b.logf("%s: %s keys in %s (%s keys/s)", p.label, count(n), el.Round(100*time.Millisecond), count(int64(float64(n)/el.Seconds())))
}
