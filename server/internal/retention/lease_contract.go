package retention

// This file fixes the lease's exported surface. Implementations replace the
// bodies; signatures change only together with every caller.

import (
	"context"
	"errors"
	"time"
)

var errTODO = errors.New("retention: not implemented yet")

// Lease errors callers act on.
var (
	ErrLeaseHeld    = errors.New("lease held elsewhere")
	ErrLeaseLost    = errors.New("lease lost")
	ErrLeaseSymlink = errors.New("lease path is a symbolic link")
)

// LeaseInfo is the lease file's content (spec §4).
type LeaseInfo struct {
	Owner      string    `json:"owner"`
	Host       string    `json:"host"`
	PID        int       `json:"pid"`
	Epoch      int64     `json:"epoch"`
	AcquiredAt time.Time `json:"acquired_at"`
	RenewedAt  time.Time `json:"renewed_at"`
	Expires    time.Time `json:"expires"`
}

// LeaseHeldError is returned (wrapping ErrLeaseHeld) with the holder.
type LeaseHeldError struct{ Holder LeaseInfo }

func (e *LeaseHeldError) Error() string { return "lease held by " + e.Holder.Owner }
func (e *LeaseHeldError) Unwrap() error { return ErrLeaseHeld }

// LeaseConfig configures acquisition.
type LeaseConfig struct {
	Path  string        // lease JSON file
	TTL   time.Duration // lease lifetime
	Owner string        // unique per process, e.g. host/pid/random
	Host  string
	PID   int
	Now   func() time.Time
}

// Lease is a held coordinator lease.
type Lease struct{}

// AcquireLease takes the lease or fails at once (never queues).
func AcquireLease(ctx context.Context, cfg LeaseConfig) (*Lease, error) { return nil, errTODO }

// Info returns the lease as last written by this holder.
func (l *Lease) Info() LeaseInfo { return LeaseInfo{} }

// Renew extends the lease after checking it is still ours and unexpired.
func (l *Lease) Renew(ctx context.Context) error { return errTODO }

// Check returns nil while the lease is safely held: ours, and not within a
// safety margin of its expiry. Callers check before every delete batch.
func (l *Lease) Check() error { return errTODO }

// Heartbeat renews every TTL/3 until ctx ends or renewal fails; after a
// failure Check reports ErrLeaseLost.
func (l *Lease) Heartbeat(ctx context.Context) {}

// Release gives the lease up (expires it and unlocks).
func (l *Lease) Release() error { return errTODO }

// ReadLease reads the lease file without taking it (status).
func ReadLease(path string) (LeaseInfo, error) { return LeaseInfo{}, errTODO }
