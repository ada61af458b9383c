package retention

// The coordinator lease (spec §4) keeps retention runs from overlapping.
//
// Two files work together:
//
//   - <path>.flock is locked with flock(2) for as long as the lease is held.
//     It excludes other processes on this host, and the kernel drops it when
//     the holder dies, so a same-host crash is taken over at once.
//   - <path> holds the lease as JSON (owner, host, expiry, epoch). Processes
//     on other hosts sharing the folder honour it until it expires.
//
// A third file, <path>.epoch, records the highest epoch ever handed out, so
// the fencing token never goes backwards even if the lease file is damaged
// or removed. A lease file that cannot be parsed is not ours to judge: it is
// treated as held until its modification time plus one TTL has passed, then
// taken over with the epoch from <path>.epoch (and refused if that is
// missing or damaged too, since the next epoch would be a guess).
//
// Every write goes to a temporary file in the same folder, is synced and
// then renamed over the target, so readers see either the old or the new
// content, never a torn one.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/gofrs/flock"

	"github.com/progressdb/progressdb/server/internal/wire"
	"github.com/progressdb/progressdb/server/pkg/durable"
)

// Lease errors callers act on.
var (
	ErrLeaseHeld    = errors.New("lease held elsewhere")
	ErrLeaseLost    = errors.New("lease lost")
	ErrLeaseSymlink = errors.New("lease path is a symbolic link")
	// ErrLeaseNotRegular: something other than a regular file (a folder, a
	// named pipe, a socket, a device) sits at a lease path. Opening a named
	// pipe would block for good, so it is refused before any open.
	ErrLeaseNotRegular = errors.New("lease path is not a regular file")
)

// errLeaseCorrupt marks lease or epoch files whose content cannot be trusted.
var errLeaseCorrupt = errors.New("lease file corrupt")

const (
	leaseDirPerm  = 0o750
	leaseFilePerm = 0o640
	// maxLeaseFile bounds what we read: a real lease is a few hundred bytes.
	maxLeaseFile = 64 << 10
)

// LeaseInfo is the lease file's content (spec §4).
type LeaseInfo struct {
	Owner      string    `json:"owner"`
	Host       string    `json:"host"`
	PID        int       `json:"pid"`
	Epoch      int64     `json:"epoch"`
	AcquiredAt wire.Time `json:"acquired_at"`
	RenewedAt  wire.Time `json:"renewed_at"`
	Expires    wire.Time `json:"expires"`
	// ReleasedAt is when the holder gave the lease up (Release), which also
	// sets Expires to that time; absent while held and after a crash, so
	// that a status tells a lease released from one left to expire.
	ReleasedAt wire.Time `json:"released_at,omitzero"`
}

// LeaseHeldError is returned (wrapping ErrLeaseHeld) with the holder. When
// the lease file cannot be read the holder is unknown: Owner is empty and
// Expires, when set, is the earliest time a take-over will be tried.
type LeaseHeldError struct{ Holder LeaseInfo }

func (e *LeaseHeldError) Error() string {
	who := e.Holder.Owner
	if who == "" {
		who = "an unknown holder"
	}
	if e.Holder.Expires.IsZero() {
		return "lease held by " + who
	}
	return "lease held by " + who + " until " + e.Holder.Expires.UTC().Format(time.RFC3339)
}

func (e *LeaseHeldError) Unwrap() error { return ErrLeaseHeld }

// LeaseConfig configures acquisition.
type LeaseConfig struct {
	Path  string        // lease JSON file
	TTL   time.Duration // lease lifetime
	Owner string        // unique per process, e.g. host/pid/random
	Host  string        // defaults to os.Hostname
	PID   int           // defaults to os.Getpid
	Now   func() time.Time
}

func (c LeaseConfig) lockPath() string  { return c.Path + ".flock" }
func (c LeaseConfig) epochPath() string { return c.Path + ".epoch" }

// renewDeadline is how long after a renewal the holder may still act. It
// is shorter than the TTL so the holder stops before anybody else could
// take over at expiry (the Kubernetes leader-election rule).
func (c LeaseConfig) renewDeadline() time.Duration { return c.TTL * 2 / 3 }

func (c LeaseConfig) withDefaults() (LeaseConfig, error) {
	switch {
	case c.Path == "":
		return c, errors.New("lease: empty path")
	case c.TTL <= 0:
		return c, fmt.Errorf("lease: TTL must be positive, got %s", c.TTL)
	case c.Owner == "":
		return c, errors.New("lease: empty owner")
	}
	if err := FillHolder(&c.Host, &c.PID, &c.Now); err != nil {
		return c, fmt.Errorf("lease: %w", err)
	}
	return c, nil
}

