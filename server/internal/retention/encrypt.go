package retention

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/progressdb/progressdb/server/pkg/store"
)

// Sealing a database written before sealing was on (`progressdb keys
// encrypt-existing`, spec §12): every plain record is rewritten sealed,
// thread by thread in ID order, in batches of BATCH_SIZE records, then
// the plaintext it replaced is erased from every file (the erase step,
// docs/erasure.md). It is maintenance of the whole database, so it runs
// as a run does: under the lease and this process's run slot, stopped by
// a pause, a lost lease or a shutdown at the next batch, paced by the
// pacer and the runner's clock, and seen by the runner's test hooks. The
// store keeps where it stands (store.SealCursor): killed, it resumes
// after the last thread it finished; done, a second pass finds nothing to
// seal.

// Steps of a sealing pass, for EncryptProgress.Step.
const (
	EncryptSealing = "sealing"
	EncryptErasing = "erasing"
)

// EncryptRequest asks for a sealing pass.
type EncryptRequest struct {
	// Progress, when set, is told where the pass stands about every
	// progressReportEvery, at each step of the erase, and once at the end.
	Progress func(EncryptProgress)
}

// EncryptProgress is where a sealing pass stands. Threads are counted
// whatever their state (a sealed one is passed over quickly); a resumed
// pass counts the threads its earlier part finished as done.
type EncryptProgress struct {
	Step    string        `json:"step"`           // EncryptSealing, then EncryptErasing
	Done    int64         `json:"done"`           // threads passed
	Total   int64         `json:"total"`          // threads when the pass started
	Records int64         `json:"records_sealed"` // records sealed by this process
	Rate    float64       `json:"rate"`           // threads a second, this process's
	Left    time.Duration `json:"left"`           // estimate; 0 when unknown
	// Erase is where the erase step is, once it has begun.
	Erase *store.EraseProgress `json:"erase,omitempty"`
}

// EncryptResult describes a sealing pass.
type EncryptResult struct {
	Resumed bool   // a pass killed earlier was resumed
	After   string // the last thread the earlier part finished, when resumed
	Threads int64  // threads passed by this call
	Sealed  int64  // records sealed by this call
	Erased  bool   // the erase step ran
	EraseMS int64  // how long it took
	// Before is how the threads stood when the pass started.
	Before store.ThreadCounts
}

// EncryptExisting seals what the database holds in plain. The store must
// seal (store.ErrNotSealing otherwise). A pass asked for while retention
// is paused answers ErrPaused, one asked for while the lease is held a
// *LeaseHeldError; in both cases nothing is sealed. An error part way
// leaves the pass to resume: the result says what was done.
func (r *Runner) EncryptExisting(ctx context.Context, req EncryptRequest) (EncryptResult, error) {
	var res EncryptResult
	if r.st.Sealer() == nil {
		return res, store.ErrNotSealing
	}
	if paused, err := r.paused(ctx); paused {
		if err != nil {
			return res, fmt.Errorf("%w: %w", ErrPaused, err)
		}
		return res, ErrPaused
	}
	err := r.exclusive(ctx, "encrypt existing", func(ctx context.Context, lease *leaseSession) error {
		if r.fenced {
			ctx = store.WithEpoch(ctx, lease.info().Epoch)
		}
		// Here, under the lease and before the first record is sealed, is
		// where the database starts to be a sealed one: whatever records
		// that (and binds the key store to it) belongs before the pass.
		p := &sealPass{r: r, lease: lease, res: &res, report: req.Progress, pace: newPacer(r.cfg.BatchPause, r.userWrites())}
		return p.run(ctx)
	})
	// The raise sealing made at open goes to the trail now, not at the
	// next start.
	if rerr := r.RecordRaises(context.WithoutCancel(ctx)); rerr != nil {
		err = errors.Join(err, fmt.Errorf("record format raises: %w", rerr))
	}
	return res, err
}

// userWrites is what the pacer watches when it yields to user writes.
func (r *Runner) userWrites() func() uint64 {
	if r.cfg.YieldToWrites {
		return r.st.UserWrites
	}
	return nil
}

// sealPass is one call of EncryptExisting under the lease.
type sealPass struct {
	r      *Runner
	lease  *leaseSession
	res    *EncryptResult
	report func(EncryptProgress)
	pace   *pacer

	batches             int // batch boundaries reached, for the test hook
	start               time.Time
	done0, done, total  int64 // threads: finished before this call, passed, in all
	lastLog, lastReport time.Time
}

func (p *sealPass) run(ctx context.Context) error {
	r, st := p.r, p.r.st
	// Where the pass stands, read under the lease: a pass killed part way
	// left its last finished thread.
	pass, resumed, err := st.SealCursor(ctx)
	if err != nil {
		return err
	}
	p.res.Resumed, p.res.After = resumed, pass.After
	if p.res.Before, err = st.CountThreads(ctx, ""); err != nil {
		return fmt.Errorf("count threads: %w", err)
	}
	p.total = p.res.Before.Total()
	if resumed {
		left, err := st.CountThreads(ctx, pass.After)
		if err != nil {
			return fmt.Errorf("count threads: %w", err)
		}
		p.done0 = p.total - left.Total()
	}
	p.done = p.done0
	p.start = r.clock.Now()
	p.lastLog = p.start
	r.log.Info("keys_encrypt_started", "threads", p.total, "threads_sealed", p.res.Before.Sealed,
		"threads_plain", p.res.Before.Plain, "resumed", resumed, "after_thread", pass.After, "threads_done", p.done0)
	after := pass.After
	for {
		tid, err := st.NextThread(ctx, after)
		if err != nil {
			return err
		}
		if tid == "" {
			break
		}
		if err := p.sealThread(ctx, tid, after); err != nil {
			return err
		}
		p.res.Threads++
		p.done++
		after = tid
		p.progress(false)
	}
	p.progress(true)
	if err := p.erase(ctx); err != nil {
		return err
	}
	return st.EndSealPass(ctx)
}

