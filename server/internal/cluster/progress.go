package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/progressdb/progressdb/server/internal/replica"
	"github.com/progressdb/progressdb/server/internal/startstop"
)

// DefaultProgressEvery is how often a node reports its replicas'
// progress: the staleness of the applied indexes and lags `cluster
// status` shows.
const DefaultProgressEvery = 5 * time.Second

// Progress holds node id's report of its replicas (ProgressReport),
// under the node's etcd session: `cluster status` and GET /admin/cluster
// read every replicated shard's roles, applied indexes and lags from
// etcd alone, and a node that dies takes its report with it.
func (k Keys) Progress(id string) string { return "/" + k.Name + "/progress/" + id }

// ProgressReport is what a node's progress key holds: the status of each
// group it runs a replica of, as that replica sees it (the leader's
// includes every replica's match index and lag).
type ProgressReport struct {
	Node       string                `json:"node"`
	ReportedAt time.Time             `json:"reported_at"`
	Groups     []replica.GroupStatus `json:"groups"`
}

// ParseProgress reads a progress key's value.
func ParseProgress(v []byte) (ProgressReport, error) {
	var r ProgressReport
	if err := json.Unmarshal(v, &r); err != nil {
		return ProgressReport{}, fmt.Errorf("progress report: %w", err)
	}
	if r.Node == "" {
		return ProgressReport{}, errors.New("progress report: no node")
	}
	return r, nil
}

// ProgressOptions configure a node's ProgressReporter.
type ProgressOptions struct {
	Client *clientv3.Client
	Keys   Keys
	Node   string        // this node's ID
	TTL    time.Duration // the session's: a dead node's report goes within it
	// Every is the time between reports (DefaultProgressEvery when 0).
	Every time.Duration
	// Statuses reads the replicas' statuses (replica.Host.Statuses).
	Statuses func() []replica.GroupStatus
	Logger   *slog.Logger
	// OnEtcdError, when set, sees every etcd call that failed.
	OnEtcdError func(error)
	// Now is the clock of ReportedAt (time.Now when nil).
	Now func() time.Time
}

// ProgressReporter publishes the node's progress report every Every,
// under an etcd session of its own, opened again after a loss.
type ProgressReporter struct {
	o    ProgressOptions
	life startstop.Base
	kick chan struct{} // one token: report now
}

// NewProgressReporter returns a node's reporter; Start runs it.
func NewProgressReporter(o ProgressOptions) (*ProgressReporter, error) {
	if o.Client == nil || o.Node == "" || o.TTL <= 0 || o.Statuses == nil {
		return nil, errors.New("cluster: progress reports need a client, a node ID, a TTL and the statuses")
	}
	if o.Every <= 0 {
		o.Every = DefaultProgressEvery
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return &ProgressReporter{o: o, kick: make(chan struct{}, 1)}, nil
}

// Kick asks for a report now rather than at the next period: a group's
// leadership changed. It never blocks; kicks close together make one
// report.
func (p *ProgressReporter) Kick() {
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

// Start reports until ctx ends or Stop.
func (p *ProgressReporter) Start(ctx context.Context) { p.life.Start(ctx, nil, p.run) }

// Stop ends the session, which deletes the report at once.
func (p *ProgressReporter) Stop() { p.life.Stop() }

func (p *ProgressReporter) failed(err error) {
	if p.o.OnEtcdError != nil && !errors.Is(err, context.Canceled) {
		p.o.OnEtcdError(err)
	}
}

func (p *ProgressReporter) run(ctx context.Context) {
	ttl := max(int64((p.o.TTL+time.Second-1)/time.Second), 1)
	for ctx.Err() == nil {
		gctx, cancel := context.WithTimeout(ctx, p.o.Every)
		grant, err := p.o.Client.Grant(gctx, ttl)
		cancel()
		var sess *concurrency.Session
		if err == nil {
			// Not ended by ctx, so that Close can still revoke it.
			sess, err = concurrency.NewSession(p.o.Client, concurrency.WithLease(grant.ID), concurrency.WithTTL(int(ttl)),
				concurrency.WithContext(context.WithoutCancel(ctx)))
		}
		if err != nil {
			p.failed(err)
			p.o.Logger.Warn("cluster_progress_session_failed", "node", p.o.Node, "err", err)
			sleep(ctx, p.o.Every)
			continue
		}
		p.serve(ctx, sess)
		_ = sess.Close()
	}
}

// serve reports at once and then every Every under sess, until ctx ends
// or the session is lost.
func (p *ProgressReporter) serve(ctx context.Context, sess *concurrency.Session) {
	t := time.NewTicker(p.o.Every)
	defer t.Stop()
	for {
		if err := p.report(ctx, sess); err != nil && ctx.Err() == nil {
			p.failed(err)
			p.o.Logger.Warn("cluster_progress_report_failed", "node", p.o.Node, "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-sess.Done():
			p.o.Logger.Warn("cluster_progress_session_lost", "node", p.o.Node)
			return
		case <-t.C:
		case <-p.kick:
		}
	}
}

func (p *ProgressReporter) report(ctx context.Context, sess *concurrency.Session) error {
	r := ProgressReport{Node: p.o.Node, ReportedAt: p.o.Now().UTC(), Groups: p.o.Statuses()}
	val, err := json.Marshal(r)
	if err != nil {
		return err
	}
	cctx, cancel := context.WithTimeout(ctx, p.o.Every)
	defer cancel()
	if _, err := p.o.Client.Put(cctx, p.o.Keys.Progress(p.o.Node), string(val), clientv3.WithLease(sess.Lease())); err != nil {
		return fmt.Errorf("write %s: %w", p.o.Keys.Progress(p.o.Node), err)
	}
	return nil
}
