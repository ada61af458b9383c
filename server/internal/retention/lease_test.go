package retention

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/progressdb/progressdb/server/internal/testtools"
	"github.com/progressdb/progressdb/server/internal/testtools/testclock"
	"github.com/progressdb/progressdb/server/internal/wire"
)

// Environment of the helper process the subprocess tests start.
const (
	envHelperMode = "PROGRESSDB_LEASE_HELPER"
	envHelperPath = "PROGRESSDB_LEASE_PATH"
	envHelperHost = "PROGRESSDB_LEASE_HOST"
	envHelperOut  = "PROGRESSDB_LEASE_OUT"
)

func newLeaseClock() *testclock.Clock {
	return testclock.New(time.Date(2025, 3, 14, 9, 26, 53, 0, time.UTC))
}

func leaseConfig(path, owner, host string, now func() time.Time) LeaseConfig {
	return LeaseConfig{Path: path, TTL: time.Minute, Owner: owner, Host: host, PID: 4242, Now: now}
}

func mustAcquireLease(t *testing.T, cfg LeaseConfig) *Lease {
	t.Helper()
	l, err := AcquireLease(context.Background(), cfg)
	if err != nil {
		t.Fatalf("AcquireLease(%s): %v", cfg.Owner, err)
	}
	t.Cleanup(func() { _ = l.Release() })
	return l
}

// requireHeldBy asserts err is a LeaseHeldError naming owner.
func requireHeldBy(t *testing.T, err error, owner string) *LeaseHeldError {
	t.Helper()
	var held *LeaseHeldError
	if !errors.Is(err, ErrLeaseHeld) || !errors.As(err, &held) {
		t.Fatalf("got %v, want a LeaseHeldError", err)
	}
	if held.Holder.Owner != owner {
		t.Fatalf("holder = %q, want %q", held.Holder.Owner, owner)
	}
	return held
}

// umask reads the process umask without changing it.
func leaseUmask(t *testing.T) fs.FileMode {
	t.Helper()
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0o022
	}
	for line := range strings.Lines(string(data)) {
		if v, ok := strings.CutPrefix(line, "Umask:"); ok {
			m, err := strconv.ParseUint(strings.TrimSpace(v), 8, 32)
			if err != nil {
				t.Fatal(err)
			}
			return fs.FileMode(m)
		}
	}
	return 0o022
}

func requireLeasePerm(t *testing.T, path string, want fs.FileMode) {
	t.Helper()
	st, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	if got := st.Mode().Perm(); got != want&^leaseUmask(t) {
		t.Errorf("%s: mode %o, want %o", filepath.Base(path), got, want&^leaseUmask(t))
	}
}

