package api

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/progressdb/progressdb/server/internal/wire"
	"github.com/progressdb/progressdb/server/pkg/store"
)

// Safe retries (spec §7): a POST or PATCH of /v1, or POST /admin/erasures,
// that carries an Idempotency-Key (IETF httpapi draft "The
// Idempotency-Key HTTP Header Field") answers, when sent again with the
// same key by the same caller, exactly as the first did and changes
// nothing. The store keeps what the key answered in the commit of the
// write it answered (store/idempotency.go); this file reads the header,
// replays, and keeps two sends of one key from running at once.

const (
	// DefaultIdempotencyTTL is how long a key is kept when
	// Options.IdempotencyTTL is 0 (PROGRESSDB_IDEMPOTENCY_TTL).
	DefaultIdempotencyTTL = 24 * time.Hour
	// DefaultIdempotencyKeys is how many keys one caller (API key or admin
	// token) keeps when Options.IdempotencyKeys is 0; the oldest go first.
	DefaultIdempotencyKeys = 100_000
	// DefaultIdempotencyWait is how long a request waits for another
	// still running with its key, when Options.IdempotencyWait is 0,
	// before it answers 409 idempotency_key_in_flight.
	DefaultIdempotencyWait = 5 * time.Second
	// maxIdempotencyKey is the longest key accepted, in bytes.
	maxIdempotencyKey = 255
	// expireBatch is the most expired keys one sweep drops.
	expireBatch = 1000
)

// replayedHeader marks an answer given again for a key.
const replayedHeader = "Idempotent-Replayed"

var errKeyInFlight = &httpError{http.StatusConflict, CodeIdempotencyKeyInFlight,
	"a request with this Idempotency-Key is still being served: send it again after Retry-After seconds"}

// keyed reports whether the route takes an Idempotency-Key: every POST and
// PATCH of /v1, and POST /admin/erasures. Not the attachment routes yet:
// an upload is streamed, never held whole to be fingerprinted.
func keyed(r *http.Request) bool {
	switch r.Method {
	case http.MethodPost, http.MethodPatch:
	default:
		return false
	}
	if strings.Contains(r.Pattern, "/attachments") {
		return false
	}
	return strings.HasPrefix(r.Pattern, r.Method+" /v1/") || r.Pattern == "POST /admin/erasures"
}

// answerStatus is the status of a keyed route's answer when it writes.
func answerStatus(pattern string) int {
	switch pattern {
	case "POST /v1/threads", "POST /v1/threads/{tid}/messages":
		return http.StatusCreated
	case "POST /admin/erasures":
		return http.StatusAccepted
	}
	return http.StatusOK
}

// parseIdempotencyKey reads the header's value: a structured-field string
// ("…", RFC 8941, as the draft has it) or, as many clients send it, the
// bare token; printable ASCII, 1 to 255 bytes.
func parseIdempotencyKey(v string) (string, error) {
	bad := func(rule string) error {
		return badRequest(CodeInvalidIdempotencyKey, "Idempotency-Key: %s", rule)
	}
	if strings.HasPrefix(v, `"`) {
		if len(v) < 2 || !strings.HasSuffix(v, `"`) {
			return "", bad(`a quoted key must end with '"'`)
		}
		var b strings.Builder
		for i := 1; i < len(v)-1; i++ {
			c := v[i]
			switch {
			case c == '\\' && i+1 < len(v)-1 && (v[i+1] == '"' || v[i+1] == '\\'):
				i++
				b.WriteByte(v[i])
			case c == '\\' || c == '"' || c < 0x20 || c > 0x7e:
				return "", bad(`a quoted key holds printable ASCII, with '"' and '\' escaped by '\'`)
			default:
				b.WriteByte(c)
			}
		}
		v = b.String()
	} else {
		for i := 0; i < len(v); i++ {
			if v[i] <= 0x20 || v[i] > 0x7e {
				return "", bad("a key is printable ASCII without spaces (or a quoted string)")
			}
		}
	}
	switch {
	case v == "":
		return "", bad("the key is empty")
	case len(v) > maxIdempotencyKey:
		return "", bad(fmt.Sprintf("the key is %d bytes; the limit is %d", len(v), maxIdempotencyKey))
	}
	return v, nil
}

