package main

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/progressdb/progressdb/server/internal/retention"
	"github.com/progressdb/progressdb/server/pkg/config"
)

// pacing overrides the runner's batch settings; zero fields keep the
// production defaults.
type pacing struct {
	batchSize int
	pause     time.Duration
	pauseSet  bool // pause given explicitly (0 is a valid pause)
	maxItems  int
	noYield   bool // PROGRESSDB_RETENTION_YIELD_TO_WRITES=false
	export    bool // PROGRESSDB_RETENTION_EXPORT_PATH set (to the fork's exportDir)
	noErase   bool // PROGRESSDB_RETENTION_ERASE=false

	maxAge      time.Duration // PROGRESSDB_RETENTION_MAX_AGE (0: off)
	maxMessages int           // PROGRESSDB_RETENTION_MAX_MESSAGES (0: off)
}

func (p pacing) String() string {
	bs := "default"
	if p.batchSize > 0 {
		bs = strconv.Itoa(p.batchSize)
	}
	ps := "default"
	if p.pauseSet {
		ps = config.FormatDuration(p.pause)
	}
	s := fmt.Sprintf("BATCH_SIZE=%s BATCH_PAUSE=%s", bs, ps)
	if p.noYield {
		s += " YIELD_TO_WRITES=false"
	}
	if p.export {
		s += " EXPORT_PATH=set"
	}
	if p.noErase {
		s += " ERASE=false"
	}
	return s
}

// retentionConfig loads the retention configuration the way the server
// does, from the environment with production defaults, enabled, with the
// fork's database and audit folder and the given pacing.
func retentionConfig(f *fork, p pacing) (config.Retention, error) {
	env := []string{
		"PROGRESSDB_DB_PATH=" + f.dbDir(),
		"PROGRESSDB_RETENTION_ENABLED=true",
		"PROGRESSDB_RETENTION_PERIOD=" + config.FormatDuration(period),
		"PROGRESSDB_RETENTION_AUDIT_PATH=" + f.auditDir(),
	}
	if p.batchSize > 0 {
		env = append(env, "PROGRESSDB_RETENTION_BATCH_SIZE="+strconv.Itoa(p.batchSize))
	}
	if p.pauseSet {
		env = append(env, "PROGRESSDB_RETENTION_BATCH_PAUSE="+p.pause.String())
	}
	if p.noYield {
		env = append(env, "PROGRESSDB_RETENTION_YIELD_TO_WRITES=false")
	}
	if p.export {
		env = append(env, "PROGRESSDB_RETENTION_EXPORT_PATH="+f.exportDir())
	}
	if p.noErase {
		env = append(env, "PROGRESSDB_RETENTION_ERASE=false")
	}
	if p.maxItems > 0 {
		env = append(env, "PROGRESSDB_RETENTION_MAX_ITEMS="+strconv.Itoa(p.maxItems))
	}
	if p.maxAge > 0 {
		env = append(env, "PROGRESSDB_RETENTION_MAX_AGE="+config.FormatDuration(p.maxAge))
	}
	if p.maxMessages > 0 {
		env = append(env, "PROGRESSDB_RETENTION_MAX_MESSAGES="+strconv.Itoa(p.maxMessages))
	}
	cfg, err := config.Load(env)
	if err != nil {
		return config.Retention{}, fmt.Errorf("retention config: %w", err)
	}
	return cfg.Retention, nil
}

// newRunner builds the real runner on the fork: real audit files, real
// lease, metrics unregistered, logs discarded.
func newRunner(f *fork, p pacing) (*retention.Runner, config.Retention, error) {
	cfg, err := retentionConfig(f, p)
	if err != nil {
		return nil, cfg, err
	}
	r, err := retention.NewRunner(retention.RunnerOptions{
		Store:   f.st,
		Config:  cfg,
		Logger:  slog.New(slog.DiscardHandler),
		Metrics: retention.NewMetrics(nil),
		Version: "bench",
	})
	return r, cfg, err
}

// runOnce performs one run and checks it completed.
func runOnce(ctx context.Context, r *retention.Runner) (retention.Result, time.Duration, error) {
	start := time.Now()
	res, err := r.Run(ctx, retention.RunRequest{Trigger: "cli"})
	el := time.Since(start)
	if err != nil {
		return res, el, fmt.Errorf("retention run: %w", err)
	}
	if res.Status != "completed" {
		return res, el, fmt.Errorf("retention run ended %q: %s", res.Status, res.Error)
	}
	if res.Failed > 0 {
		return res, el, fmt.Errorf("retention run: %d items failed", res.Failed)
	}
	return res, el, nil
}