func TestLeaseAcquireReleaseReacquire(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "audit", "retention.lock") // folder does not exist yet
	clk := newLeaseClock()

	for i, owner := range []string{"a", "b", "c"} {
		l, err := AcquireLease(context.Background(), leaseConfig(path, owner, "host-"+owner, clk.Now))
		if err != nil {
			t.Fatalf("acquire %s: %v", owner, err)
		}
		now := clk.Now()
		want := LeaseInfo{
			Owner: owner, Host: "host-" + owner, PID: 4242, Epoch: int64(i + 1),
			AcquiredAt: wire.At(now), RenewedAt: wire.At(now), Expires: wire.At(now.Add(time.Minute)),
		}
		if got := l.Info(); got != want {
			t.Fatalf("Info() = %+v, want %+v", got, want)
		}
		got, err := ReadLease(path)
		if err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Fatalf("file = %+v, want %+v", got, want)
		}
		if err := l.Check(); err != nil {
			t.Fatalf("Check: %v", err)
		}

		clk.Advance(time.Second)
		if err := l.Release(); err != nil {
			t.Fatalf("Release: %v", err)
		}
		if err := l.Release(); err != nil {
			t.Fatalf("second Release: %v", err)
		}
		got, err = ReadLease(path)
		if err != nil {
			t.Fatal(err)
		}
		if !got.Expires.Equal(clk.Now()) || got.Epoch != int64(i+1) {
			t.Fatalf("after release: expires %s epoch %d, want %s and %d", got.Expires, got.Epoch, clk.Now(), i+1)
		}
		if err := l.Check(); !errors.Is(err, ErrLeaseLost) {
			t.Fatalf("Check after Release = %v, want ErrLeaseLost", err)
		}
		if err := l.Renew(context.Background()); !errors.Is(err, ErrLeaseLost) {
			t.Fatalf("Renew after Release = %v, want ErrLeaseLost", err)
		}
		// Each owner claims a new host: a released lease needs no waiting.
	}

	// The stored form: RFC 3339 UTC strings.
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var fields map[string]any
	if err := json.Unmarshal(raw, &fields); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"acquired_at", "renewed_at", "expires"} {
		s, _ := fields[k].(string)
		if _, err := time.Parse(time.RFC3339, s); err != nil || !strings.HasSuffix(s, "Z") {
			t.Errorf("%s = %q, want RFC 3339 UTC", k, s)
		}
	}
	for _, k := range []string{"owner", "host", "pid", "epoch"} {
		if _, ok := fields[k]; !ok {
			t.Errorf("field %s missing in %s", k, raw)
		}
	}

	requireLeasePerm(t, filepath.Dir(path), 0o750)
	for _, p := range []string{path, path + ".flock", path + ".epoch"} {
		requireLeasePerm(t, p, 0o640)
	}
	entries, err := os.ReadDir(filepath.Dir(path))
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 3 {
		t.Errorf("folder holds %d entries, want lease, lock and epoch only: %v", len(entries), entries)
	}
}

func TestLeaseSecondAcquirerHeld(t *testing.T) {
	path := filepath.Join(t.TempDir(), "retention.lock")
	clk := newLeaseClock()
	first := mustAcquireLease(t, leaseConfig(path, "first", "host-a", clk.Now))

	// Same host and another host: both are turned away while it is held.
	for _, host := range []string{"host-a", "host-b"} {
		_, err := AcquireLease(context.Background(), leaseConfig(path, "second", host, clk.Now))
		held := requireHeldBy(t, err, "first")
		if held.Holder.Epoch != 1 || !held.Holder.Expires.Equal(clk.Now().Add(time.Minute)) {
			t.Fatalf("holder = %+v", held.Holder)
		}
		if !strings.Contains(err.Error(), "first") {
			t.Fatalf("message %q does not name the holder", err)
		}
	}
	if err := first.Check(); err != nil {
		t.Fatalf("holder disturbed: %v", err)
	}

	if err := first.Release(); err != nil {
		t.Fatal(err)
	}
	second := mustAcquireLease(t, leaseConfig(path, "second", "host-b", clk.Now))
	if got := second.Info().Epoch; got != 2 {
		t.Fatalf("epoch = %d, want 2", got)
	}
}

func TestLeaseOtherHostWaitsForExpiry(t *testing.T) {
	path := filepath.Join(t.TempDir(), "retention.lock")
	clk := newLeaseClock()
	first := mustAcquireLease(t, leaseConfig(path, "first", "host-a", clk.Now))
	// A process that died on another host leaves the file but no flock.
	if err := first.lock.Unlock(); err != nil {
		t.Fatal(err)
	}
	expires := first.Info().Expires

	clk.Set(expires.Time.Add(-time.Millisecond))
	_, err := AcquireLease(context.Background(), leaseConfig(path, "second", "host-b", clk.Now))
	requireHeldBy(t, err, "first")

	clk.Set(expires.Time)
	second := mustAcquireLease(t, leaseConfig(path, "second", "host-b", clk.Now))
	if got := second.Info().Epoch; got != 2 {
		t.Fatalf("epoch = %d, want 2", got)
	}
	// The dead holder, were it to wake up, finds out on its next renewal.
	if err := first.Renew(context.Background()); !errors.Is(err, ErrLeaseLost) || !strings.Contains(err.Error(), "second") {
		t.Fatalf("stale Renew = %v, want ErrLeaseLost naming the new holder", err)
	}
}