// sealThread seals thread tid batch by batch until none of its records
// is plain; after is the last thread done before it.
func (p *sealPass) sealThread(ctx context.Context, tid, after string) error {
	r := p.r
	for {
		if err := p.beforeBatch(ctx); err != nil {
			return err
		}
		limit := r.cfg.BatchSize
		if l := p.pace.batchLimit(); l > 0 {
			limit = min(limit, l)
		}
		n, finished, err := r.st.SealThread(ctx, tid, after, limit)
		if err != nil {
			return err
		}
		p.res.Sealed += int64(n)
		if n > 0 {
			r.log.Debug("keys_encrypt_batch", "thread_id", tid, "sealed", n, "sealed_total", p.res.Sealed)
			// Paced as a purge's batches are: between batches that wrote.
			p.pace.observe(r.clock.Now())
			if err := sleep(ctx, r.clock, jitter(p.pace.pause())); err != nil {
				return err
			}
		}
		if finished {
			return nil
		}
	}
}

// beforeBatch is the check before every batch: the tests' hook, then not
// shut down, lease still ours, not paused.
func (p *sealPass) beforeBatch(ctx context.Context) error {
	p.batches++
	if h := p.r.hooks.beforeBatch; h != nil {
		h(ctx, batchPoint{Lease: p.lease.lease, N: p.batches})
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := p.lease.check(); err != nil {
		return err
	}
	if paused, err := p.r.pausedAtBatch(ctx); paused {
		if err != nil {
			return fmt.Errorf("%w: %w", ErrPaused, err)
		}
		return ErrPaused
	}
	return nil
}

// erase runs the erase step over the whole key space unless nothing was
// left to erase: the plaintext replaced may be in any file.
func (p *sealPass) erase(ctx context.Context) error {
	r := p.r
	erased, err := r.st.Erased(ctx)
	if err != nil || erased {
		return err
	}
	if err := p.lease.check(); err != nil {
		return err
	}
	start := r.clock.Now()
	r.log.Info("keys_encrypt_erase_started", "why", "the plaintext replaced is in the files until they are rewritten")
	progress := func(ep store.EraseProgress) {
		newStep := ep.Step != store.EraseCompact || ep.Done == 0
		if newStep {
			r.log.Info("keys_encrypt_erase_progress", "step", ep.Step, "ranges_done", ep.Done, "ranges", ep.Total)
		}
		now := r.clock.Now()
		if p.report != nil && (newStep || now.Sub(p.lastReport) >= progressReportEvery) {
			at := p.at(now)
			at.Step, at.Erase = EncryptErasing, &ep
			p.lastReport = now
			p.report(at)
		}
	}
	er, err := r.st.Erase(ctx, nil, store.EraseOptions{Full: true, Rate: int64(r.cfg.EraseRate) << 20, Progress: progress})
	took := r.clock.Now().Sub(start)
	r.metrics.EraseDuration.Observe(took.Seconds())
	if err != nil {
		return err
	}
	p.res.Erased, p.res.EraseMS = true, took.Milliseconds()
	r.log.Info("keys_encrypt_erased", "tables_removed", er.TablesRemoved, "logs_removed", er.LogsRemoved, "erase_ms", took.Milliseconds())
	return nil
}

// at is the progress at now.
func (p *sealPass) at(now time.Time) EncryptProgress {
	at := EncryptProgress{Step: EncryptSealing, Done: p.done, Total: max(p.total, p.done), Records: p.res.Sealed}
	if elapsed := now.Sub(p.start).Seconds(); elapsed > 0 {
		at.Rate = float64(p.done-p.done0) / elapsed
	}
	if at.Rate > 0 && at.Total > at.Done {
		at.Left = time.Duration(float64(at.Total-at.Done) / at.Rate * float64(time.Second))
	}
	return at
}

// progress logs a summary about every progressEvery and tells the
// caller's Progress more often; last forces both (the sealing is over).
func (p *sealPass) progress(last bool) {
	now := p.r.clock.Now()
	if p.report != nil && (last || now.Sub(p.lastReport) >= progressReportEvery) {
		p.lastReport = now
		p.report(p.at(now))
	}
	if !last && now.Sub(p.lastLog) < progressEvery {
		return
	}
	p.lastLog = now
	at := p.at(now)
	attrs := []any{"done", at.Done, "total", at.Total, "records_sealed", at.Records, "rate_per_sec", math.Round(at.Rate*10) / 10}
	if at.Left > 0 {
		attrs = append(attrs, "time_left", at.Left.Round(time.Second))
	}
	p.r.log.Info("keys_encrypt_progress", attrs...)
}
