package raftnet

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/progressdb/progressdb/server/internal/api"
	"github.com/progressdb/progressdb/server/internal/replica"
	"github.com/progressdb/progressdb/server/internal/router"
)

// Snapshots travel out of the streams (docs/replication-design.md §6,
// §7): one POST to SnapshotPath per snapshot, its body a frame holding
// the MsgSnap's record, then the shard's backup stream; the answer is 204
// once the recipient's replica took it, or the reason it did not.

// SnapshotPath is the node-to-node route of snapshots: mount
// SnapshotHandler on it beside Path.
const SnapshotPath = router.InternalPrefix + "raft-snapshot"

// snapContentType names a snapshot's body.
const snapContentType = "application/x-progressdb-raft-snapshot"

// maxSnapAnswer bounds the reason a refusal carries.
const maxSnapAnswer = 4 << 10

// SnapshotHost is a Host that takes snapshots (*replica.Host).
type SnapshotHost interface {
	ReceiveSnapshot(ctx context.Context, group uint64, m *raftpb.Message, r io.Reader) error
}

var (
	_ replica.SnapshotSender = (*Transport)(nil)
	_ SnapshotHost           = (*replica.Host)(nil)
)

// ErrSnapshotNotTaken: the recipient's node answered, and did not take
// the snapshot; its reason is wrapped in the message.
var ErrSnapshotNotTaken = errors.New("snapshot not taken")

// SendSnapshot implements replica.SnapshotSender: the message and the
// state write produces go to the node of m.To in one request, which
// returns once that node's replica took the snapshot or failed to.
func (t *Transport) SendSnapshot(ctx context.Context, group uint64, m *raftpb.Message, write func(io.Writer) error) error {
	h, tctx := t.running()
	if h == nil {
		return errors.New("raftnet: the transport is stopped")
	}
	to, ok := t.o.Resolve(m.GetTo())
	if !ok {
		return fmt.Errorf("raftnet: no node known for replica %d", m.GetTo())
	}
	rec, err := appendRecord(nil, group, m)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(tctx, cancel)()
	pr, pw := io.Pipe()
	wrote := make(chan error, 1)
	go func() {
		_, err := pw.Write(frameOf([][]byte{rec}))
		if err == nil {
			err = write(pw)
		}
		pw.CloseWithError(err)
		wrote <- err
	}()
	err = t.postSnapshot(ctx, to, pr)
	_ = pr.CloseWithError(errors.New("raftnet: the snapshot's request ended"))
	return errors.Join(err, <-wrote)
}

func (t *Transport) postSnapshot(ctx context.Context, to Peer, body io.Reader) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimSuffix(to.URL, "/")+SnapshotPath, body)
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", snapContentType)
	req.Header.Set(router.HeaderSecret, t.o.Secret)
	req.Header.Set(router.HeaderNode, t.o.Node)
	resp, err := t.client.Do(req)
	if err != nil {
		return fmt.Errorf("raftnet: snapshot to node %s: %w", to.Node, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusNoContent {
		return nil
	}
	reason, _ := io.ReadAll(io.LimitReader(resp.Body, maxSnapAnswer))
	return fmt.Errorf("raftnet: node %s: %w: %s: %s", to.Node, ErrSnapshotNotTaken, resp.Status, strings.TrimSpace(string(reason)))
}

// SnapshotHandler serves SnapshotPath: another node's snapshot for one of
// this node's replicas. Like Handler it checks the cluster secret after
// the node routes' guard checked the caller's certificate.
func (t *Transport) SnapshotHandler() http.Handler {
	secret := router.NewSecret(t.o.Secret)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case !secret.Matches(r.Header.Get(router.HeaderSecret)):
			refuse(w, http.StatusForbidden, api.CodeNotANode, "raft snapshots are for the cluster's nodes only")
			return
		case r.Method != http.MethodPost:
			refuse(w, http.StatusMethodNotAllowed, api.CodeMethodNotAllowed, "POST only")
			return
		case r.Header.Get("Content-Type") != snapContentType:
			refuse(w, http.StatusUnsupportedMediaType, api.CodeInvalidParameter, "a raft snapshot is "+snapContentType)
			return
		}
		h, tctx := t.running()
		sh, ok := h.(SnapshotHost)
		if h == nil || !ok {
			refuse(w, http.StatusServiceUnavailable, api.CodeNotConfigured, "this node takes no snapshots now")
			return
		}
		// The request ends with its caller, or when the transport stops.
		ctx, cancel := context.WithCancel(r.Context())
		defer cancel()
		defer context.AfterFunc(tctx, cancel)()
		// The message first, checked as a stream's frame is.
		body, err := readFrame(r.Body, t.o.MaxFrame)
		var recs []record
		if err == nil {
			recs, err = decodeFrame(body)
		}
		if err == nil && (len(recs) != 1 || recs[0].msg.GetType() != raftpb.MessageType_MsgSnap) {
			err = fmt.Errorf("%w: a snapshot's frame holds one MsgSnap", ErrBadFrame)
		}
		if err != nil {
			t.o.Metrics.rejected.Inc()
			refuse(w, http.StatusBadRequest, api.CodeInvalidParameter, err.Error())
			return
		}
		if err := sh.ReceiveSnapshot(ctx, recs[0].group, recs[0].msg, r.Body); err != nil {
			t.o.Logger.Warn("raft_snapshot_not_taken", "peer", r.Header.Get(router.HeaderNode), "group", recs[0].group, "err", err)
			refuse(w, http.StatusServiceUnavailable, api.CodeUnavailable, err.Error())
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
}
