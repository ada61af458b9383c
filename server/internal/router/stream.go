package router

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// Streamed calls (api.Streamed: an attachment's upload or download) carry
// a file of any size: forwardStream passes the body through as it comes,
// never holding it, and ends the call only when neither side has moved a
// byte for RequestTimeout, as the owner's upload does with its client.

// errSilent ends a streamed call that moved no byte for too long; its
// cause is a deadline, so call answers 503 naming the owner.
var errSilent = fmt.Errorf("streamed call silent too long: %w", context.DeadlineExceeded)

// errRetired is what an attempt's body answers once another attempt has
// taken over: a transport still writing the old one gets nothing more.
var errRetired = errors.New("forwarded body: a later attempt took it over")

// forwardStream answers r, a streamed request about shard n, with the
// answer of the shard's owner.
func (rt *Router) forwardStream(w http.ResponseWriter, r *http.Request, n int) error {
	ctx, cancel := context.WithCancelCause(r.Context())
	defer cancel(nil)
	idle := time.AfterFunc(rt.o.RequestTimeout, func() {
		cancel(errSilent)
		// The transport ends a call only once its read of the body has:
		// a read waiting on a silent client ends now.
		_ = http.NewResponseController(w).SetReadDeadline(time.Now())
	})
	defer idle.Stop()
	touch := func() { idle.Reset(rt.o.RequestTimeout) }

	h := r.Header.Clone()
	h.Del("Host")
	body := &onceBody{src: r.Body, touch: touch}
	if r.ContentLength != 0 {
		// The owner refusing (421, 413) before it reads lets the body be
		// sent again, or not at all.
		h.Set("Expect", "100-continue")
	}
	resp, err := rt.callWith(ctx, n, r.Method, r.URL.RequestURI(), h, func(attempt int) (io.Reader, int64, error) {
		if r.ContentLength == 0 {
			return nil, 0, nil
		}
		br, ok := body.attempt(attempt)
		if !ok {
			w.Header().Set("Retry-After", retryAfterSeconds)
			return nil, 0, unavailable(n, "its owner changed while the upload was sent; send it again")
		}
		return br, r.ContentLength, nil
	})
	// An HTTP/1 client whose upload was not read to its end is answered
	// at once and its connection closed: the server would otherwise read
	// on, waiting for a client that may have fallen silent.
	if r.ProtoMajor == 1 && r.ContentLength != 0 && !body.ended() {
		w.Header().Set("Connection", "close")
	}
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	touch()
	// Bytes read from the owner, and bytes the client took, both count.
	resp.Body = touchReader{resp.Body, touch}
	if err := relay(touchWriter{w, touch}, resp); err != nil {
		// Part of a file went out: break the client's connection, so that
		// it cannot take it for the whole.
		panic(http.ErrAbortHandler)
	}
	return nil
}

// onceBody is a request body that the attempts of one call share: a
// later attempt may send it only while no byte of it was taken, and an
// earlier attempt's reads stop once a later one began.
type onceBody struct {
	readMu sync.Mutex // held across a read: one attempt reads at a time
	src    io.Reader
	cur    atomic.Int32 // the attempt that may read
	taken  atomic.Bool  // bytes were read: the body cannot be sent again
	lost   atomic.Bool  // bytes went to an attempt retired meanwhile
	eof    atomic.Bool
	touch  func()
}

// attempt returns the body for attempt k; false when an earlier attempt
// took bytes of it, which cannot be sent again.
func (b *onceBody) attempt(k int) (io.Reader, bool) {
	if b.taken.Load() {
		return nil, false
	}
	b.cur.Store(int32(k))
	return attemptBody{b, int32(k)}, true
}

// ended reports whether the body was read to its end.
func (b *onceBody) ended() bool { return b.eof.Load() }

// attemptBody is one attempt's view of a onceBody. It has no Close: the
// transport closes what it sends, and the client's body is the server's
// to close.
type attemptBody struct {
	b *onceBody
	k int32
}

func (a attemptBody) Read(p []byte) (int, error) {
	b := a.b
	b.readMu.Lock()
	defer b.readMu.Unlock()
	if b.lost.Load() || b.cur.Load() != a.k {
		return 0, errRetired
	}
	n, err := b.src.Read(p)
	if n > 0 {
		b.taken.Store(true)
		b.touch()
		// A read that began before a later attempt took over gave its
		// bytes to a call that is gone: no attempt may send the rest
		// as if it were the whole.
		if b.cur.Load() != a.k {
			b.lost.Store(true)
			return 0, errRetired
		}
	}
	if errors.Is(err, io.EOF) {
		b.eof.Store(true)
	}
	return n, err
}

// touchReader reports each read that moved bytes.
type touchReader struct {
	io.ReadCloser
	touch func()
}

func (t touchReader) Read(p []byte) (int, error) {
	n, err := t.ReadCloser.Read(p)
	if n > 0 {
		t.touch()
	}
	return n, err
}

// touchWriter reports each write that the client took.
type touchWriter struct {
	http.ResponseWriter
	touch func()
}

func (t touchWriter) Write(p []byte) (int, error) {
	n, err := t.ResponseWriter.Write(p)
	if n > 0 {
		t.touch()
	}
	return n, err
}
