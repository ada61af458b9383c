package retention

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/progressdb/progressdb/audit"
	"github.com/progressdb/progressdb/server/internal/wire"
	"github.com/progressdb/progressdb/server/pkg/config"
	"github.com/progressdb/progressdb/server/pkg/keystore"
	"github.com/progressdb/progressdb/server/pkg/store"
)

const (
	defaultBatchSize = 1000
	defaultLeaseTTL  = 5 * time.Minute
	leaseFileName    = "retention.lock"

	// clockSkew is how far in the future a deleted_ts may lie before the
	// run treats it as a clock problem rather than a deletion (spec §3).
	clockSkew = 5 * time.Minute
	// A group of finished purges is made durable (store sync, audit
	// records, audit sync, markers cleared) once it holds this many items
	// or flushKeysFactor*BatchSize keys.
	flushItems      = 64
	flushKeysFactor = 8
	// progressEvery spaces the progress lines of long runs;
	// progressReportEvery the calls of a RunRequest's Progress.
	progressEvery       = 10 * time.Second
	progressReportEvery = 200 * time.Millisecond
)

// RunnerOptions configure NewRunner.
type RunnerOptions struct {
	Store   *store.Store
	Config  config.Retention
	Logger  *slog.Logger     // slog.Default() when nil
	Metrics *Metrics         // unregistered metrics when nil
	Now     func() time.Time // Clock.Now when nil
	Clock   Clock            // times the pauses between batches; SystemClock when nil
	Host    string           // os.Hostname() when empty
	PID     int              // os.Getpid() when zero
	Version string           // written into audit headers
	// SigningKey, when set, signs every audit footer the runner writes,
	// the aborted ones it seals included (PROGRESSDB_AUDIT_SIGNING_KEY).
	SigningKey ed25519.PrivateKey
	// Coordinator hands out the run lease; the file lease at the
	// configuration's lease path when nil.
	Coordinator Coordinator
	// Fenced makes every write of a run carry its lease's epoch, so that
	// the store refuses the batches of a holder that was deposed meanwhile
	// (store.WithEpoch). A cluster sets it with its shard's coordinator.
	Fenced bool
	// Shard, when set, is the cluster shard of Store, written into the
	// audit header.
	Shard *int
	// Pause is the pause switch; the store's when nil. A cluster gives
	// every shard's runner the one in etcd.
	Pause PauseSwitch
	// Keys, when set, is the key store of sealed content (spec §12): runs
	// finish the subject erasures pending in it and erase it, a thread
	// purge destroys the thread's data keys, and each journal group's
	// records wait for the key store's erase step. Nil: the store's Sealer
	// when it is a key store (Store.Sealer), else nothing is sealed.
	Keys *keystore.KeyStore
	// OnFenced, when set, sees the write of a run that the store refused
	// because a newer owner's epoch had written (store.ErrFenced): a
	// cluster counts it in progressdb_cluster_fencing_rejections_total.
	OnFenced func(error)
	// Blobs, when set, is the attachments' blob store: a run deletes the
	// blobs its purges owe (and a killed run's), and records each. Nil:
	// the debts wait in the store for a runner that has it. A store that
	// can also walk its objects (OrphanStore) has its orphans swept.
	Blobs BlobStore
	// OrphanScan is the most objects of the blob store one run looks at
	// for orphans (defaultOrphanScan when 0); the next run goes on after
	// the last one.
	OrphanScan int
}

// Runner performs retention runs against one store. It never runs two at
// once: a run asked for while another is going in this process is refused
// the same way as one refused by the lease (the lease covers other
// processes).
type Runner struct {
	st        *store.Store
	cfg       config.Retention
	log       *slog.Logger
	metrics   *Metrics
	now       func() time.Time
	clock     Clock
	host      string
	pid       int
	version   string
	auditOpts audit.Options      // how audit files are written (signing)
	owner     string             // lease owner: host/pid/random, unique per runner
	coord     Coordinator        // the run lease
	fenced    bool               // writes carry the lease's epoch
	shard     *int               // the cluster shard, for audit headers
	pause     PauseSwitch        // the pause switch
	onFenced  func(error)        // a write refused by the fence; nil: not reported
	keys      *keystore.KeyStore // sealed content's keys; nil: sealing is off
	blobs     BlobStore          // attachments' blobs; nil: none deleted
	orphanCap int                // objects a run's orphan sweep looks at

	slot   chan struct{}             // holds a token while a run is going
	active atomic.Pointer[LeaseInfo] // lease of the run going, for refusals
	last   atomic.Pointer[Result]    // the last run's result, for status

	// ended is closed, and replaced, each time a run ends (RunEnded).
	endedMu sync.Mutex
	ended   chan struct{}

	hooks runnerHooks
}