func TestLeaseRenew(t *testing.T) {
	path := filepath.Join(t.TempDir(), "retention.lock")
	clk := newLeaseClock()
	l := mustAcquireLease(t, leaseConfig(path, "me", "host-a", clk.Now))
	acquired := clk.Now()

	clk.Advance(20 * time.Second) // TTL/3
	if err := l.Renew(context.Background()); err != nil {
		t.Fatalf("Renew: %v", err)
	}
	got, err := ReadLease(path)
	if err != nil {
		t.Fatal(err)
	}
	want := LeaseInfo{
		Owner: "me", Host: "host-a", PID: 4242, Epoch: 1,
		AcquiredAt: wire.At(acquired), RenewedAt: wire.At(clk.Now()), Expires: wire.At(clk.Now().Add(time.Minute)),
	}
	if got != want || l.Info() != want {
		t.Fatalf("after Renew file %+v, Info %+v, want %+v", got, l.Info(), want)
	}

	// Past the first deadline (acquired + 40s) but within the renewed one.
	clk.Set(acquired.Add(50 * time.Second))
	if err := l.Check(); err != nil {
		t.Fatalf("Check within renewed deadline: %v", err)
	}
}

func TestLeaseCheckAfterRenewDeadline(t *testing.T) {
	path := filepath.Join(t.TempDir(), "retention.lock")
	clk := newLeaseClock()
	l := mustAcquireLease(t, leaseConfig(path, "me", "host-a", clk.Now))
	start := clk.Now()

	clk.Set(start.Add(40*time.Second - time.Nanosecond)) // TTL*2/3 minus a hair
	if err := l.Check(); err != nil {
		t.Fatalf("Check before deadline: %v", err)
	}
	clk.Set(start.Add(40 * time.Second))
	if err := l.Check(); !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("Check at deadline = %v, want ErrLeaseLost", err)
	}
	// Still before expires, but a late renewal must not revive it.
	if err := l.Renew(context.Background()); !errors.Is(err, ErrLeaseLost) || !strings.Contains(err.Error(), "expired") {
		t.Fatalf("late Renew = %v, want ErrLeaseLost (expired)", err)
	}
	got, err := ReadLease(path)
	if err != nil {
		t.Fatal(err)
	}
	if !got.RenewedAt.Equal(start) {
		t.Fatalf("late Renew wrote the file: renewed_at %s", got.RenewedAt)
	}
	clk.Set(start) // even with time turned back, lost stays lost
	if err := l.Check(); !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("Check after loss = %v, want ErrLeaseLost", err)
	}
}

func TestLeaseRenewDetectsTakeover(t *testing.T) {
	path := filepath.Join(t.TempDir(), "retention.lock")
	clk := newLeaseClock()
	l := mustAcquireLease(t, leaseConfig(path, "me", "host-a", clk.Now))

	thief := l.Info()
	thief.Owner, thief.Host, thief.Epoch = "thief", "host-x", 7
	if err := writeLease(path, thief); err != nil {
		t.Fatal(err)
	}

	clk.Advance(time.Second)
	err := l.Renew(context.Background())
	if !errors.Is(err, ErrLeaseLost) || !strings.Contains(err.Error(), "thief") {
		t.Fatalf("Renew = %v, want ErrLeaseLost naming the thief", err)
	}
	if err := l.Check(); !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("Check = %v, want ErrLeaseLost", err)
	}
	// Releasing a lost lease must leave the new holder's file alone.
	if err := l.Release(); err != nil {
		t.Fatal(err)
	}
	got, err := ReadLease(path)
	if err != nil {
		t.Fatal(err)
	}
	if got != thief {
		t.Fatalf("Release touched the new holder's lease: %+v", got)
	}
}

func TestLeaseRenewFailsWhenUnwritable(t *testing.T) {
	path := filepath.Join(t.TempDir(), "retention.lock")
	clk := newLeaseClock()
	l := mustAcquireLease(t, leaseConfig(path, "me", "host-a", clk.Now))

	// Root ignores permissions; a folder in the file's place stops any
	// rename over it whoever we run as.
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(path, "blocker"), 0o750); err != nil {
		t.Fatal(err)
	}
	if err := l.Renew(context.Background()); !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("Renew = %v, want ErrLeaseLost", err)
	}
	if err := l.Check(); !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("Check = %v, want ErrLeaseLost", err)
	}

	// The write itself fails cleanly and leaves no temporary file behind.
	if err := writeLease(path, l.Info()); err == nil {
		t.Fatal("writing over a folder succeeded")
	}
	entries, err := os.ReadDir(filepath.Dir(path))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if strings.Contains(e.Name(), ".tmp-") {
			t.Errorf("temporary file left behind: %s", e.Name())
		}
	}
}

