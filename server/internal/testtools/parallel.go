package testtools

import (
	"flag"
	"runtime"
	"strconv"
)

// OverlapWaits makes go test run perCore tests at once for each core,
// unless -parallel was given. It is for a package whose parallel tests
// mostly wait (on the processes they start, on etcd, on timers) and
// compute little: go test's default of one test per core leaves the
// cores idle meanwhile. TestMain calls it after flag.Parse.
func OverlapWaits(perCore int) {
	given := false
	flag.Visit(func(f *flag.Flag) { given = given || f.Name == "test.parallel" })
	if !given {
		_ = flag.Set("test.parallel", strconv.Itoa(perCore*runtime.GOMAXPROCS(0)))
	}
}
