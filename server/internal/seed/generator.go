package seed

import (
	"encoding/json"
	"math/rand/v2"
	"time"

	"github.com/progressdb/progressdb/server/pkg/store"
)

// Time layout of the data set, ending at the horizon (Now - DeletedAge -
// maxJitter): threads are created across history, their messages follow
// until the horizon, and deletions fall between the horizon and
// Now - DeletedAge, after everything they delete.
const (
	history   = 30 * 24 * time.Hour
	maxJitter = time.Hour
	maxEdit   = 10 * time.Minute // edits follow the original within this
)

// generator draws every record from one PCG source, in a fixed order.
type generator struct {
	o       Options
	prefix  string
	rng     *rand.Rand
	horizon int64
	msgSeq  int64 // messages in live threads so far, for even tombstoning
}

func newGenerator(o Options, prefix string) *generator {
	return &generator{
		o:       o,
		prefix:  prefix,
		rng:     newRand(o.Seed),
		horizon: o.Now.Add(-o.DeletedAge - maxJitter).UnixNano(),
	}
}

// threadPlan is one thread's metadata and the timeline of its messages.
type threadPlan struct {
	n            int
	meta         store.Thread
	participants []string
	created      []int64 // creation time of each message, increasing
	editStep     int64   // time between versions of a message
}

func (g *generator) thread(n int) *threadPlan {
	step := int64(history) / int64(max(g.o.Threads, 1))
	created := g.horizon - int64(history) + int64(n-1)*step + g.jitter(step/2)

	t := &threadPlan{n: n, participants: g.participants()}
	// Messages spread over the rest of the thread's life, up to the horizon.
	msgStep := (g.horizon - created) / int64(g.o.Messages+1)
	t.editStep = min(msgStep/int64(2*g.o.Versions), int64(maxEdit))
	t.created = make([]int64, g.o.Messages)
	for j := range t.created {
		t.created[j] = created + int64(j+1)*msgStep + g.jitter(msgStep/4)
	}

	updated := created
	if len(t.created) > 0 {
		updated = t.created[len(t.created)-1] + int64(g.o.Versions-1)*t.editStep
	}
	t.meta = store.Thread{
		ID:        threadID(g.prefix, n),
		Title:     g.title(),
		Author:    t.participants[0],
		CreatedTS: created,
		UpdatedTS: updated,
		LegalHold: g.rng.Float64() < g.o.LegalHold,
	}
	if evenly(int64(n), g.o.Deleted) {
		t.meta.Deleted = true
		t.meta.DeletedTS = g.deletedTS()
		t.meta.UpdatedTS = t.meta.DeletedTS
	}
	return t
}

// message returns every version of message j (0-based) of t, oldest first:
// the original, its edits, and a tombstone for the chosen messages of live
// threads (messages of deleted threads go with their thread).
func (g *generator) message(t *threadPlan, j int) []store.Message {
	id := messageID(g.prefix, t.n, j+1)
	author := t.participants[g.rng.IntN(len(t.participants))]
	tombstone := false
	if !t.meta.Deleted {
		g.msgSeq++
		tombstone = evenly(g.msgSeq, g.o.DeletedMessages)
	}
	n := g.o.Versions
	if tombstone {
		n++
	}
	versions := make([]store.Message, 0, n)
	b := g.body()
	for v := 1; v <= g.o.Versions; v++ {
		if v > 1 {
			b = g.edit(b)
		}
		versions = append(versions, store.Message{
			ID:      id,
			Thread:  t.meta.ID,
			Author:  author,
			Body:    mustJSON(b),
			TS:      t.created[j] + int64(v-1)*t.editStep,
			Version: int64(v),
		})
	}
	if tombstone {
		ts := g.deletedTS()
		versions = append(versions, store.Message{
			ID:        id,
			Thread:    t.meta.ID,
			Author:    author,
			Body:      json.RawMessage("null"), // as the store writes tombstones
			TS:        ts,
			Version:   int64(n),
			Deleted:   true,
			DeletedTS: ts,
		})
	}
	return versions
}

// deletedTS is Now - DeletedAge - jitter, always after the horizon.
func (g *generator) deletedTS() int64 {
	return g.horizon + int64(maxJitter) - g.jitter(int64(maxJitter))
}

// jitter is uniform in [0, d); 0 when d <= 0.
func (g *generator) jitter(d int64) int64 {
	if d <= 0 {
		return 0
	}
	return g.rng.Int64N(d)
}

func mustJSON(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		// Only plain structs of strings and numbers are marshalled.
		panic(err)
	}
	return b
}