// FillHolder sets what a lease holder left unset: its host name
// (os.Hostname), its process id (os.Getpid) and its clock (time.Now).
// The file lease and the cluster's etcd lease both name holders this way.
func FillHolder(host *string, pid *int, now *func() time.Time) error {
	if *host == "" {
		h, err := os.Hostname()
		if err != nil {
			return fmt.Errorf("host name: %w", err)
		}
		*host = h
	}
	if *pid == 0 {
		*pid = os.Getpid()
	}
	if *now == nil {
		*now = time.Now
	}
	return nil
}

// Lease is a held coordinator lease. Check and Info are safe to call from
// any goroutine while Heartbeat runs.
type Lease struct {
	cfg   LeaseConfig
	lock  *flock.Flock
	done  chan struct{} // closed by Release; stops Heartbeat
	lostc chan struct{} // closed once lost is set: the lost signal (Done)

	io sync.Mutex // serialises file updates (Renew, Release)

	mu       sync.Mutex // guards the fields below; never held during I/O
	info     LeaseInfo
	renewed  time.Time // clock reading of the last renewal, monotonic when available
	lost     error     // non-nil once the lease is lost or released; set by setLostLocked
	released bool
}

// AcquireLease takes the lease or fails at once (never queues).
func AcquireLease(ctx context.Context, cfg LeaseConfig) (*Lease, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Dir(cfg.Path), leaseDirPerm); err != nil {
		return nil, fmt.Errorf("lease folder: %w", err)
	}
	for _, p := range []string{cfg.Path, cfg.lockPath(), cfg.epochPath()} {
		if err := CheckLeasePath(p); err != nil {
			return nil, err
		}
	}

	// O_NONBLOCK: a named pipe put there after the check must not hang us.
	lock := flock.New(cfg.lockPath(),
		flock.SetFlag(os.O_CREATE|os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK),
		flock.SetPermissions(leaseFilePerm))
	ok, err := lock.TryLock()
	if err != nil {
		return nil, fmt.Errorf("lease lock %s: %w", cfg.lockPath(), err)
	}
	if !ok {
		// Another process on this host holds it; the file tells who.
		holder, _ := ReadLease(cfg.Path)
		return nil, &LeaseHeldError{Holder: holder}
	}

	l, err := takeOver(cfg, lock)
	if err != nil {
		_ = lock.Unlock()
		return nil, err
	}
	return l, nil
}

// takeOver decides, with the host lock held, whether the lease file lets us
// in, and writes our claim.
func takeOver(cfg LeaseConfig, lock *flock.Flock) (*Lease, error) {
	now := cfg.Now()

	prev, err := ReadLease(cfg.Path)
	prevEpoch := prev.Epoch // 0 when there is no lease file yet
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case errors.Is(err, ErrLeaseSymlink), errors.Is(err, ErrLeaseNotRegular):
		return nil, err
	case err != nil:
		// We never write a torn file, so damage came from outside and may
		// hide a live holder on another host. Wait one TTL from the last
		// change before taking over; the epoch file carries the count on.
		st, serr := os.Lstat(cfg.Path)
		if serr != nil {
			return nil, fmt.Errorf("lease: %w", err)
		}
		if until := st.ModTime().Add(cfg.TTL); now.Before(until) {
			return nil, &LeaseHeldError{Holder: LeaseInfo{Expires: wire.At(until.UTC())}}
		}
		prevEpoch = -1 // unknown
	case prev.Host != cfg.Host && now.Before(prev.Expires.Time):
		return nil, &LeaseHeldError{Holder: prev}
	}
	// Otherwise: expired, or left by this host, whose holder must be gone
	// since we got the host lock.

	epoch, err := nextEpoch(cfg.epochPath(), prevEpoch)
	if err != nil {
		return nil, err
	}
	// Record the epoch before using it, so a crash in between can only
	// skip a number, never repeat one.
	if err := durable.WriteFile(cfg.epochPath(), []byte(strconv.FormatInt(epoch, 10)+"\n"), leaseFilePerm); err != nil {
		return nil, fmt.Errorf("lease epoch: %w", err)
	}

	at := now.UTC()
	info := LeaseInfo{
		Owner:      cfg.Owner,
		Host:       cfg.Host,
		PID:        cfg.PID,
		Epoch:      epoch,
		AcquiredAt: wire.At(at),
		RenewedAt:  wire.At(at),
		Expires:    wire.At(at.Add(cfg.TTL)),
	}
	if err := writeLease(cfg.Path, info); err != nil {
		return nil, err
	}

	// A process on another host may have raced us through the same steps;
	// whoever renamed last owns the file.
	got, err := ReadLease(cfg.Path)
	if err != nil {
		return nil, fmt.Errorf("lease: reading back: %w", err)
	}
	if got.Owner != info.Owner || got.Epoch != info.Epoch {
		return nil, &LeaseHeldError{Holder: got}
	}

	return &Lease{
		cfg:     cfg,
		lock:    lock,
		done:    make(chan struct{}),
		lostc:   make(chan struct{}),
		info:    info,
		renewed: now,
	}, nil
}

