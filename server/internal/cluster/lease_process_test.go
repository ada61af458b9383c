package cluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/progressdb/progressdb/server/internal/cluster/etcdtest"
	"github.com/progressdb/progressdb/server/internal/retention"
	"github.com/progressdb/progressdb/server/internal/testtools"
)

// Environment of the helper process TestEtcdLeaseHolderKilled starts.
const (
	envEtcdHelper    = "PROGRESSDB_ETCD_LEASE_HELPER"
	envEtcdEndpoints = "PROGRESSDB_ETCD_LEASE_ENDPOINTS"
)

const killedKey = "/test/shards/0/owner"

// TestEtcdLeaseHelperProcess is not a test: TestEtcdLeaseHolderKilled runs
// the test binary again with it selected, to hold a lease in a process of
// its own.
func TestEtcdLeaseHelperProcess(t *testing.T) {
	if os.Getenv(envEtcdHelper) == "" {
		return
	}
	err := func() error {
		c, err := etcdtest.NewClient(strings.Split(os.Getenv(envEtcdEndpoints), ","))
		if err != nil {
			return err
		}
		l, err := EtcdCoordinator{Client: c, Key: killedKey, TTL: 3 * time.Second,
			Owner: fmt.Sprintf("child-%d", os.Getpid())}.Acquire(context.Background())
		if err != nil {
			return err
		}
		go l.Heartbeat(context.Background())
		fmt.Printf("acquired %d\n", l.Info().Epoch)
		_, _ = io.Copy(io.Discard, os.Stdin) // holds until killed
		return l.Release()
	}()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Exit(0)
}

// TestEtcdLeaseHolderKilled: a holder killed with SIGKILL releases nothing;
// etcd expires its lease after the TTL, and the next holder gets a larger
// epoch. Before that, the lease stays taken.
func TestEtcdLeaseHolderKilled(t *testing.T) {
	t.Parallel() // waits out real lease TTLs, on an etcd of its own
	srv := etcdtest.Start(t)
	child := testtools.StartChild(t, "TestEtcdLeaseHelperProcess",
		envEtcdHelper+"=1", envEtcdEndpoints+"="+strings.Join(srv.Endpoints(), ","))
	got, _ := child.Line()
	e, ok := strings.CutPrefix(got, "acquired ")
	childEpoch, err := strconv.ParseInt(e, 10, 64)
	if !ok || err != nil {
		t.Fatalf("child said %q", got)
	}

	c := EtcdCoordinator{Client: srv.Client(t), Key: killedKey, TTL: 3 * time.Second, Owner: "parent"}
	if _, err := c.Acquire(context.Background()); !errors.Is(err, retention.ErrLeaseHeld) {
		t.Fatalf("Acquire while the child holds = %v, want ErrLeaseHeld", err)
	}
	child.Kill() // SIGKILL: no release

	var l retention.HeldLease
	waitFor(t, "take-over after the TTL", func() bool {
		l, err = c.Acquire(context.Background())
		if err != nil && !errors.Is(err, retention.ErrLeaseHeld) {
			t.Fatalf("Acquire: %v", err)
		}
		return err == nil
	})
	defer l.Release()
	if l.Info().Epoch <= childEpoch {
		t.Fatalf("epoch after the kill %d, want more than the killed holder's %d", l.Info().Epoch, childEpoch)
	}
}
