package retention

// This file fixes the subject-erasure types the HTTP API and CLI build
// against (spec §12, docs/sealed-content-design.md §7).

import (
	"context"
	"errors"
	"time"

	"github.com/progressdb/progressdb/audit"
	"github.com/progressdb/progressdb/server/internal/wire"
)

// Erasure statuses.
const (
	ErasurePending   = "pending"   // recorded; its run has not begun on it
	ErasureRunning   = "running"   // a run works on it, or was killed part way
	ErasureCompleted = "completed" // keys destroyed, versions purged and erased
	ErasureFailed    = "failed"    // its last run failed; the next run tries again
)

// ErrErasureIncomplete: the receipt of an erasure that has not completed.
var ErrErasureIncomplete = errors.New("the erasure has not completed: its receipt is written once it has")

// ErrReceiptUnsigned: a receipt whose audit footers are not signed, which
// `erasure verify --public-key` could never verify, is refused rather
// than handed out.
var ErrReceiptUnsigned = errors.New("a receipt is only given when the audit files that record the erasure are signed (PROGRESSDB_AUDIT_SIGNING_KEY)")

// ErasureStatus answers GET /admin/erasures/{id} and `erasure status`.
type ErasureStatus struct {
	ErasureID      string    `json:"erasure_id"`
	Status         string    `json:"status"`
	Subject        string    `json:"subject"` // hmac-sha256:<hex>, never the author
	RequestedAt    wire.Time `json:"requested_at"`
	CompletedAt    wire.Time `json:"completed_at"` // null until completed
	KeysDestroyed  int64     `json:"keys_destroyed"`
	VersionsPurged int64     `json:"versions_purged"`
	MessagesPurged int64     `json:"messages_purged"`
	HeldThreads    []string  `json:"held_threads"`
	RunIDs         []string  `json:"run_ids"`
	Error          string    `json:"error,omitempty"`
	// Shards, on a cluster (spec §11.1), is each shard's part; the
	// counts above are their totals.
	Shards []ShardErasure `json:"shards,omitempty"`
}

// ShardErasure is one shard's part of a cluster's erasure. A shard whose
// owner has not begun on it (none now: node down, move in progress) is
// pending.
type ShardErasure struct {
	Shard          int      `json:"shard"`
	Status         string   `json:"status"`
	KeysDestroyed  int64    `json:"keys_destroyed"`
	VersionsPurged int64    `json:"versions_purged"`
	MessagesPurged int64    `json:"messages_purged"`
	HeldThreads    []string `json:"held_threads"`
	Error          string   `json:"error,omitempty"`
}

// ErasureAccepted answers POST /admin/erasures.
type ErasureAccepted struct {
	ErasureID string `json:"erasure_id"`
	// RunID is the run started for it; "" on a cluster, where each
	// shard's owner runs its own (their IDs are in the status).
	RunID string `json:"run_id"`
}

// Erasures is what the HTTP API and CLI use for subject erasure; only a
// server with sealing on has one.
type Erasures interface {
	// Request records an erasure of author and starts its run at once.
	// Errors: ErrLeaseHeld (as *LeaseHeldError), ErrPaused, ErrClosed;
	// nothing is recorded then.
	Request(ctx context.Context, author string) (ErasureAccepted, error)
	// Erasure reads an erasure's status (store.ErrNotFound when unknown).
	Erasure(ctx context.Context, id string) (ErasureStatus, error)
	// Receipt builds a completed erasure's receipt (ErrErasureIncomplete
	// before it has completed).
	Receipt(ctx context.Context, id string) (audit.Receipt, error)
}

// ShardEraser is one database's part of a cluster's erasure (spec
// §11.1): a shard's owner adopts the erasure recorded cluster-wide.
type ShardEraser interface {
	// Adopt records erasure id of author here under the cluster's ID
	// unless it is recorded already, and starts its run when none is
	// going; it answers the erasure's status here. A completed erasure is
	// never recorded again. Errors: those of Request; the caller asks
	// again later, nothing is recorded then.
	Adopt(ctx context.Context, id, author string, requestedAt time.Time) (ErasureStatus, error)
	// RunEnded is closed when the next run of this database ends: taken
	// before Adopt, it tells when to look again.
	RunEnded() <-chan struct{}
}