// nextEpoch returns one more than the highest epoch on record. prev is the
// lease file's epoch, 0 when there is none, -1 when the file is unreadable.
// When the count cannot be known for sure it refuses rather than risk
// handing out an epoch twice; removing the damaged files resets it.
func nextEpoch(epochPath string, prev int64) (int64, error) {
	data, err := readNoFollow(epochPath)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if prev < 0 {
			return 0, fmt.Errorf("lease: file unreadable and %s missing: previous epoch unknown", epochPath)
		}
		return prev + 1, nil
	case err != nil:
		return 0, fmt.Errorf("lease epoch: %w", err)
	}
	recorded, err := strconv.ParseInt(strings.TrimSpace(string(data)), 10, 64)
	if err != nil || recorded < 0 {
		return 0, fmt.Errorf("%w: %s: %q", errLeaseCorrupt, epochPath, data)
	}
	return max(recorded, prev) + 1, nil
}

// Info returns the lease as last written by this holder.
func (l *Lease) Info() LeaseInfo {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.info
}

// Renew extends the lease after checking it is still ours and unexpired.
// Any failure other than a cancelled ctx loses the lease for good.
func (l *Lease) Renew(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	l.io.Lock()
	defer l.io.Unlock()

	l.mu.Lock()
	info, renewed, lost := l.info, l.renewed, l.lost
	l.mu.Unlock()
	if lost != nil {
		return lost
	}

	now := l.cfg.Now()
	cur, err := ReadLease(l.cfg.Path)
	switch {
	case err != nil:
		return l.lose(fmt.Errorf("lease file unreadable: %w", err))
	case cur.Owner != info.Owner || cur.Epoch != info.Epoch:
		return l.lose(fmt.Errorf("taken over by %s (epoch %d)", cur.Owner, cur.Epoch))
	case !now.Before(renewed.Add(l.cfg.renewDeadline())):
		return l.lose(fmt.Errorf("expired: renew deadline %s passed",
			renewed.Add(l.cfg.renewDeadline()).UTC().Format(time.RFC3339Nano)))
	}

	next := info
	next.RenewedAt = wire.At(now.UTC())
	next.Expires = wire.At(next.RenewedAt.Add(l.cfg.TTL))
	if err := writeLease(l.cfg.Path, next); err != nil {
		return l.lose(fmt.Errorf("write failed: %w", err))
	}

	l.mu.Lock()
	defer l.mu.Unlock()
	l.info, l.renewed = next, now
	return nil
}

// lose marks the lease lost (the first reason sticks) and returns the error.
func (l *Lease) lose(reason error) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.setLostLocked(fmt.Errorf("%w: %w", ErrLeaseLost, reason))
	return l.lost
}

// setLostLocked records the first loss and closes the lost signal.
func (l *Lease) setLostLocked(err error) {
	if l.lost == nil {
		l.lost = err
		close(l.lostc)
	}
}

// Done is closed once the lease is lost (seen by Renew or Check) or released.
func (l *Lease) Done() <-chan struct{} { return l.lostc }

// Check returns nil while the lease is safely held: ours, and not within a
// safety margin of its expiry. Callers check before every delete batch.
func (l *Lease) Check() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.checkLocked()
}

func (l *Lease) checkLocked() error {
	if l.lost != nil {
		return l.lost
	}
	deadline := l.renewed.Add(l.cfg.renewDeadline())
	if !l.cfg.Now().Before(deadline) {
		// Lost for good: a late renewal must not revive it.
		l.setLostLocked(fmt.Errorf("%w: expired: renew deadline %s passed", ErrLeaseLost,
			deadline.UTC().Format(time.RFC3339Nano)))
		return l.lost
	}
	return nil
}