func TestLeaseHeartbeat(t *testing.T) {
	path := filepath.Join(t.TempDir(), "retention.lock")
	cfg := leaseConfig(path, "me", "host-a", time.Now)
	// Short enough to see several renewals, long enough (500ms of slack
	// between a renewal and the deadline) for a loaded machine's fsyncs.
	cfg.TTL = 1500 * time.Millisecond
	l := mustAcquireLease(t, cfg)
	first := l.Info().RenewedAt

	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		l.Heartbeat(ctx)
	}()

	// Check is called concurrently with renewals; -race watches.
	deadline := time.Now().Add(5 * time.Second)
	for !l.Info().RenewedAt.After(first.Time) {
		if err := l.Check(); err != nil {
			t.Fatalf("Check while heartbeating: %v", err)
		}
		if time.Now().After(deadline) {
			t.Fatal("heartbeat never renewed")
		}
		time.Sleep(5 * time.Millisecond)
	}
	// Several TTLs pass and the lease stays valid.
	for end := time.Now().Add(2 * cfg.TTL); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
		if err := l.Check(); err != nil {
			t.Fatalf("Check while heartbeating: %v", err)
		}
	}
	cancel()
	<-stopped
	if err := l.Check(); err != nil {
		t.Fatalf("cancelling the heartbeat lost the lease: %v", err)
	}

	// A takeover stops the heartbeat on its own and loses the lease.
	thief := l.Info()
	thief.Owner = "thief"
	if err := writeLease(path, thief); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		l.Heartbeat(context.Background())
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("heartbeat kept going after a takeover")
	}
	if err := l.Check(); !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("Check = %v, want ErrLeaseLost", err)
	}
}

func TestLeaseHeartbeatStopsOnRelease(t *testing.T) {
	path := filepath.Join(t.TempDir(), "retention.lock")
	l := mustAcquireLease(t, leaseConfig(path, "me", "host-a", time.Now)) // TTL of a minute
	done := make(chan struct{})
	go func() {
		defer close(done)
		l.Heartbeat(context.Background())
	}()
	if err := l.Release(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("heartbeat kept going after Release")
	}
}

func TestLeaseSymlink(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(dir, "precious")
	if err := os.WriteFile(target, []byte("keep me"), 0o640); err != nil {
		t.Fatal(err)
	}
	clk := newLeaseClock()

	t.Run("lease path", func(t *testing.T) {
		path := filepath.Join(dir, "a.lock")
		if err := os.Symlink(target, path); err != nil {
			t.Fatal(err)
		}
		_, err := AcquireLease(context.Background(), leaseConfig(path, "me", "host-a", clk.Now))
		if !errors.Is(err, ErrLeaseSymlink) {
			t.Fatalf("AcquireLease = %v, want ErrLeaseSymlink", err)
		}
		if _, err := ReadLease(path); !errors.Is(err, ErrLeaseSymlink) {
			t.Fatalf("ReadLease = %v, want ErrLeaseSymlink", err)
		}
	})
	t.Run("lock path", func(t *testing.T) {
		path := filepath.Join(dir, "b.lock")
		missing := filepath.Join(dir, "not-created")
		if err := os.Symlink(missing, path+".flock"); err != nil {
			t.Fatal(err)
		}
		_, err := AcquireLease(context.Background(), leaseConfig(path, "me", "host-a", clk.Now))
		if !errors.Is(err, ErrLeaseSymlink) {
			t.Fatalf("AcquireLease = %v, want ErrLeaseSymlink", err)
		}
		if _, err := os.Lstat(missing); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("link target was created: %v", err)
		}
		if _, err := os.Lstat(path); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("lease file written despite the refusal: %v", err)
		}
	})

	got, err := os.ReadFile(target)
	if err != nil || string(got) != "keep me" {
		t.Fatalf("symlink target changed: %q, %v", got, err)
	}
}

