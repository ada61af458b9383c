package retention_test

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/progressdb/progressdb/server/internal/retention"
	"github.com/progressdb/progressdb/server/internal/retention/leasetest"
	"github.com/progressdb/progressdb/server/internal/testtools/testclock"
)

// TestFileLeaseContract runs the lease contract on the file lease, each
// owner on a host of its own sharing the lease folder.
func TestFileLeaseContract(t *testing.T) {
	leasetest.Run(t, func(t *testing.T) leasetest.Backend {
		dir := t.TempDir()
		path := filepath.Join(dir, "audit", "retention.lock")
		clk := testclock.New(time.Date(2026, 11, 25, 9, 0, 0, 0, time.UTC))
		const ttl = time.Minute
		return leasetest.Backend{
			TTL: ttl,
			Coordinator: func(owner string) retention.Coordinator {
				return retention.FileCoordinator{Config: retention.LeaseConfig{
					Path: path, TTL: ttl, Owner: owner, Host: "host-" + owner, PID: 4242, Now: clk.Now}}
			},
			Advance: clk.Advance,
			Crash:   retention.CrashFileLease,
			Expire: func(l retention.HeldLease) {
				if exp := l.Info().Expires; exp.After(clk.Now()) {
					clk.Advance(exp.Sub(clk.Now()))
				}
			},
			// The shared folder goes away, as an unmounted share does.
			Partition: func() {
				if err := os.Rename(filepath.Dir(path), filepath.Join(dir, "unmounted")); err != nil {
					t.Fatal(err)
				}
			},
		}
	})
}