// Heartbeat renews every TTL/3 until ctx ends, the lease is released or
// renewal fails; after a failure Check reports ErrLeaseLost.
func (l *Lease) Heartbeat(ctx context.Context) {
	t := time.NewTicker(max(l.cfg.TTL/3, time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-l.done:
			return
		case <-t.C:
			if err := l.Renew(ctx); err != nil {
				return
			}
		}
	}
}

// Release gives the lease up (expires it and unlocks). If the lease is
// still safely ours the file is rewritten with expires=now, so another host
// need not wait out the TTL; a lost lease's file is left alone, since it may
// already belong to someone else. Calling Release again does nothing.
func (l *Lease) Release() error {
	l.io.Lock()
	defer l.io.Unlock()

	l.mu.Lock()
	if l.released {
		l.mu.Unlock()
		return nil
	}
	info, stillOurs := l.info, l.checkLocked() == nil
	l.released = true
	l.setLostLocked(fmt.Errorf("%w: released", ErrLeaseLost))
	close(l.done)
	l.mu.Unlock()

	var werr error
	if stillOurs {
		if cur, err := ReadLease(l.cfg.Path); err == nil && cur.Owner == info.Owner && cur.Epoch == info.Epoch {
			now := wire.At(l.cfg.Now().UTC())
			info.Expires, info.ReleasedAt = now, now
			werr = writeLease(l.cfg.Path, info)
		}
	}
	if err := l.lock.Unlock(); err != nil {
		return errors.Join(werr, fmt.Errorf("lease unlock: %w", err))
	}
	return werr
}

// ReadLease reads the lease file without taking it (status).
func ReadLease(path string) (LeaseInfo, error) {
	if err := CheckLeasePath(path); err != nil {
		return LeaseInfo{}, err
	}
	data, err := readNoFollow(path)
	if err != nil {
		return LeaseInfo{}, fmt.Errorf("read lease: %w", err)
	}
	var info LeaseInfo
	if err := json.Unmarshal(data, &info); err != nil {
		return LeaseInfo{}, fmt.Errorf("%w: %s: %w", errLeaseCorrupt, path, err)
	}
	if info.Owner == "" || info.Epoch <= 0 || info.Expires.IsZero() {
		return LeaseInfo{}, fmt.Errorf("%w: %s: missing owner, epoch or expires", errLeaseCorrupt, path)
	}
	return info, nil
}

func writeLease(path string, info LeaseInfo) error {
	data, err := json.MarshalIndent(info, "", "  ")
	if err != nil {
		return fmt.Errorf("lease encode: %w", err)
	}
	if err := durable.WriteFile(path, append(data, '\n'), leaseFilePerm); err != nil {
		return fmt.Errorf("lease write: %w", err)
	}
	return nil
}

// CheckLeasePath fails with ErrLeaseSymlink when path is a symbolic link,
// so a planted link cannot redirect our writes, and with
// ErrLeaseNotRegular when it is anything else but a regular file. A
// missing path is fine.
func CheckLeasePath(path string) error {
	st, err := os.Lstat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		return fmt.Errorf("lease: %w", err)
	case st.Mode()&fs.ModeSymlink != 0:
		return fmt.Errorf("%w: %s", ErrLeaseSymlink, path)
	case !st.Mode().IsRegular():
		return fmt.Errorf("%w: %s is %s", ErrLeaseNotRegular, path, fileKind(st.Mode()))
	}
	return nil
}

// fileKind names a file type for an error message.
func fileKind(m fs.FileMode) string {
	switch {
	case m.IsDir():
		return "a folder"
	case m&fs.ModeNamedPipe != 0:
		return "a named pipe (FIFO)"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m&fs.ModeDevice != 0:
		return "a device"
	default:
		return "not a regular file"
	}
}

// readNoFollow reads a small regular file. O_NONBLOCK and the type check
// on the open file keep a named pipe swapped in after CheckLeasePath from
// blocking the read.
func readNoFollow(path string) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if st, err := f.Stat(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	} else if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%w: %s is %s", ErrLeaseNotRegular, path, fileKind(st.Mode()))
	}
	data, err := io.ReadAll(io.LimitReader(f, maxLeaseFile+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(data) > maxLeaseFile {
		return nil, fmt.Errorf("%w: %s: larger than %d bytes", errLeaseCorrupt, path, maxLeaseFile)
	}
	return data, nil
}
