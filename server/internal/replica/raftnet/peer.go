package raftnet

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/progressdb/progressdb/server/internal/router"
)

// queued is one encoded message waiting for its peer's stream.
type queued struct {
	group, to uint64
	snap      bool   // a snapshot: its loss is reported as a failed snapshot
	rec       []byte // the frame record (appendRecord)
}

// peer sends one node's messages over one stream at a time, opened again
// with jittered backoff when it breaks.
type peer struct {
	t    *Transport
	node string
	wake chan struct{} // one token: the queue has messages

	mu    sync.Mutex
	url   string   // guarded by mu
	queue []queued // guarded by mu
	cur   *stream  // the open stream; guarded by mu
}

func (p *peer) setURL(u string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.url = u
}

// enqueue queues q, or drops it and tells its group when the queue is
// full: raft sends again, and the worker never waits for the network.
func (p *peer) enqueue(h Host, q queued) {
	p.mu.Lock()
	full := len(p.queue) >= p.t.o.QueueSize
	if !full {
		p.queue = append(p.queue, q)
	}
	p.mu.Unlock()
	if full {
		p.t.o.Metrics.dropped.WithLabelValues(dropQueueFull).Inc()
		report(h, []queued{q})
		return
	}
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// take returns the oldest messages, about batchBytes of them (at least
// one); all of them when all is set.
func (p *peer) take(all bool) []queued {
	p.mu.Lock()
	defer p.mu.Unlock()
	n, size := 0, 0
	for n < len(p.queue) && (all || n == 0 || size+len(p.queue[n].rec) <= batchBytes) {
		size += len(p.queue[n].rec)
		n++
	}
	out := p.queue[:n:n]
	p.queue = p.queue[n:]
	if len(p.queue) == 0 {
		p.queue = nil // the array the taken ones share is not reused
	}
	return out
}

func (p *peer) pending() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.queue) > 0
}

// lose drops messages that will not reach the peer and tells their
// groups.
func (p *peer) lose(lost []queued) {
	if len(lost) == 0 {
		return
	}
	p.t.o.Metrics.dropped.WithLabelValues(dropUnreachable).Add(float64(len(lost)))
	if h, _ := p.t.running(); h != nil {
		report(h, lost)
	}
}

// run opens the peer's stream when it has messages and keeps one open
// while it does, until ctx ends.
func (p *peer) run(ctx context.Context) {
	log := p.t.o.Logger.With("peer", p.node)
	backoff, opened := minBackoff, false
	for {
		if !p.pending() {
			select {
			case <-ctx.Done():
				return
			case <-p.wake:
				continue
			}
		}
		if opened {
			p.t.o.Metrics.reconnects.Inc()
		}
		opened = true
		s, err := p.open(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			log.Warn("raft_stream_open_failed", "err", err, "retry_in", backoff)
			p.lose(p.take(true))
		} else {
			log.Debug("raft_stream_opened")
			p.setCur(s)
			sent, err := p.send(ctx, s)
			p.setCur(nil)
			s.close()
			if ctx.Err() != nil {
				return
			}
			log.Info("raft_stream_broken", "err", err, "frames_sent", sent)
			if sent > 0 {
				backoff = minBackoff
			}
		}
		// Jittered, so that the nodes of a cluster that lost a peer do
		// not all dial it at the same instants.
		wait := backoff/2 + rand.N(backoff/2+1)
		backoff = min(2*backoff, maxBackoff)
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
	}
}

func (p *peer) setCur(s *stream) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cur = s
}

// send writes frames of queued messages to s until it breaks or ctx
// ends, and returns how many frames it wrote. A frame whose write failed
// is lost: its groups are told.
func (p *peer) send(ctx context.Context, s *stream) (int, error) {
	frames := 0
	for {
		batch := p.take(false)
		if len(batch) == 0 {
			select {
			case <-ctx.Done():
				return frames, ctx.Err()
			case <-s.done:
				return frames, s.err()
			case <-p.wake:
				continue
			}
		}
		recs := make([][]byte, len(batch))
		for i, q := range batch {
			recs[i] = q.rec
		}
		// A peer that stops reading while its connection lives would
		// hold the write for ever: the stream is ended instead.
		stuck := time.AfterFunc(writeTimeout, func() {
			_ = s.w.CloseWithError(fmt.Errorf("a frame not taken within %s", writeTimeout))
		})
		_, err := s.w.Write(frameOf(recs))
		stuck.Stop()
		if err != nil {
			p.lose(batch)
			return frames, err
		}
		frames++
		p.t.o.Metrics.sent.Add(float64(len(batch)))
	}
}

// errStreamEnded: the receiver ended the stream; its reason, when it
// gave one, is in the error.
var errStreamEnded = errors.New("the peer ended the stream")

// stream is one open POST to the peer: frames are written to w, the body
// of the request; done is closed when the answer's body ends.
type stream struct {
	w      *io.PipeWriter
	cancel context.CancelFunc
	done   chan struct{}
	reason string // what the receiver wrote before ending it; set before done closes
}

func (s *stream) err() error {
	if s.reason == "" {
		return errStreamEnded
	}
	return fmt.Errorf("%w: %s", errStreamEnded, s.reason)
}

// close ends the stream and waits for its reader.
func (s *stream) close() {
	s.cancel()
	_ = s.w.CloseWithError(errStreamEnded)
	<-s.done
}

// open starts a stream to the peer: the answer's headers come at once
// when the peer accepts it, an error status when it refuses.
func (p *peer) open(ctx context.Context) (*stream, error) {
	p.mu.Lock()
	url := p.url
	p.mu.Unlock()
	sctx, cancel := context.WithCancel(ctx)
	pr, pw := io.Pipe()
	// Ending the stream's context ends a write in progress, and the
	// HTTP/1.1 client's read of the body, which a cancelled request waits
	// for.
	context.AfterFunc(sctx, func() { _ = pw.CloseWithError(errStreamEnded) })
	req, err := http.NewRequestWithContext(sctx, http.MethodPost, strings.TrimSuffix(url, "/")+Path, pr)
	if err != nil {
		cancel()
		return nil, fmt.Errorf("stream to %s at %q: %w", p.node, url, err)
	}
	req.Header.Set(router.HeaderSecret, p.t.o.Secret)
	req.Header.Set(router.HeaderNode, p.t.o.Node)
	req.Header.Set("Content-Type", contentType)
	type answer struct {
		resp *http.Response
		err  error
	}
	ac := make(chan answer, 1)
	go func() {
		resp, err := p.t.client.Do(req)
		ac <- answer{resp, err}
	}()
	timer := time.NewTimer(dialTimeout)
	defer timer.Stop()
	var a answer
	select {
	case a = <-ac:
	case <-timer.C:
		cancel()
		if a = <-ac; a.err == nil {
			a.resp.Body.Close()
		}
		a.err = fmt.Errorf("no answer within %s", dialTimeout)
	}
	if a.err == nil && a.resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(a.resp.Body, 1024))
		a.resp.Body.Close()
		a.err = fmt.Errorf("answered %s: %s", a.resp.Status, strings.TrimSpace(string(msg)))
	}
	if a.err != nil {
		cancel()
		_ = pw.Close()
		return nil, fmt.Errorf("stream to %s at %s: %w", p.node, url, a.err)
	}
	s := &stream{w: pw, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(s.done)
		defer a.resp.Body.Close()
		msg, _ := io.ReadAll(io.LimitReader(a.resp.Body, 1024))
		s.reason = strings.TrimSpace(string(msg))
		_ = pw.CloseWithError(s.err())
	}()
	return s, nil
}
