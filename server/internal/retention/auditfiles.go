package retention

import (
	"path/filepath"
	"strings"
	"time"

	"github.com/progressdb/progressdb/audit"
)

// LiveRun returns what `audit verify` needs to tell the one in-progress
// file of a live run from one a crash left: the run that holds the lease
// at now (owner and epoch, the fencing token written into its header).
// Nil when nobody holds it.
func LiveRun(leasePath string, now time.Time) func(audit.Header) bool {
	info, err := ReadLease(leasePath)
	if err != nil || !now.Before(info.Expires.Time) {
		return nil
	}
	return func(h audit.Header) bool { return h.Owner == info.Owner && h.Epoch == info.Epoch }
}

// LeaseFiles reports the files the lease at leasePath keeps (the lease,
// its lock and epoch files, a temporary file of an atomic write), which
// belong in the audit tree when the lease lives there.
func LeaseFiles(leasePath string) func(path string) bool {
	abs := func(p string) string {
		if a, err := filepath.Abs(p); err == nil {
			return a
		}
		return filepath.Clean(p)
	}
	lease := abs(leasePath)
	dir, base := filepath.Dir(lease), filepath.Base(lease)
	return func(path string) bool {
		p := abs(path)
		switch p {
		case lease, lease + ".flock", lease + ".epoch":
			return true
		}
		name := filepath.Base(p)
		return filepath.Dir(p) == dir && strings.HasPrefix(name, "."+base+".") && strings.Contains(name, ".tmp-")
	}
}
