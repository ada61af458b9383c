package client

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
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

// retryDoer sends a request again on 503 and 421, waiting as Retry says
// or as long as the server's Retry-After, and stops early when the
// request's context ends.
type retryDoer struct {
	next  HttpRequestDoer
	retry Retry
}

func (d retryDoer) Do(req *http.Request) (*http.Response, error) {
	ctx := req.Context()
	// The body is sent again on each try: keep it whole.
	var body []byte
	if req.Body != nil && req.Body != http.NoBody {
		b, err := io.ReadAll(req.Body)
		req.Body.Close()
		if err != nil {
			return nil, fmt.Errorf("progressdb: read request body: %w", err)
		}
		body = b
	}
	for attempt := 1; ; attempt++ {
		try := req.Clone(ctx)
		if body != nil {
			try.Body = io.NopCloser(bytes.NewReader(body))
			try.ContentLength = int64(len(body))
		}
		res, err := d.next.Do(try)
		if err != nil || !retryableStatus(res.StatusCode) || attempt >= d.retry.Attempts {
			return res, err
		}
		wait, said := retryAfter(res.Header, time.Now())
		if !said {
			wait = backoff(d.retry, attempt)
		}
		if wait > d.retry.Max {
			return res, nil
		}
		// Drain so the connection is reused.
		io.Copy(io.Discard, io.LimitReader(res.Body, 64<<10))
		res.Body.Close()
		if err := sleep(ctx, wait); err != nil {
			return nil, err
		}
	}
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
