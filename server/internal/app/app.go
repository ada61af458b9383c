// Package app wires the store, the retention service and the HTTP server
// together for `progressdb serve`.
package app

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/progressdb/progressdb/server/internal/api"
	"github.com/progressdb/progressdb/server/internal/backup"
	"github.com/progressdb/progressdb/server/internal/buildinfo"
	"github.com/progressdb/progressdb/server/internal/retention"
	"github.com/progressdb/progressdb/server/internal/storagemetrics"
	"github.com/progressdb/progressdb/server/pkg/config"
	"github.com/progressdb/progressdb/server/pkg/keystore"
	"github.com/progressdb/progressdb/server/pkg/store"
)

// Serve runs the server until ctx ends, then shuts down in order: the
// retention runs going stop at their next batch boundary (interrupted
// footer) while HTTP drains, so that a client waiting for a run gets its
// answer; then the store closes, after every run has ended.
func Serve(ctx context.Context, cfg config.Config, logger *slog.Logger) error {
	ln, err := listen(cfg.Addr)
	if err != nil {
		return err
	}
	defer ln.Close()
	if cfg.Cluster.Enabled() {
		return serveCluster(ctx, cfg, logger, ln)
	}
	if err := Validate(cfg); err != nil {
		return err
	}
	tr, err := loadTransport(cfg)
	if err != nil {
		return err
	}
	// The store closes its key store after itself: every read and write
	// of the store may use it. Its blob store is opened with it: retention
	// runs delete the blobs of what they purge, backups copy them.
	sts, err := OpenStores(ctx, cfg, logger, store.Options{Logger: logger}, MaySeal)
	if err != nil {
		return fmt.Errorf("open store: %w", err)
	}
	st, blobs := sts.Store, sts.Blobs
	keys := KeyStore(st)
	defer func() {
		if err := sts.Close(); err != nil {
			logger.Error("store_close_failed", "err", err)
		}
	}()

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		buildinfo.Read().Collector(), storagemetrics.New(st, logger))
	tr.start(ctx, reg, logger)

	key, err := SigningKey(cfg)
	if err != nil {
		return err
	}
	svc, err := NewRetention(sts, cfg.Retention, logger, reg, true, key)
	if err != nil {
		return err
	}
	// The paused gauge shows the stored switch from the start.
	if p, err := svc.Pause(ctx); err != nil {
		logger.Error("retention_pause_unreadable", "err", err)
	} else if p.Paused {
		logger.Warn("retention_is_paused", "reason", p.Reason, "paused_at", p.PausedAt)
	}
	// Seal what a crashed run left, even with retention disabled, so the
	// status never reports a dead run as running.
	if _, err := svc.Recover(ctx); err != nil {
		logger.Error("retention_recover_failed", "err", err)
	}
	// A database copied back by hand lacks the purges its trail records
	// after its head: they are replayed before the first request.
	warnAuditInsideDB(cfg, logger)
	if res, err := svc.CatchUp(ctx, true); err != nil {
		return fmt.Errorf("replay the purges the database lacks (docs/backup.md): %w", err)
	} else if res != nil {
		logger.Warn("retention_replayed_at_start", "run_id", res.RunID, "purged", res.Purged, "absent", res.Skipped,
			"audit_file", res.AuditFile)
	}
	// Alerts watch the last success; a restart must not reset it to 0.
	if at, err := svc.RestoreLastSuccess(); err != nil {
		logger.Warn("retention_last_success_unknown", "err", err)
	} else if !at.IsZero() {
		logger.Debug("retention_last_success_restored", "finished_at", at)
	}
	// Shutdown stops the runs at once (not after HTTP has drained: a
	// waited-for run holds its request open); the deferred Close waits for
	// them before the store closes.
	svc.StartScheduler(ctx)
	defer svc.Close()
	defer context.AfterFunc(ctx, svc.Close)()

	backups, err := NewBackups(sts, cfg, svc, logger, reg, key)
	if err != nil {
		return err
	}
	if cfg.Backup.Path != "" {
		sched, err := backup.NewScheduler(backup.SchedulerOptions{Creator: backups, Spec: cfg.Backup.Schedule,
			Keep: cfg.Backup.Keep, Logger: logger})
		if err != nil {
			return err
		}
		// Stopped before the retention service and the store: a backup
		// being written holds both.
		sched.Start(ctx)
		defer sched.Stop()
	}
	var erasures retention.Erasures
	if keys != nil {
		erasures = svc // subject erasure destroys keys: only with sealing on
	}
	tokens := new(api.Tokens)
	h, err := api.New(api.Options{
		Attachments:         blobs,
		AttachmentMaxBytes:  cfg.AttachmentMaxBytes,
		Store:               st,
		Retention:           svc,
		Erasures:            erasures,
		Backups:             backups,
		BackupStreamTimeout: cfg.Backup.StreamTimeout,
		IdempotencyTTL:      cfg.IdempotencyTTL,
		Logger:              logger,
		APIKey:              cfg.APIKey,
		AdminToken:          cfg.AdminToken,
		Tokens:              tokens,
		Registry:            reg,
	})
	if err != nil {
		return err
	}
	tokenFiles{cfg: cfg, tokens: tokens, logger: logger}.start(ctx)
	bi := buildinfo.Read()
	logger.Info("server_started", "addr", ln.Addr().String(), "db_path", cfg.DBPath,
		"retention_enabled", cfg.Retention.Enabled, "sealed", keys != nil, "tls", tr.tls(), "client_certificates", tr.clientCA != nil,
		"version", bi.Version, "commit", bi.Commit)
	err = api.Serve(ctx, tr.listener(ln), tr.wrap(h, tr.guard(logger)), logger)
	logger.Info("server_stopping")
	if errors.Is(err, context.Canceled) {
		err = nil
	}
	return err
}

