package client

import (
	"bytes"
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"time"
)

// Retry bounds how the client tries a request again when the server
// answers 503 (a shard without an owner, one being moved, a server
// shutting down) or 421 (a node that no longer owns the shard).
type Retry struct {
	// Attempts is the number of tries in all, the first included; 1
	// turns retries off.
	Attempts int
	// Base is the first pause when the answer has no Retry-After; each
	// pause doubles it, with jitter, up to Max.
	Base time.Duration
	// Max bounds every pause. An answer whose Retry-After is beyond Max
	// is returned at once (as an *APIError with RetryAfter set) rather
	// than tried again before the server said.
	Max time.Duration
}

// DefaultRetry is what New uses without WithRetry.
var DefaultRetry = Retry{Attempts: 4, Base: 100 * time.Millisecond, Max: 10 * time.Second}

func retryableStatus(status int) bool {
	return status == http.StatusServiceUnavailable || status == http.StatusMisdirectedRequest
}

// keyedWrite reports whether the server keeps an Idempotency-Key for req
// (spec §7): every POST and PATCH of /v1, and POST /admin/erasures.
func keyedWrite(req *http.Request) bool {
	switch req.Method {
	case http.MethodPost, http.MethodPatch:
	default:
		return false
	}
	p := req.URL.Path
	if strings.Contains(p, "/attachments") {
		return false // an upload is streamed: the server keys none yet
	}
	return strings.Contains(p, "/v1/") || strings.HasSuffix(p, "/admin/erasures")
}

// newIdempotencyKey is a fresh key: 128 random bits.
func newIdempotencyKey() (string, error) {
	var b [16]byte
	if _, err := crand.Read(b[:]); err != nil {
		return "", fmt.Errorf("progressdb: idempotency key: %w", err)
	}
	return hex.EncodeToString(b[:]), nil
}

// retryDoer sends a request again on 503 and 421, waiting as Retry says
// or as long as the server's Retry-After, and stops early when the
// request's context ends. A write the server keys (keyedWrite) gets a
// fresh Idempotency-Key, the same on each try, so that the server stores
// it once however many tries reach it; such a write is also tried again
// when the connection fails, since its first try may have been served.
// A body goes again only when the request can give it again whole
// (GetBody: the generated operations' JSON, an upload that can be
// rewound); a stream is never held in memory to be sent twice.
type retryDoer struct {
	next  HttpRequestDoer
	retry Retry
}

func (d retryDoer) Do(req *http.Request) (*http.Response, error) {
	ctx := req.Context()
	keyed := keyedWrite(req)
	if keyed && req.Header.Get("Idempotency-Key") == "" {
		key, err := newIdempotencyKey()
		if err != nil {
			return nil, err
		}
		req.Header.Set("Idempotency-Key", key)
	}
	hasBody := req.Body != nil && req.Body != http.NoBody
	try := req
	for attempt := 1; ; attempt++ {
		res, err := d.next.Do(try)
		if attempt >= d.retry.Attempts || (err != nil && (!keyed || ctx.Err() != nil)) ||
			(err == nil && !retryableStatus(res.StatusCode)) {
			return res, err
		}
		wait, said := time.Duration(0), false
		if err == nil {
			wait, said = retryAfter(res.Header, time.Now())
		}
		if !said {
			wait = backoff(d.retry, attempt)
		}
		if err == nil && wait > d.retry.Max {
			return res, nil
		}
		if err == nil {
			// Read the answer (a short error) and release its connection:
			// the previous body is closed only then, and the answer is
			// returned if the body cannot go again.
			res = keep(res)
		}
		next := req.Clone(ctx)
		if hasBody {
			if req.GetBody == nil {
				return res, err
			}
			b, gerr := req.GetBody()
			if gerr != nil {
				return res, err
			}
			next.Body = b
		}
		if err := sleep(ctx, wait); err != nil {
			if hasBody {
				next.Body.Close()
			}
			return nil, err
		}
		try = next
	}
}

// keep returns res with its body read (up to 64 KiB) and its connection
// released.
func keep(res *http.Response) *http.Response {
	b, _ := io.ReadAll(io.LimitReader(res.Body, 64<<10))
	res.Body.Close()
	res.Body = io.NopCloser(bytes.NewReader(b))
	return res
}

// backoff is the pause after try n (from 1) without Retry-After: Base
// doubled n-1 times, capped at Max, less up to a half of jitter so that
// clients turned away together do not come back together.
func backoff(r Retry, n int) time.Duration {
	d := r.Base
	for i := 1; i < n && d < r.Max; i++ {
		d *= 2
	}
	d = min(d, r.Max)
	if d <= 1 {
		return d
	}
	return d - rand.N(d/2)
}

func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
