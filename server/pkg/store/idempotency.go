package store

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/cockroachdb/pebble/v2"
)

// Idempotency keys (spec §7, the Idempotency-Key header): what a keyed
// request answered, kept so that the same request sent again answers the
// same and changes nothing. A key's records are written in the batch of
// the write they answer (apply), so they are durable exactly when it is:
// no extra commit, no extra sync.
//
//	sys:idem:k:<scope>:<key>           the key's record (idemRecord): no content
//	sys:idem:o:<scope>:<at 20d>:<key>  a scope's keys, oldest first (bound, expiry)
//	thread:<tid>:idem:<scope>:<key>    the thread a thread answer returned, as
//	                                   stored: sealed like the thread's metadata
//	                                   and purged with the thread
//
// A message answer holds no content: it names the version it returned,
// read again for a replay. Versions never change, so the replay is the
// same answer; a purged or erased message takes its answer with it. Scope
// and key are the caller's digests (hex), never a credential or a key.
const (
	idemKeyNS        = "sys:idem:k:"
	idemAgeNS        = "sys:idem:o:"
	idemThreadSuffix = "idem:"
)

// ErrInvalidIdempotency refuses a scope or key that is not a digest in hex.
var ErrInvalidIdempotency = errors.New("invalid idempotency key digest")

// Idempotent is a keyed request being served: the API puts it in the
// request's context (WithIdempotent), and the write that answers the
// request records it.
type Idempotent struct {
	// Scope is a digest of who asks (their credential); Key a digest of
	// the Idempotency-Key; both hex, at most 64 characters.
	Scope, Key string
	// Fingerprint is a digest of the request (method, path, body): the
	// same key with another fingerprint is another request.
	Fingerprint string
	// Status is the status of the answer the write gives.
	Status int
	// Inline, when set, is an answer that holds no content (an erasure's
	// IDs), kept as it is in the key's record.
	Inline json.RawMessage
	// Stored is set once a write carried the key's records to its commit.
	Stored bool
}

type idemCtxKey struct{}

// WithIdempotent returns ctx carrying p: the store write that answers the
// request records p in its batch.
func WithIdempotent(ctx context.Context, p *Idempotent) context.Context {
	return context.WithValue(ctx, idemCtxKey{}, p)
}

func idempotentFrom(ctx context.Context) *Idempotent {
	p, _ := ctx.Value(idemCtxKey{}).(*Idempotent)
	return p
}

// Now is the store's clock (Options.Now): the time its idempotency keys
// are stored at, and so the clock they expire by.
func (s *Store) Now() time.Time { return s.now() }

// SetAnswer makes v (encoded as JSON) the answer the next write of ctx's
// keyed request keeps as it is (PutErasure), for an answer that holds no
// content and is not an item of the store. Without a key in ctx it does
// nothing.
func SetAnswer(ctx context.Context, v any) error {
	p := idempotentFrom(ctx)
	if p == nil {
		return nil
	}
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("idempotency answer: %w", err)
	}
	p.Inline = b
	return nil
}

// answer is what a write answers, for its key's record: a thread (its
// record as written) or a message version.
type answer struct {
	inline  bool // Idempotent.Inline
	thread  *Thread
	tid     string
	mid     string
	version int64
}

// idemRecord is the value of sys:idem:k:<scope>:<key>.
type idemRecord struct {
	Fingerprint string          `json:"fp"`
	Status      int             `json:"status"`
	At          int64           `json:"at"`
	Thread      string          `json:"tid,omitempty"`
	Message     string          `json:"mid,omitempty"`
	Version     int64           `json:"version,omitempty"`
	Inline      json.RawMessage `json:"inline,omitempty"`
}

