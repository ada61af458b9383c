// Package seed fills a database with realistic chat data for demos and
// benchmarks (`progressdb seed`, spec §9): threads with participants and
// titles, messages with JSON bodies and edits, and soft deletions dated in
// the past so that retention has work to do.
//
// The data is a pure function of the options: the same Seed, Now and sizes
// give the same records on a fresh database.
package seed

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/progressdb/progressdb/server/pkg/store"
)

// DefaultDeletedMessages is the fraction of messages in live threads that
// are tombstoned when Options.DeletedMessages is zero.
const DefaultDeletedMessages = 0.05

// Sentinel errors.
var (
	ErrInvalidOptions = errors.New("invalid seed options")
	// ErrPrefixInUse means an explicit Prefix was already used in this
	// database; seeding again with it would overwrite the earlier records.
	ErrPrefixInUse = errors.New("seed prefix already in use")
)

// Options size and shape the data set.
type Options struct {
	Threads  int // threads to create
	Messages int // messages per thread
	Versions int // versions per message, the original included (0 means 1)

	// Deleted is the fraction of threads soft-deleted, spread evenly.
	Deleted float64
	// DeletedAge is how long ago deletions happened: deleted_ts is
	// Now - DeletedAge - up to an hour of jitter.
	DeletedAge time.Duration
	// DeletedMessages is the fraction of messages in live threads that end
	// in a tombstone, spread evenly. 0 means DefaultDeletedMessages; a
	// negative value means none.
	DeletedMessages float64
	// LegalHold is the probability that a thread (deleted or not) is on
	// legal hold.
	LegalHold float64

	// Seed makes the data reproducible.
	Seed int64
	// Prefix starts every ID. When empty it is derived from Seed ("s42"),
	// with a suffix (".2", ".3", …) if the database already holds a seed
	// with that prefix, so repeated seeds never overwrite each other.
	Prefix string
	// Now anchors every timestamp; time.Now() when zero.
	Now time.Time

	// Progress, when set, is called about once per second and once at the
	// end.
	Progress func(Progress)
	// Clock times progress reports; time.Now when nil.
	Clock func() time.Time
}

// Stats counts what Run wrote.
type Stats struct {
	Prefix             string
	Threads            int64
	DeletedThreads     int64
	LegalHolds         int64
	Messages           int64
	Versions           int64 // every stored version, tombstones included
	TombstonedMessages int64
	Keys               int64 // keys written, per the store's key layout
	Elapsed            time.Duration
}

// Run writes the data set through a store.Bulk and returns what it wrote.
// On cancellation it commits what was generated so far and returns the
// context's error with the partial counts.
func Run(ctx context.Context, s *store.Store, o Options) (Stats, error) {
	o, err := o.withDefaults()
	if err != nil {
		return Stats{}, err
	}
	prefix, err := choosePrefix(ctx, s, o)
	if err != nil {
		return Stats{}, err
	}
	st := Stats{Prefix: prefix}
	g := newGenerator(o, prefix)
	p := newProgressReporter(o, int64(o.Threads)*int64(1+o.Messages))
	b := s.NewBulk()

	err = seedThreads(ctx, b, g, o, &st, p)
	if cerr := b.Close(); cerr != nil && err == nil {
		err = fmt.Errorf("seed: commit: %w", cerr)
	}
	st.Elapsed = p.finish(st.Threads + st.Messages)
	return st, err
}

func seedThreads(ctx context.Context, b *store.Bulk, g *generator, o Options, st *Stats, p *progressReporter) error {
	for n := 1; n <= o.Threads; n++ {
		if err := ctx.Err(); err != nil {
			return err
		}
		// The thread goes first, so an interrupted seed leaves a thread with
		// fewer messages, never messages without a thread.
		t := g.thread(n)
		if err := b.PutThread(t.meta); err != nil {
			return fmt.Errorf("seed: thread %s: %w", t.meta.ID, err)
		}
		st.Threads++
		st.Keys++
		if t.meta.Deleted {
			st.DeletedThreads++
			st.Keys++ // deletion index entry
		}
		if t.meta.LegalHold {
			st.LegalHolds++
		}
		p.tick(st.Threads + st.Messages)

		live := false
		for j := range t.created {
			versions := g.message(t, j)
			if err := b.PutMessage(versions); err != nil {
				return fmt.Errorf("seed: message %s: %w", versions[0].ID, err)
			}
			st.Messages++
			st.Versions += int64(len(versions))
			st.Keys += 1 + int64(len(versions)) // log entry and versions
			if versions[len(versions)-1].Deleted {
				st.TombstonedMessages++
				st.Keys++ // deletion index entry
			} else {
				live = true
			}
			p.tick(st.Threads + st.Messages)
		}
		if live {
			st.Keys++ // the thread's live count (its age and count index entries are not counted)
		}
	}
	return nil
}

func (o Options) withDefaults() (Options, error) {
	if o.Versions == 0 {
		o.Versions = 1
	}
	if o.DeletedMessages == 0 {
		o.DeletedMessages = DefaultDeletedMessages
	}
	if o.DeletedMessages < 0 {
		o.DeletedMessages = 0
	}
	if o.Now.IsZero() {
		o.Now = time.Now()
	}
	if o.Clock == nil {
		o.Clock = time.Now
	}
	switch {
	case o.Threads < 0 || o.Messages < 0 || o.Versions < 0:
		return o, fmt.Errorf("%w: threads, messages and versions cannot be negative", ErrInvalidOptions)
	case !isFraction(o.Deleted) || !isFraction(o.DeletedMessages) || !isFraction(o.LegalHold):
		return o, fmt.Errorf("%w: fractions must be from 0 to 1", ErrInvalidOptions)
	case o.DeletedAge < 0:
		return o, fmt.Errorf("%w: deleted age cannot be negative", ErrInvalidOptions)
	}
	return o, nil
}

func isFraction(f float64) bool { return f >= 0 && f <= 1 }

// evenly reports whether item n (1-based) is one of the fraction f of items,
// spread evenly: exactly floor(N*f) of the first N items are chosen.
func evenly(n int64, f float64) bool {
	return int64(float64(n)*f) > int64(float64(n-1)*f)
}

// newRand is the generator's only source of randomness.
func newRand(seed int64) *rand.Rand {
	const stream = 0x70726f6772657373 // any fixed constant; part of the data's identity
	return rand.New(rand.NewPCG(uint64(seed), stream))
}