func TestLeaseReadMissing(t *testing.T) {
	_, err := ReadLease(filepath.Join(t.TempDir(), "none.lock"))
	if !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("ReadLease = %v, want ErrNotExist", err)
	}
}

func TestLeaseCorruptFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "retention.lock")
	clk := newLeaseClock()
	for range 2 {
		l := mustAcquireLease(t, leaseConfig(path, "me", "host-a", clk.Now))
		if err := l.Release(); err != nil {
			t.Fatal(err)
		}
	}

	if err := os.WriteFile(path, []byte(`{"owner": "half-writ`), 0o640); err != nil {
		t.Fatal(err)
	}
	mtime := clk.Now().Add(time.Second)
	if err := os.Chtimes(path, mtime, mtime); err != nil {
		t.Fatal(err)
	}

	// An unreadable file may hide a live holder elsewhere: wait one TTL
	// from its last change, even on the same host.
	clk.Set(mtime.Add(time.Minute - time.Millisecond))
	_, err := AcquireLease(context.Background(), leaseConfig(path, "me", "host-a", clk.Now))
	held := requireHeldBy(t, err, "")
	if !held.Holder.Expires.Equal(mtime.Add(time.Minute)) {
		t.Fatalf("retry time = %s, want %s", held.Holder.Expires, mtime.Add(time.Minute))
	}

	// Then it is taken over and the epoch count carries on.
	clk.Set(mtime.Add(time.Minute))
	l := mustAcquireLease(t, leaseConfig(path, "me", "host-a", clk.Now))
	if got := l.Info().Epoch; got != 3 {
		t.Fatalf("epoch = %d, want 3", got)
	}
	if err := l.Release(); err != nil {
		t.Fatal(err)
	}

	t.Run("lease unreadable and epoch file missing", func(t *testing.T) {
		if err := os.Remove(path + ".epoch"); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte("garbage"), 0o640); err != nil {
			t.Fatal(err)
		}
		clk.Set(time.Now().Add(time.Hour))
		_, err := AcquireLease(context.Background(), leaseConfig(path, "me", "host-a", clk.Now))
		if err == nil || errors.Is(err, ErrLeaseHeld) || !strings.Contains(err.Error(), "epoch unknown") {
			t.Fatalf("AcquireLease = %v, want a refusal for an unknown epoch", err)
		}
	})
	t.Run("epoch file corrupt", func(t *testing.T) {
		if err := os.WriteFile(path+".epoch", []byte("many"), 0o640); err != nil {
			t.Fatal(err)
		}
		_, err := AcquireLease(context.Background(), leaseConfig(path, "me", "host-a", clk.Now))
		if !errors.Is(err, errLeaseCorrupt) {
			t.Fatalf("AcquireLease = %v, want errLeaseCorrupt", err)
		}
	})
	t.Run("higher epoch in the lease file wins", func(t *testing.T) {
		if err := os.WriteFile(path+".epoch", []byte("3\n"), 0o640); err != nil {
			t.Fatal(err)
		}
		info := LeaseInfo{Owner: "old", Host: "host-a", Epoch: 9, Expires: wire.At(clk.Now())}
		if err := writeLease(path, info); err != nil {
			t.Fatal(err)
		}
		l := mustAcquireLease(t, leaseConfig(path, "me", "host-a", clk.Now))
		if got := l.Info().Epoch; got != 10 {
			t.Fatalf("epoch = %d, want 10", got)
		}
	})
}