// runnerHooks let tests act at points of a run without sleeping. They are
// nil in production.
type runnerHooks struct {
	// beforeBatch runs at every batch boundary of a purge, before the
	// context, lease and pause checks.
	beforeBatch func(ctx context.Context, b batchPoint)
	// beforeConfirm runs before a claim's re-check (claims.confirm).
	beforeConfirm func(ctx context.Context, m store.PurgeMarker)
	// afterOweShred and afterShred run once a thread purge's record is
	// owed as shredded, and once its keys are destroyed.
	afterOweShred, afterShred func(ctx context.Context, m store.PurgeMarker)
	// afterRaiseRecord runs once a format raise's record is in the trail,
	// before the store forgets it owes it.
	afterRaiseRecord func(ctx context.Context, fr store.FormatRaise)
}

// batchPoint describes a batch boundary to the test hook.
type batchPoint struct {
	RunID string
	Lease HeldLease
	Audit *audit.Writer
	N     int // boundaries reached so far in this run, from 1
}

// NewRunner checks the configuration, fills in defaults and returns a runner.
func NewRunner(o RunnerOptions) (*Runner, error) {
	if o.Store == nil {
		return nil, errors.New("retention: runner needs a store")
	}
	cfg, err := normalize(o.Config)
	if err != nil {
		return nil, err
	}
	r := &Runner{
		st:        o.Store,
		cfg:       cfg,
		log:       o.Logger,
		metrics:   o.Metrics,
		now:       o.Now,
		clock:     o.Clock,
		host:      o.Host,
		pid:       o.PID,
		version:   o.Version,
		auditOpts: audit.Options{SigningKey: o.SigningKey},
		slot:      make(chan struct{}, 1),
		ended:     make(chan struct{}),
	}
	if o.Store != nil && o.Store.Replicated() {
		// Every replica writes the run's file from the group's log.
		r.auditOpts.Replicate = replicateTrail(o.Store)
	}
	if r.log == nil {
		r.log = slog.Default()
	}
	if r.metrics == nil {
		r.metrics = NewMetrics(nil)
	}
	if r.clock == nil {
		r.clock = SystemClock{}
	}
	if r.now == nil {
		r.now = r.clock.Now
	}
	if r.host == "" {
		if r.host, err = os.Hostname(); err != nil || r.host == "" {
			r.host = "unknown-host"
		}
	}
	if r.pid == 0 {
		r.pid = os.Getpid()
	}
	r.owner = fmt.Sprintf("%s/%d/%s", r.host, r.pid, randomHex(4))
	r.coord = o.Coordinator
	r.fenced = o.Fenced
	if o.Shard != nil {
		n := *o.Shard
		r.shard = &n
	}
	if r.coord == nil {
		r.coord = FileCoordinator{Config: r.leaseConfig()}
	}
	r.pause = o.Pause
	r.onFenced = o.OnFenced
	r.keys = o.Keys
	r.blobs = o.Blobs
	r.orphanCap = o.OrphanScan
	if r.orphanCap <= 0 {
		r.orphanCap = defaultOrphanScan
	}
	if ks, ok := o.Store.Sealer().(*keystore.KeyStore); ok && r.keys == nil {
		r.keys = ks
	}
	if r.pause == nil {
		r.pause = storePause{st: r.st}
	}
	return r, nil
}

