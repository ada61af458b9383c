package store

import (
	crand "crypto/rand"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"
)

// idRule is the ID grammar, quoted in every rejection.
const idRule = "^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$"

const maxIDLen = 128

// ValidateID checks an ID against ^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$; the
// error wraps ErrInvalidID and names the rule. The grammar keeps ':' out of
// IDs, which is what makes key prefixes unambiguous.
func ValidateID(id string) error {
	switch {
	case id == "":
		return fmt.Errorf("%w: empty; ids must match %s", ErrInvalidID, idRule)
	case len(id) > maxIDLen:
		return fmt.Errorf("%w: %d bytes, longer than %d; ids must match %s", ErrInvalidID, len(id), maxIDLen, idRule)
	case !isAlnum(id[0]):
		return fmt.Errorf("%w: must start with a letter or digit; ids must match %s", ErrInvalidID, idRule)
	}
	for i := 1; i < len(id); i++ {
		if c := id[i]; !isAlnum(c) && c != '.' && c != '_' && c != '-' {
			return fmt.Errorf("%w: byte %d is not one of A-Z a-z 0-9 . _ -; ids must match %s", ErrInvalidID, i, idRule)
		}
	}
	return nil
}

func isAlnum(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z'
}

// crockford is Crockford's base32 alphabet; it is in ASCII order, so IDs of
// equal length sort like the numbers they encode.
const crockford = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"

// idGen makes ULID-like IDs: 48 bits of Unix milliseconds then 80 random
// bits, 26 Crockford base32 characters. Within one millisecond (or when the
// clock steps back) the random part is incremented instead of redrawn, so
// IDs from one Store are strictly increasing.
type idGen struct {
	now func() time.Time

	mu     sync.Mutex
	rng    *rand.Rand
	lastMS uint64
	hi     uint16 // top 16 of the 80 random bits
	lo     uint64 // low 64 of the 80 random bits
}

func newIDGen(now func() time.Time) *idGen {
	var seed [32]byte
	// crypto/rand.Read never fails on supported platforms.
	_, _ = crand.Read(seed[:])
	return &idGen{now: now, rng: rand.New(rand.NewChaCha8(seed))}
}

func (g *idGen) next() string {
	g.mu.Lock()
	ms := uint64(max(g.now().UnixMilli(), 0)) & (1<<48 - 1)
	if ms > g.lastMS {
		g.lastMS = ms
		g.hi = uint16(g.rng.Uint32())
		g.lo = g.rng.Uint64()
	} else {
		// Same (or an earlier) millisecond: count up from the last ID.
		g.lo++
		if g.lo == 0 {
			g.hi++
			if g.hi == 0 {
				g.lastMS++ // 2^80 IDs in one millisecond: borrow the next one
			}
		}
	}
	// 128 bits as two words: ms(48) | hi(16) and lo(64).
	top := g.lastMS<<16 | uint64(g.hi)
	bottom := g.lo
	g.mu.Unlock()

	var out [26]byte
	for i := len(out) - 1; i >= 0; i-- {
		out[i] = crockford[bottom&31]
		bottom = bottom>>5 | top<<59
		top >>= 5
	}
	return string(out[:])
}

// NewID returns a new time-sortable ID (ULID-like, Crockford base32).
func (s *Store) NewID() string { return s.ids.next() }

// IDSource makes IDs like Store.NewID's without a store: a cluster node
// picks a new thread's ID before it knows the shard, which the ID decides.
type IDSource struct{ g *idGen }

// NewIDSource returns a source of new IDs on the system clock.
func NewIDSource() *IDSource { return &IDSource{g: newIDGen(time.Now)} }

// Next returns a new time-sortable ID.
func (s *IDSource) Next() string { return s.g.next() }