func digest(parts ...string) string {
	h := sha256.New()
	for _, p := range parts {
		// Length-prefixed, so that no two lists of parts hash alike.
		fmt.Fprintf(h, "%d:", len(p))
		io.WriteString(h, p)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// callerScope is a digest of the credential a request was let in with:
// keys are the caller's own, and the credential itself is never stored.
func callerScope(r *http.Request) string {
	token, _ := bearerToken(r)
	area := "v1"
	if strings.HasPrefix(r.URL.Path, "/admin/") {
		area = "admin"
	}
	return digest("scope", area, token)[:32]
}

// keyedStore is the store that keeps the Idempotency-Key of r, or nil
// when r has none or takes none here. On a cluster node a thread's
// request is keyed on its shard's owner, once routed there; a new
// thread's (createThread) once its ID has picked the shard.
func (s *server) keyedStore(r *http.Request) *store.Store {
	if _, ok := r.Header["Idempotency-Key"]; !ok || !keyed(r) {
		return nil
	}
	if s.cluster != nil && r.PathValue("tid") == "" && !shardChosen(r) {
		return nil
	}
	return s.st(r)
}

// shardChosen reports whether r was given its shard (withShard).
func shardChosen(r *http.Request) bool {
	_, ok := r.Context().Value(shardKey{}).(Shard)
	return ok
}

// keyedHandler is h served with the Idempotency-Key kept in st.
func (s *server) keyedHandler(st *store.Store, h handlerFunc) handlerFunc {
	return func(w http.ResponseWriter, r *http.Request) error { return s.serveKeyed(w, r, st, h) }
}

// serveKeyed serves a keyed request with store st: a replay when the key
// answered before, 422 when it answered another request, a wait (or 409)
// while another send of it runs, and otherwise h with the key in the
// request's context, so that the write h makes stores its answer.
func (s *server) serveKeyed(w http.ResponseWriter, r *http.Request, st *store.Store, h handlerFunc) error {
	raw, err := parseIdempotencyKey(r.Header.Get("Idempotency-Key"))
	if err != nil {
		return err
	}
	body, err := s.readBody(w, r)
	if err != nil {
		return err
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	sum := sha256.Sum256(body)
	p := &store.Idempotent{
		Scope:       callerScope(r),
		Key:         digest("key", raw),
		Fingerprint: digest("request", r.Method, r.URL.Path, r.URL.RawQuery, hex.EncodeToString(sum[:])),
		Status:      answerStatus(r.Pattern),
	}
	release, err := s.idem.running.acquire(r.Context(), p.Scope+":"+p.Key, s.idem.wait)
	if err != nil {
		if err == errKeyInFlight {
			w.Header().Set("Retry-After", "1")
		}
		return err
	}
	defer release()
	rem, found, err := st.Remember(r.Context(), p.Scope, p.Key, st.Now().Add(-s.idem.ttl).UnixNano())
	if err != nil {
		return err
	}
	if found {
		if rem.Fingerprint != p.Fingerprint {
			return &httpError{http.StatusUnprocessableEntity, CodeIdempotencyKeyReused,
				"this Idempotency-Key was sent with another request (method, path or body): use a fresh key for a new request"}
		}
		return s.replay(w, r, rem)
	}
	if err := h(w, r.WithContext(store.WithIdempotent(r.Context(), p))); err != nil || !p.Stored {
		return err
	}
	// The answer is out; keeping the bound and dropping expired keys is
	// the server's own business, and a failure of either only logs.
	ctx := context.WithoutCancel(r.Context())
	if _, err := st.TrimIdempotency(ctx, p.Scope, s.idem.max); err != nil {
		s.log.LogAttrs(ctx, slog.LevelWarn, "idempotency_trim_failed", append(requestAttrs(r), slog.Any("err", err))...)
	}
	if s.idem.sweepDue(st) {
		if _, err := st.ExpireIdempotency(ctx, st.Now().Add(-s.idem.ttl).UnixNano(), expireBatch); err != nil {
			s.log.LogAttrs(ctx, slog.LevelWarn, "idempotency_expire_failed", append(requestAttrs(r), slog.Any("err", err))...)
		}
	}
	return nil
}

// replay answers what a key answered before.
func (s *server) replay(w http.ResponseWriter, r *http.Request, rem store.Remembered) error {
	if rem.Gone {
		return fmt.Errorf("the answer to this Idempotency-Key is gone with what it returned (purged or erased since): %w",
			store.ErrNotFound)
	}
	w.Header().Set(replayedHeader, "true")
	switch {
	case rem.Message != nil:
		if rem.Status == http.StatusCreated {
			w.Header()["Location"] = []string{"/v1/threads/" + rem.Message.Thread + "/messages/" + rem.Message.ID}
		}
		return s.writeMessage(w, r, rem.Status, *rem.Message)
	case rem.Thread != nil:
		if rem.Status == http.StatusCreated {
			w.Header().Set("Location", "/v1/threads/"+rem.Thread.ID)
		}
		return s.writeJSON(w, r, rem.Status, wire.ThreadOf(*rem.Thread))
	}
	return s.writeEncoded(w, r, rem.Status, rem.Inline, nil)
}

// idempotency is what serveKeyed shares across requests.
type idempotency struct {
	ttl     time.Duration
	max     int
	wait    time.Duration
	running inFlight

	mu        sync.Mutex
	lastSweep map[*store.Store]time.Time
}

// sweepDue reports whether st's expired keys are to be dropped now: at
// most once every sixteenth of the TTL (and at least once a minute), so
// that a busy server drops them a few at a time.
func (i *idempotency) sweepDue(st *store.Store) bool {
	every := min(i.ttl/16, time.Minute)
	now := st.Now()
	i.mu.Lock()
	defer i.mu.Unlock()
	if last, ok := i.lastSweep[st]; ok && now.Sub(last) < every {
		return false
	}
	if i.lastSweep == nil {
		i.lastSweep = make(map[*store.Store]time.Time)
	}
	i.lastSweep[st] = now
	return true
}

// inFlight holds the keys being served, so that a second send of one waits
// for the first instead of running beside it.
type inFlight struct {
	mu   sync.Mutex
	keys map[string]chan struct{}
}

// acquire takes key, waiting up to wait for a request that holds it;
// errKeyInFlight when it is still held then. The caller calls release.
func (f *inFlight) acquire(ctx context.Context, key string, wait time.Duration) (release func(), err error) {
	timer := time.NewTimer(max(wait, 0))
	defer timer.Stop()
	for {
		f.mu.Lock()
		held, ok := f.keys[key]
		if !ok {
			if f.keys == nil {
				f.keys = make(map[string]chan struct{})
			}
			done := make(chan struct{})
			f.keys[key] = done
			f.mu.Unlock()
			return func() {
				f.mu.Lock()
				delete(f.keys, key)
				f.mu.Unlock()
				close(done)
			}, nil
		}
		f.mu.Unlock()
		select {
		case <-held:
		case <-timer.C:
			return nil, errKeyInFlight
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}