// normalize applies the defaults of zero fields and validates the rest.
// config.Load has done this for real configurations; it matters for
// configurations built in code.
func normalize(c config.Retention) (config.Retention, error) {
	if c.MessagePeriod == 0 {
		c.MessagePeriod = c.Period
	}
	if c.BatchSize == 0 {
		c.BatchSize = defaultBatchSize
	}
	if c.LeaseTTL == 0 {
		c.LeaseTTL = defaultLeaseTTL
	}
	if c.OrphanGrace == 0 {
		c.OrphanGrace = defaultOrphanGrace
	}
	if c.LeasePath == "" && c.AuditPath != "" {
		c.LeasePath = filepath.Join(c.AuditPath, leaseFileName)
	}
	switch {
	case c.Period <= 0:
		return c, fmt.Errorf("retention: period must be positive, got %s", c.Period)
	case c.MessagePeriod < 0:
		return c, fmt.Errorf("retention: message period must be positive, got %s", c.MessagePeriod)
	case c.AuditPath == "":
		return c, errors.New("retention: audit path is required")
	case c.BatchSize < 0:
		return c, fmt.Errorf("retention: batch size must be positive, got %d", c.BatchSize)
	case c.BatchPause < 0:
		return c, fmt.Errorf("retention: batch pause must not be negative, got %s", c.BatchPause)
	case c.MaxItems < 0:
		return c, fmt.Errorf("retention: max items must not be negative, got %d", c.MaxItems)
	case c.MaxAge < 0:
		return c, fmt.Errorf("retention: max age must not be negative, got %s", c.MaxAge)
	case c.MaxMessages < 0:
		return c, fmt.Errorf("retention: max messages must not be negative, got %d", c.MaxMessages)
	case c.LeaseTTL < 0:
		return c, fmt.Errorf("retention: lease TTL must be positive, got %s", c.LeaseTTL)
	case c.OrphanGrace < 0:
		return c, fmt.Errorf("retention: orphan grace must be positive, got %s", c.OrphanGrace)
	}
	return c, nil
}

// Config returns the effective configuration (defaults applied).
func (r *Runner) Config() config.Retention { return r.cfg }

// LastResult returns the result of the last run this runner finished, or
// nil when it has not finished one.
func (r *Runner) LastResult() *Result {
	if res := r.last.Load(); res != nil {
		c := *res
		return &c
	}
	return nil
}

// Run performs one run and waits for it. A run refused by the lease (or
// by a run already going in this process) returns a *LeaseHeldError and
// writes no audit file. A failed run returns an error and a Result that
// describes it; an interrupted run returns a nil error and status
// "interrupted".
func (r *Runner) Run(ctx context.Context, req RunRequest) (Result, error) {
	rn, res, err := r.begin(ctx, req)
	if err != nil {
		return res, err
	}
	return rn.execute(ctx)
}

// begin does what must happen before a run can be reported as started:
// it takes this process's run slot and the lease, and starts the
// heartbeat. On success the caller must call execute, which releases both.
func (r *Runner) begin(ctx context.Context, req RunRequest) (*run, Result, error) {
	replay := audit.IsReplayTrigger(req.Trigger)
	dry := (req.DryRun || r.cfg.DryRun) && !replay
	// Enabled is the scheduler's switch: runs asked for by hand (admin
	// API, command line) and replays do not need it.
	if !dry && !r.cfg.Enabled && scheduled(req.Trigger) {
		return nil, Result{}, ErrDisabled
	}
	// A replay repeats purges that happened: neither the pause nor DRY_RUN
	// holds it back (replay.go).
	if !dry && !replay {
		// A paused run is skipped before it takes anything: no lease, no
		// audit file. Dry runs still work while paused.
		paused, err := r.paused(ctx)
		if paused {
			r.metrics.Runs.WithLabelValues(resultPaused).Inc()
			r.log.Info("retention_run_skipped", "trigger", req.Trigger, "reason", "paused")
			if err != nil {
				r.log.Error("retention_pause_unreadable", "err", err)
				return nil, Result{}, fmt.Errorf("%w: %w", ErrPaused, err)
			}
			return nil, Result{}, ErrPaused
		}
	}
	select {
	case r.slot <- struct{}{}:
	default:
		holder := LeaseInfo{Owner: r.owner, Host: r.host, PID: r.pid}
		if li := r.active.Load(); li != nil {
			holder = *li
		}
		r.metrics.Runs.WithLabelValues(resultSkippedLease).Inc()
		r.log.Info("retention_run_skipped", "trigger", req.Trigger, "reason", "a run is going in this process",
			"holder", holder.Owner)
		return nil, Result{}, &LeaseHeldError{Holder: holder}
	}

	lease, err := openSession(ctx, r.coord)
	if err != nil {
		<-r.slot
		var held *LeaseHeldError
		if errors.As(err, &held) {
			r.metrics.Runs.WithLabelValues(resultSkippedLease).Inc()
			r.log.Info("retention_run_skipped", "trigger", req.Trigger, "reason", "lease held elsewhere",
				"holder", held.Holder.Owner, "holder_expires", held.Holder.Expires.Time)
			return nil, Result{}, err
		}
		r.metrics.countError(stageLease)
		r.metrics.Runs.WithLabelValues(resultFailed).Inc()
		now := r.now().UTC()
		res := Result{StartedAt: wire.At(now), FinishedAt: wire.At(now), Status: resultFailed, DryRun: dry,
			Error: "acquire lease: " + err.Error()}
		r.last.Store(&res)
		r.log.Error("retention_run_failed", "trigger", req.Trigger, "stage", stageLease, "err", err)
		return nil, res, fmt.Errorf("acquire lease: %w", err)
	}
	info := lease.info()
	r.active.Store(&info)
	r.metrics.LeaseHeld.Set(1)

	rn := &run{
		r:       r,
		id:      newRunID(),
		trigger: req.Trigger,
		dry:     dry,
		lease:   lease,
		sources: r.sourcesWith(req),
		meter:   newMeter(req.Progress),
	}
	rn.release = func() {
		if err := lease.Close(); err != nil {
			r.metrics.countError(stageLease)
			r.log.Warn("retention_lease_release_failed", "run_id", rn.id, "err", err)
		}
		r.metrics.LeaseHeld.Set(0)
		r.active.Store(nil)
		<-r.slot
		r.endedMu.Lock()
		close(r.ended)
		r.ended = make(chan struct{})
		r.endedMu.Unlock()
	}
	return rn, Result{}, nil
}