// TestLeaseHelperProcess is not a test: the subprocess tests run the test
// binary again with it selected and the mode in the environment.
func TestLeaseHelperProcess(t *testing.T) {
	mode := os.Getenv(envHelperMode)
	if mode == "" {
		return
	}
	cfg := LeaseConfig{
		Path:  os.Getenv(envHelperPath),
		TTL:   time.Minute,
		Owner: fmt.Sprintf("child-%d", os.Getpid()),
		Host:  os.Getenv(envHelperHost),
	}
	var err error
	switch mode {
	case "hold":
		err = leaseHelperHold(cfg)
	case "contend":
		err = leaseHelperContend(cfg, os.Getenv(envHelperOut))
	default:
		err = fmt.Errorf("unknown mode %q", mode)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Exit(0)
}

// leaseHelperHold acquires, reports the epoch and holds until stdin closes (or
// it is killed).
func leaseHelperHold(cfg LeaseConfig) error {
	l, err := AcquireLease(context.Background(), cfg)
	if err != nil {
		return err
	}
	fmt.Printf("acquired %d\n", l.Info().Epoch)
	_, _ = io.Copy(io.Discard, os.Stdin)
	return l.Release()
}

// leaseHelperContend competes for the lease for a while and appends one
// "epoch start end" line (Unix nanoseconds) per tenure to out.
func leaseHelperContend(cfg LeaseConfig, out string) error {
	f, err := os.OpenFile(out, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o640)
	if err != nil {
		return err
	}
	defer f.Close()
	for end := time.Now().Add(1500 * time.Millisecond); time.Now().Before(end); {
		l, err := AcquireLease(context.Background(), cfg)
		if errors.Is(err, ErrLeaseHeld) {
			time.Sleep(time.Duration(rand.IntN(2000)) * time.Microsecond)
			continue
		}
		if err != nil {
			return err
		}
		start := time.Now().UnixNano()
		if err := l.Check(); err != nil {
			return err
		}
		time.Sleep(time.Duration(500+rand.IntN(1500)) * time.Microsecond)
		stop := time.Now().UnixNano()
		if _, err := fmt.Fprintf(f, "%d %d %d\n", l.Info().Epoch, start, stop); err != nil {
			return err
		}
		if err := l.Release(); err != nil {
			return err
		}
		time.Sleep(time.Duration(rand.IntN(1000)) * time.Microsecond)
	}
	return nil
}

// startLeaseHelper starts a child in mode (hold or contend) on the lease
// file at path, as host.
func startLeaseHelper(t *testing.T, mode, path, host string, extraEnv ...string) *testtools.Child {
	t.Helper()
	env := append([]string{envHelperMode + "=" + mode, envHelperPath + "=" + path, envHelperHost + "=" + host}, extraEnv...)
	return testtools.StartChild(t, "TestLeaseHelperProcess", env...)
}

// startLeaseHolder starts a child that acquires the lease and holds it
// (until its stdin closes); it returns once the child reports success.
func startLeaseHolder(t *testing.T, path, host string) *testtools.Child {
	t.Helper()
	c := startLeaseHelper(t, "hold", path, host)
	if got, _ := c.Line(); got != "acquired 1" {
		t.Fatalf("child said %q, want %q", got, "acquired 1")
	}
	return c
}

func TestLeaseSubprocessCrashSameHost(t *testing.T) {
	path := filepath.Join(t.TempDir(), "retention.lock")
	child := startLeaseHolder(t, path, "host-a")

	cfg := LeaseConfig{Path: path, TTL: time.Minute, Owner: "parent", Host: "host-a"}
	_, err := AcquireLease(context.Background(), cfg)
	held := requireHeldBy(t, err, fmt.Sprintf("child-%d", child.Cmd.Process.Pid))
	if held.Holder.PID != child.Cmd.Process.Pid || held.Holder.Epoch != 1 {
		t.Fatalf("holder = %+v, want pid %d epoch 1", held.Holder, child.Cmd.Process.Pid)
	}

	child.Kill() // SIGKILL: no chance to release

	// Same host: the free flock proves the holder gone, no waiting.
	l := mustAcquireLease(t, cfg)
	if got := l.Info().Epoch; got != 2 {
		t.Fatalf("epoch = %d, want 2", got)
	}
	if time.Now().After(held.Holder.Expires.Time) {
		t.Fatal("test too slow to show an immediate takeover")
	}
}

func TestLeaseSubprocessCrashOtherHost(t *testing.T) {
	path := filepath.Join(t.TempDir(), "retention.lock")
	child := startLeaseHolder(t, path, "host-a")
	child.Kill() // SIGKILL: no chance to release

	clk := newLeaseClock()
	clk.Set(time.Now())
	cfg := LeaseConfig{Path: path, TTL: time.Minute, Owner: "parent", Host: "host-b", Now: clk.Now}
	_, err := AcquireLease(context.Background(), cfg)
	held := requireHeldBy(t, err, fmt.Sprintf("child-%d", child.Cmd.Process.Pid))

	clk.Set(held.Holder.Expires.Add(-time.Millisecond))
	_, err = AcquireLease(context.Background(), cfg)
	requireHeldBy(t, err, held.Holder.Owner)

	clk.Set(held.Holder.Expires.Time)
	l := mustAcquireLease(t, cfg)
	if got := l.Info().Epoch; got != 2 {
		t.Fatalf("epoch = %d, want 2", got)
	}
}

type leaseTenure struct {
	child       int
	epoch       int64
	start, stop int64
}

func TestLeaseSubprocessContention(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "retention.lock")

	const children = 3
	cmds := make([]*testtools.Child, children)
	for i := range children {
		// Two children share a host, where only the flock keeps them apart;
		// the third must rely on releases expiring the file.
		out := filepath.Join(dir, fmt.Sprintf("tenures-%d", i))
		cmds[i] = startLeaseHelper(t, "contend", path, fmt.Sprintf("host-%d", i/2), envHelperOut+"="+out)
	}
	for i, c := range cmds {
		if err := c.Wait(); err != nil {
			t.Fatalf("child %d: %v", i, err)
		}
	}

	var all []leaseTenure
	for i := range children {
		data, err := os.ReadFile(filepath.Join(dir, fmt.Sprintf("tenures-%d", i)))
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for line := range strings.Lines(string(data)) {
			var r leaseTenure
			if _, err := fmt.Sscan(line, &r.epoch, &r.start, &r.stop); err != nil {
				t.Fatalf("child %d: bad record %q: %v", i, line, err)
			}
			r.child = i
			all = append(all, r)
			n++
		}
		if n == 0 {
			t.Errorf("child %d never held the lease", i)
		}
	}
	slices.SortFunc(all, func(a, b leaseTenure) int { return cmp.Compare(a.start, b.start) })
	for i := 1; i < len(all); i++ {
		prev, cur := all[i-1], all[i]
		if cur.start < prev.stop {
			t.Errorf("tenures overlap: %+v and %+v", prev, cur)
		}
		if cur.epoch <= prev.epoch {
			t.Errorf("epoch did not increase: %+v then %+v", prev, cur)
		}
	}
	t.Logf("%d tenures, last epoch %d", len(all), all[len(all)-1].epoch)
}

