package cluster

import (
	"flag"
	"os"
	"testing"

	"github.com/progressdb/progressdb/server/internal/testtools"
)

// The package's parallel tests each start an etcd of their own and
// mostly wait on it: on leases, elections and their timeouts (the
// package used under a fifth of a core with one test per core).
func TestMain(m *testing.M) {
	flag.Parse()
	testtools.OverlapWaits(4)
	os.Exit(m.Run())
}
