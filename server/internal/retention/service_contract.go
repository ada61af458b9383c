package retention

// This file fixes the run and status types the HTTP API and CLI build
// against. Implementations replace the bodies; signatures change only
// together with every caller.

import (
	"context"
	"time"

	"github.com/progressdb/progressdb/audit"
	"github.com/progressdb/progressdb/server/internal/wire"
	"github.com/progressdb/progressdb/server/pkg/store"
)

// ErrDisabled: a scheduled (or startup) run came while retention is
// disabled. PROGRESSDB_RETENTION_ENABLED switches the scheduler; runs asked
// for by hand (TriggerAdmin, TriggerCLI) do not need it.
var ErrDisabled = errorString("retention is disabled")

type errorString string

func (e errorString) Error() string { return string(e) }

// RunRequest asks for one run.
type RunRequest struct {
	DryRun  bool   // forces a dry run; a configured DRY_RUN forces it too
	Trigger string // "schedule", "startup", "admin", "cli"; "restore" and "start" replay (replay.go)
	// Progress, when set, is called from the run's goroutine with how far
	// it has come, a few times a second at most (a progress bar).
	Progress func(Progress)
	// Replay tunes a replay run (trigger restore or start); ignored by
	// other runs.
	Replay ReplayOptions
}

// Progress is how far a run has come. Done and Due count the index
// entries of every source (deletion index, age index, messages beyond a
// cap): Due is counted once when the run starts (what is due then), Done
// those looked at since, so Done/Due is the share of the run's work done
// whatever MAX_ITEMS is. DueByCause and DoneByCause split them by cause
// (only causes with something due or done are present).
type Progress struct {
	Done        int64            `json:"done"`
	Due         int64            `json:"due"` // -1 when it could not be counted
	DoneByCause map[string]int64 `json:"done_by_cause,omitempty"`
	DueByCause  map[string]int64 `json:"due_by_cause,omitempty"`
	Purged      int64            `json:"purged"` // items purged (in a dry run: that would be)
	Rate        float64          `json:"rate"`   // entries a second
	Left        time.Duration    `json:"left"`   // estimate; 0 when unknown
	// Erase is set once the scans are over and the erase step (which may
	// take minutes on a large database) has begun: where it is.
	Erase *store.EraseProgress `json:"erase,omitempty"`
}

// Result summarises a run (spec §7 last_run).
type Result struct {
	RunID       string    `json:"run_id"`
	StartedAt   wire.Time `json:"started_at"`
	FinishedAt  wire.Time `json:"finished_at"` // null while the run goes
	Status      string    `json:"status"`      // completed|failed|interrupted|aborted
	DryRun      bool      `json:"dry_run"`
	Scanned     int64     `json:"scanned"`
	Eligible    int64     `json:"eligible"`
	Purged      int64     `json:"purged"`
	Failed      int64     `json:"failed"`
	Skipped     int64     `json:"skipped"`
	Stamped     int64     `json:"stamped"`
	KeysDeleted int64     `json:"keys_deleted"`
	AuditFile   string    `json:"audit_file"`
	Error       string    `json:"error,omitempty"`
	// ByCause breaks the counts down by cause (deleted, max_age,
	// max_messages); only causes the run met are present.
	ByCause map[string]CauseCounts `json:"by_cause,omitempty"`
	// Exported and ExportFile are the footer's, when the run exported
	// (PROGRESSDB_RETENTION_EXPORT_PATH).
	Exported   int64  `json:"exported,omitempty"`
	ExportFile string `json:"export_file,omitempty"`
}

// CauseCounts are a run's counts for one cause; the audit package counts
// them the same way when it rebuilds a summary from an audit file.
type CauseCounts = audit.CauseCount

// LeaseStatus is the lease part of Status.
type LeaseStatus struct {
	Owner   string    `json:"owner"`   // the holder, or the last one
	Expires wire.Time `json:"expires"` // null when the lease was never taken
	Held    bool      `json:"held"`    // held by anybody and not expired
	// State is LeaseHeld, LeaseReleased (the last holder gave it up at
	// ReleasedAt, when Expires was set to), LeaseExpired (the holder
	// stopped renewing it: it crashed or lost its storage) or LeaseNone.
	State      string    `json:"state"`
	ReleasedAt wire.Time `json:"released_at,omitzero"`
}

// States of LeaseStatus.
const (
	LeaseNone     = "none" // never taken
	LeaseHeld     = "held"
	LeaseReleased = "released"
	LeaseExpired  = "expired"
)

// leaseStatus describes a lease file's content at now.
func leaseStatus(info LeaseInfo, now time.Time) LeaseStatus {
	st := LeaseStatus{Owner: info.Owner, Expires: info.Expires, ReleasedAt: info.ReleasedAt}
	switch {
	case !info.ReleasedAt.IsZero():
		st.State = LeaseReleased
	case now.Before(info.Expires.Time):
		st.State, st.Held = LeaseHeld, true
	default:
		st.State = LeaseExpired
	}
	return st
}

// Status answers GET /admin/retention and `retention status`.
type Status struct {
	Enabled       bool        `json:"enabled"`
	DryRun        bool        `json:"dry_run"`
	Period        string      `json:"period"`
	MessagePeriod string      `json:"message_period"`
	Cron          string      `json:"cron"`
	MaxAge        string      `json:"max_age"`      // "0": off
	MaxMessages   int         `json:"max_messages"` // 0: off
	NextRun       wire.Time   `json:"next_run"`     // null when none is scheduled
	Lease         LeaseStatus `json:"lease"`
	LastRun       *Result     `json:"last_run"`
	PauseState
}

// Service is what the HTTP API and CLI use: runs on demand and status.
type Service interface {
	// Run runs now and waits. Errors: ErrLeaseHeld (as *LeaseHeldError),
	// ErrDisabled, ErrPaused, or a failure (the Result still describes the run).
	Run(ctx context.Context, req RunRequest) (Result, error)
	// Start begins a run in the background and returns its run ID once the
	// lease is held, or the same errors as Run.
	Start(ctx context.Context, req RunRequest) (string, error)
	Status(ctx context.Context) (Status, error)
	// SetPause pauses or resumes retention (spec §3.2) and returns the
	// stored switch.
	SetPause(ctx context.Context, paused bool, reason string) (PauseState, error)
	// ThreadPolicy, SetThreadPolicy and ClearThreadPolicy read, replace and
	// remove a thread's policy override (spec §3.1). Errors: store.ErrNotFound
	// (unknown thread), store.ErrInvalidArgument (a value the environment
	// would refuse too), store.ErrPurgeInProgress.
	ThreadPolicy(ctx context.Context, tid string) (ThreadPolicy, error)
	SetThreadPolicy(ctx context.Context, tid string, o PolicyOverride) (ThreadPolicy, error)
	ClearThreadPolicy(ctx context.Context, tid string) error
}