// Anything but a regular file at a lease path is refused before it is
// opened: a folder, or a named pipe, whose open would block for good.
func TestLeaseNotARegularFile(t *testing.T) {
	dir := t.TempDir()
	clk := newLeaseClock()
	folder := filepath.Join(dir, "folder.lock")
	if err := os.Mkdir(folder, 0o750); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(dir, "fifo.lock")
	if err := syscall.Mkfifo(fifo, 0o640); err != nil {
		t.Fatal(err)
	}
	fifoEpoch := filepath.Join(dir, "c.lock")
	if err := syscall.Mkfifo(fifoEpoch+".epoch", 0o640); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ path, kind string }{{folder, "a folder"}, {fifo, "a named pipe"}, {fifoEpoch, "a named pipe"}} {
		_, err := AcquireLease(context.Background(), leaseConfig(c.path, "me", "host-a", clk.Now))
		if !errors.Is(err, ErrLeaseNotRegular) || !strings.Contains(err.Error(), c.kind) {
			t.Errorf("AcquireLease(%s) = %v, want ErrLeaseNotRegular naming %s", c.path, err, c.kind)
		}
	}
	for _, p := range []string{folder, fifo} {
		if _, err := ReadLease(p); !errors.Is(err, ErrLeaseNotRegular) {
			t.Errorf("ReadLease(%s) = %v, want ErrLeaseNotRegular", p, err)
		}
	}
}
