package raftnet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/progressdb/progressdb/server/internal/api"
	"github.com/progressdb/progressdb/server/internal/router"
)

// contentType names the stream's body.
const contentType = "application/x-progressdb-raft"

// Handler serves Path: another node's stream, each of its frames
// delivered to the host. It checks the cluster secret; the node's
// certificate is checked before it, by the guard of the node-to-node
// routes (certs.Guard). A frame it refuses ends the stream with the
// reason as the answer's body; the sender opens another.
func (t *Transport) Handler() http.Handler {
	secret := router.NewSecret(t.o.Secret)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case !secret.Matches(r.Header.Get(router.HeaderSecret)):
			refuse(w, http.StatusForbidden, api.CodeNotANode, "raft streams are for the cluster's nodes only")
			return
		case r.Method != http.MethodPost:
			refuse(w, http.StatusMethodNotAllowed, api.CodeMethodNotAllowed, "POST only")
			return
		case r.Header.Get("Content-Type") != contentType:
			refuse(w, http.StatusUnsupportedMediaType, api.CodeInvalidParameter, "a raft stream is "+contentType)
			return
		}
		h, ctx := t.running()
		if h == nil {
			refuse(w, http.StatusServiceUnavailable, api.CodeNotConfigured, "this node runs no replicas now")
			return
		}
		t.receive(ctx, w, r, h)
	})
}

// receive delivers the stream's frames until it ends, the transport
// stops, or a frame is refused.
func (t *Transport) receive(ctx context.Context, w http.ResponseWriter, r *http.Request, h Host) {
	log := t.o.Logger.With("peer", r.Header.Get(router.HeaderNode), "remote", r.RemoteAddr)
	rc := http.NewResponseController(w)
	_ = rc.EnableFullDuplex() // HTTP/1.1 without TLS; HTTP/2 streams are
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(http.StatusOK)
	if err := rc.Flush(); err != nil {
		return
	}
	// The server's read timeout is for requests, not streams: a stream
	// ends when idle for streamIdle, or at once when the transport stops.
	// The writer is not to be touched once the handler returned, so a
	// stop that came meanwhile is waited for.
	stopped := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		defer close(stopped)
		_ = rc.SetReadDeadline(time.Now())
	})
	defer func() {
		if !stop() {
			<-stopped
		}
	}()
	for {
		_ = rc.SetReadDeadline(time.Now().Add(streamIdle))
		if ctx.Err() != nil {
			return
		}
		body, err := readFrame(r.Body, t.o.MaxFrame)
		var recs []record
		if err == nil {
			recs, err = decodeFrame(body)
		}
		switch {
		case errors.Is(err, ErrBadFrame):
			t.o.Metrics.rejected.Inc()
			log.Warn("raft_frame_rejected", "err", err)
			_, _ = fmt.Fprintf(w, "frame rejected: %v\n", err)
			return
		case errors.Is(err, io.EOF):
			return // the sender closed it between frames
		case err != nil:
			log.Info("raft_stream_ended", "err", err)
			return
		}
		for _, rec := range recs {
			h.Deliver(rec.group, rec.msg)
		}
	}
}

// refuse answers with the API's error shape.
func refuse(w http.ResponseWriter, status int, code api.Code, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]string{"error": msg, "code": string(code)})
}