// RunEnded is closed when the next run of this runner ends (every run
// after this call): an erasure's worker waits on it rather than polling.
func (r *Runner) RunEnded() <-chan struct{} {
	r.endedMu.Lock()
	defer r.endedMu.Unlock()
	return r.ended
}

func (r *Runner) leaseConfig() LeaseConfig {
	return LeaseConfig{Path: r.cfg.LeasePath, TTL: r.cfg.LeaseTTL, Owner: r.owner, Host: r.host, PID: r.pid, Now: r.now}
}

// Recover seals audit and export files that a crashed process left in
// progress, so that they are sealed at the next start and not only at the
// next run (retention enabled or not: otherwise a dead run would look as if
// it ran forever). It works under the lease, so it never seals a live run's
// file; when the lease is held (or a run is going here) the holder seals
// them itself. With nothing in progress it takes no lease and creates
// nothing. It then writes the format raises the database still owes the
// trail (RecordRaises), so every start pays them.
func (r *Runner) Recover(ctx context.Context) ([]string, error) {
	sealed, err := r.sealAbandoned(ctx)
	if rerr := r.RecordRaises(ctx); rerr != nil {
		err = errors.Join(err, fmt.Errorf("record format raises: %w", rerr))
	}
	return sealed, err
}

// sealAbandoned is Recover's sealing of the files a crash left.
func (r *Runner) sealAbandoned(ctx context.Context) ([]string, error) {
	pending, err := audit.InProgress(r.cfg.AuditPath)
	if err != nil {
		return nil, err
	}
	if r.cfg.ExportPath != "" {
		exports, err := audit.ExportsInProgress(r.cfg.ExportPath)
		if err != nil {
			return nil, err
		}
		pending = append(pending, exports...)
	}
	if len(pending) == 0 {
		return nil, nil
	}
	select {
	case r.slot <- struct{}{}:
	default:
		return nil, nil
	}
	defer func() { <-r.slot }()
	lease, err := r.coord.Acquire(ctx)
	if errors.Is(err, ErrLeaseHeld) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("acquire lease: %w", err)
	}
	defer lease.Release()
	sealed, err := audit.SealAbandonedWith(r.cfg.AuditPath, r.now().UTC(), r.auditOpts)
	for _, p := range sealed {
		r.log.Warn("retention_audit_sealed_aborted", "file", p)
	}
	r.sealExports("")
	return sealed, err
}

// panicked logs and counts a run's panic (stack from the deferred
// recover). One from inside Pebble stops the process instead: it may
// leave Pebble's locks held, and every later write would hang.
func (r *Runner) panicked(trigger string, p any, stack []byte) {
	r.metrics.countError(stagePanic)
	r.log.Error("retention_run_panic", "trigger", trigger, "panic", fmt.Sprint(p), "stack", string(stack))
	if store.IsStoragePanic(stack) {
		r.st.Fatal(fmt.Sprintf("panic in storage during a retention run: %v", p))
	}
}

// newRunID returns 12 lowercase hex characters: short, unique enough for
// one audit folder, and valid under the ID rule.
func newRunID() string { return randomHex(6) }

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // crypto/rand.Read never fails (it panics on a broken system source)
	return hex.EncodeToString(b)
}