func validDigest(s string) bool {
	if len(s) == 0 || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

func idemKey(scope, key string) []byte {
	return []byte(idemKeyNS + scope + ":" + key)
}

func idemAgePrefix(scope string) []byte { return []byte(idemAgeNS + scope + ":") }

func idemAgeKey(scope string, at int64, key string) []byte {
	b := appendPadded(idemAgePrefix(scope), at)
	b = append(b, ':')
	return append(b, key...)
}

func idemThreadKey(tid, scope, key string) []byte {
	b := append(threadPrefix(tid), idemThreadSuffix...)
	return append(append(append(b, scope...), ':'), key...)
}

// recordAnswer adds p's records to the batch of the write that answers it
// (apply). The key's record goes in even when encoding the answer fails:
// never, since every field is a string or a number.
func (s *Store) recordAnswer(b *pebble.Batch, p *Idempotent, a *answer) {
	if p.Stored || !validDigest(p.Scope) || !validDigest(p.Key) {
		return // one answer per request
	}
	rec := idemRecord{Fingerprint: p.Fingerprint, Status: p.Status, At: s.now().UnixNano(), Inline: p.Inline}
	switch {
	case a.inline:
		if p.Inline == nil {
			return // nothing set the answer: the key is not kept
		}
	case a.thread != nil:
		rec.Thread = a.thread.ID
		_ = b.Set(idemThreadKey(a.thread.ID, p.Scope, p.Key), appendThreadJSON(nil, *a.thread), nil)
	case a.mid != "":
		rec.Thread, rec.Message, rec.Version = a.tid, a.mid, a.version
	}
	v, err := json.Marshal(rec)
	if err != nil {
		return
	}
	_ = b.Set(idemKey(p.Scope, p.Key), v, nil)
	_ = b.Set(idemAgeKey(p.Scope, rec.At, p.Key), nil, nil)
	p.Stored = true
}

// Remembered is what an idempotency key answered.
type Remembered struct {
	Fingerprint string
	Status      int
	At          int64
	// Inline, when set, is the answer as it was sent.
	Inline json.RawMessage
	// Thread or Message is the answer; Gone says the item it returned was
	// purged or erased since (its answer went with it).
	Thread  *Thread
	Message *Message
	Gone    bool
}

// Remember returns what key answered for scope, unless it was stored
// before notBefore (Unix ns: the key expired); found false when there is
// no such key.
func (s *Store) Remember(ctx context.Context, scope, key string, notBefore int64) (r Remembered, found bool, err error) {
	if err := ctx.Err(); err != nil {
		return r, false, err
	}
	if !validDigest(scope) || !validDigest(key) {
		return r, false, ErrInvalidIdempotency
	}
	v, err := s.get(idemKey(scope, key))
	if errors.Is(err, ErrNotFound) {
		return r, false, nil
	}
	if err != nil {
		return r, false, err
	}
	var rec idemRecord
	if err := json.Unmarshal(v, &rec); err != nil {
		return r, false, fmt.Errorf("idempotency key record: %w: %w", ErrMalformed, err)
	}
	if rec.At < notBefore {
		return r, false, nil
	}
	r = Remembered{Fingerprint: rec.Fingerprint, Status: rec.Status, At: rec.At, Inline: rec.Inline}
	switch {
	case rec.Message != "":
		m, ok, err := s.answeredVersion(ctx, rec)
		if err != nil {
			return r, false, err
		}
		r.Message, r.Gone = &m, !ok
	case rec.Thread != "":
		t, ok, err := s.answeredThread(ctx, rec.Thread, scope, key)
		if err != nil {
			return r, false, err
		}
		r.Thread, r.Gone = &t, !ok
	}
	return r, true, nil
}

// answeredVersion reads the version a message answer returned; false
// when it is gone or can no longer be opened.
func (s *Store) answeredVersion(ctx context.Context, rec idemRecord) (Message, bool, error) {
	v, err := s.get(versionKey(rec.Message, rec.Version))
	if errors.Is(err, ErrNotFound) {
		return Message{}, false, nil
	}
	if err != nil {
		return Message{}, false, err
	}
	m, err := decodeMessage(rec.Message, rec.Version, v)
	if err != nil {
		return Message{}, false, err
	}
	if m.Thread != rec.Thread {
		return Message{}, false, nil
	}
	if err := s.openMessage(ctx, &m); err != nil {
		return Message{}, false, err
	}
	r, err := newVersionReader(s.db)
	if err != nil {
		return Message{}, false, err
	}
	defer r.close()
	if m.CreatedTS, err = r.created(m.ID); err != nil {
		return Message{}, false, err
	}
	return m, !m.Unreadable, nil
}

// answeredThread reads the thread a thread answer returned; false when it
// is gone (purged with its thread) or can no longer be opened.
func (s *Store) answeredThread(ctx context.Context, tid, scope, key string) (Thread, bool, error) {
	v, err := s.get(idemThreadKey(tid, scope, key))
	if errors.Is(err, ErrNotFound) {
		return Thread{}, false, nil
	}
	if err != nil {
		return Thread{}, false, err
	}
	t, err := decodeThread(tid, v)
	if err != nil {
		return Thread{}, false, err
	}
	if err := s.openThread(ctx, &t); err != nil {
		return Thread{}, false, err
	}
	return t, !t.Unreadable, nil
}

// idemScopes counts each scope's keys, so that TrimIdempotency knows when
// a scope passes its bound without reading its keys. A scope is counted
// from the database the first time it is asked for.
type idemScopes struct {
	mu     sync.Mutex
	counts map[string]int
	// term is the lease the counts were kept under (replicated stores):
	// another leader's keys were not counted here, so a new lease counts
	// again.
	term uint64
}

// TrimIdempotency counts one more key for scope and, when that puts it
// over max, drops its oldest keys down to max less a sixteenth, so that
// the next writes do not each drop one. Call it once after every write
// that stored a key (Idempotent.Stored). It returns how many it dropped.
func (s *Store) TrimIdempotency(ctx context.Context, scope string, max int) (int, error) {
	if !validDigest(scope) || max < 1 {
		return 0, ErrInvalidIdempotency
	}
	c := &s.idemScopes
	c.mu.Lock()
	defer c.mu.Unlock()
	if r := s.repl.Load(); r != nil {
		if term := r.p.Lease(); term != c.term {
			c.counts, c.term = nil, term
		}
	}
	n, ok := c.counts[scope]
	if ok {
		n++
	} else {
		counted, err := s.countRange(idemAgePrefix(scope), upperBound(idemAgePrefix(scope)))
		if err != nil {
			return 0, err
		}
		n = counted
	}
	if c.counts == nil {
		c.counts = make(map[string]int)
	}
	c.counts[scope] = n
	if n <= max {
		return 0, nil
	}
	dropped, err := s.dropIdempotency(ctx, idemAgePrefix(scope), n-max+max/16, -1)
	c.counts[scope] = n - dropped
	return dropped, err
}

// ExpireIdempotency drops every key stored before cutoff (Unix ns), up to
// limit of them; it returns how many it dropped. Each scope's keys are in
// time order, so it reads only the expired ones and one more per scope.
func (s *Store) ExpireIdempotency(ctx context.Context, cutoff int64, limit int) (int, error) {
	n, err := s.dropIdempotency(ctx, []byte(idemAgeNS), limit, cutoff)
	if n > 0 {
		// Counts are per scope: the next trim counts again.
		s.idemScopes.mu.Lock()
		s.idemScopes.counts = nil
		s.idemScopes.mu.Unlock()
	}
	return n, err
}

// dropIdempotency deletes up to limit keys under the age index prefix, in
// time order within each scope, stopping in a scope at its first key not
// before cutoff (cutoff < 0: no cutoff). One unsynced batch: a key that a
// crash brings back is dropped again.
func (s *Store) dropIdempotency(ctx context.Context, prefix []byte, limit int, cutoff int64) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: upperBound(prefix)})
	if err != nil {
		return 0, err
	}
	defer it.Close()
	b := s.db.NewBatch()
	n := 0
	for valid := it.First(); valid && n < limit; {
		rest := it.Key()[len(idemAgeNS):]
		i := bytes.IndexByte(rest, ':')
		if i <= 0 || len(rest) < i+1+padWidth+2 {
			valid = it.Next()
			continue
		}
		scope := string(rest[:i])
		at, ok := parsePadded(rest[i+1 : i+1+padWidth])
		if ok && cutoff >= 0 && at >= cutoff {
			// The rest of this scope is newer: on to the next scope.
			valid = it.SeekGE([]byte(idemAgeNS + scope + ";"))
			continue
		}
		key := string(rest[i+2+padWidth:])
		_ = b.Delete(it.Key(), nil)
		// A key stored again after it expired has a newer record: this
		// entry is then all that is left of the old one.
		var rec idemRecord
		if v, err := s.get(idemKey(scope, key)); err == nil && json.Unmarshal(v, &rec) == nil && rec.At == at {
			if rec.Thread != "" && rec.Message == "" && ValidateID(rec.Thread) == nil {
				_ = b.Delete(idemThreadKey(rec.Thread, scope, key), nil)
			}
			_ = b.Delete(idemKey(scope, key), nil)
		}
		n++
		valid = it.Next()
	}
	if err := it.Error(); err != nil {
		_ = b.Close()
		return 0, err
	}
	if n == 0 {
		_ = b.Close()
		return 0, nil
	}
	if err := s.apply(ctx, write{kind: writeState, batch: b}); err != nil {
		return 0, fmt.Errorf("drop idempotency keys: %w", err)
	}
	return n, nil
}

// countRange counts the keys in [lower, upper).
func (s *Store) countRange(lower, upper []byte) (int, error) {
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: upper})
	if err != nil {
		return 0, err
	}
	n := 0
	for valid := it.First(); valid; valid = it.Next() {
		n++
	}
	if err := it.Close(); err != nil {
		return 0, err
	}
	return n, nil
}