// NewBackups builds the backup creator over an open store and its blob
// store; svc keeps retention runs from purging while a checkpoint is
// taken. reg, when not nil, receives the backup metrics. A store that
// seals is backed up with its key store (spec §12).
func NewBackups(sts Stores, cfg config.Config, svc *retention.Manager, logger *slog.Logger, reg prometheus.Registerer, signingKey ed25519.PrivateKey) (*backup.Creator, error) {
	return backup.NewCreator(backup.Options{
		Store:      sts.Store,
		KeyStore:   backup.KeyStoreOf(sts.Store),
		Blobs:      sts.Blobs,
		Hold:       svc,
		SigningKey: signingKey,
		Version:    buildinfo.Read().Version,
		Path:       cfg.Backup.Path,
		AuditPath:  cfg.Retention.AuditPath,
		Keep:       cfg.Backup.Keep,
		Logger:     logger,
		Metrics:    backup.NewMetrics(reg),
	})
}

// warnAuditInsideDB warns, while backups are on, of an audit trail inside
// DB_PATH: a database (or a node's shards) restored by copying DB_PATH back
// brings an old trail with it, and the purges made since are not replayed.
func warnAuditInsideDB(cfg config.Config, logger *slog.Logger) {
	if cfg.Backup.Path != "" && within(cfg.Retention.AuditPath, cfg.DBPath) {
		logger.Warn("audit_path_inside_db_path", "audit_path", cfg.Retention.AuditPath, "db_path", cfg.DBPath,
			"why", "a database restored by copying DB_PATH back brings an old audit trail with it, and its purges since are not replayed; set PROGRESSDB_RETENTION_AUDIT_PATH outside DB_PATH (docs/backup.md)")
	}
}

// within reports whether path is dir or lies under it.
func within(path, dir string) bool {
	p, err1 := filepath.Abs(path)
	d, err2 := filepath.Abs(dir)
	if err1 != nil || err2 != nil {
		return false
	}
	return p == d || strings.HasPrefix(p, d+string(filepath.Separator))
}

// hostname names this machine in leases and audit headers.
func hostname() string {
	h, err := os.Hostname()
	if err != nil || h == "" {
		return "unknown-host"
	}
	return h
}

// NewRetention builds the retention runner over a store and its blob
// store (whose owed deletions runs do), its scheduler (when retention is
// enabled and withScheduler is set) and the service over both.
// signingKey signs audit footers when set (see SigningKey).
func NewRetention(sts Stores, cfg config.Retention, logger *slog.Logger, reg prometheus.Registerer, withScheduler bool, signingKey ed25519.PrivateKey) (*retention.Manager, error) {
	if sts.Store == nil || sts.Blobs == nil {
		return nil, errors.New("retention: a runner needs the store and its blob store (app.OpenStores)")
	}
	// A sealed store's key store: runs finish the subject erasures pending
	// in it and erase what they destroyed from it.
	keys, _ := sts.Store.KeySealer().(*keystore.KeyStore)
	return newRetention(retention.RunnerOptions{Store: sts.Store, Config: cfg, Logger: logger, Metrics: retention.NewMetrics(reg),
		SigningKey: signingKey, Keys: keys, Blobs: sts.Blobs}, withScheduler)
}

// newRetention completes o (host, version) and builds the runner, its
// scheduler and the service over both.
func newRetention(o retention.RunnerOptions, withScheduler bool) (*retention.Manager, error) {
	cfg, logger, metrics := o.Config, o.Logger, o.Metrics
	o.Host = hostname()
	// The audit header names the build that wrote it, as `progressdb
	// version` does.
	o.Version = buildinfo.Read().Version
	runner, err := retention.NewRunner(o)
	if err != nil {
		return nil, fmt.Errorf("retention: %w", err)
	}
	var sched *retention.Scheduler
	if withScheduler && cfg.Enabled {
		sched, err = retention.NewScheduler(retention.SchedulerOptions{
			Runner:    runner,
			Spec:      cfg.Cron,
			RunMissed: cfg.RunMissed,
			Logger:    logger,
			Metrics:   metrics,
			AuditPath: cfg.AuditPath,
		})
		if err != nil {
			return nil, fmt.Errorf("retention scheduler: %w", err)
		}
	}
	return retention.NewService(retention.ServiceOptions{Runner: runner, Scheduler: sched, Logger: logger})
}

// listen takes the server's address before the start creates or opens any
// folder: an address in use (the most common failed start) then stops it
// with nothing left on disk. Connections that arrive while the start
// replays or recovers wait in the backlog until the server accepts them.
// The caller closes the listener; closing it again after api.Serve is
// harmless.
func listen(addr string) (net.Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", addr, err)
	}
	return ln, nil
}
