package faults

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/progressdb/progressdb/audit"
	"github.com/progressdb/progressdb/server/internal/retention"
	"github.com/progressdb/progressdb/server/internal/wire"
)

// leaseTTL is the shortest lease the configuration allows; it is renewed
// every second.
const leaseTTL = 3 * time.Second

// TestFaultLeaseLoss makes the lease renewal of a run that is deleting
// fail, by another owner taking the lease file over and by the lease file
// turning into something unwritable (a directory). The holder must stop
// deleting before its lease could expire (it deletes nothing after the
// next batch boundary once renewal failed), exit non-zero and say why in
// its footer; everything it deleted must be accounted for, and the next
// run must finish the work.
func TestFaultLeaseLoss(t *testing.T) {
	t.Parallel()
	sabotages := []struct {
		name    string
		break_  func(t *testing.T, s site)
		restore func(t *testing.T, s site)
	}{
		{"taken_over", takeLeaseOver, func(*testing.T, site) {}},
		{"unwritable", func(t *testing.T, s site) {
			if err := os.Remove(s.lease); err != nil {
				t.Fatal(err)
			}
			if err := os.Mkdir(s.lease, 0o750); err != nil {
				t.Fatal(err)
			}
		}, func(t *testing.T, s site) {
			if err := os.Remove(s.lease); err != nil {
				t.Fatal(err)
			}
		}},
	}
	for i, sab := range sabotages {
		t.Run(sab.name, func(t *testing.T) {
			s, fx, before := prepareSite(t, t.TempDir(), crashSpec(), trialRand(t, i))
			slow := pacedEnv(s).with(
				"PROGRESSDB_RETENTION_BATCH_PAUSE", "20ms",
				"PROGRESSDB_RETENTION_LEASE_TTL", leaseTTL.String(),
			)
			p := startRetention(t, slow)
			id := waitForNewRun(t, p, s, nil)
			waitFor(t, time.Minute, "the run to purge an item", func() bool {
				if p.exited() {
					t.Fatalf("the run exited with status %d before it purged anything\n%s", p.code, p.output())
				}
				f := fileOfRun(readAudit(t, s.audit), id)
				return f != nil && len(purgedRecords([]auditFile{*f})) > 0
			})
			broken := time.Now()
			sab.break_(t, s)
			code := p.wait(t, leaseTTL+time.Minute)

			if code == 0 {
				t.Errorf("the run that lost its lease exited 0\n%s", p.output())
			}
			f := fileOfRun(readAudit(t, s.audit), id)
			switch {
			case f == nil || !f.sealed || f.footer == nil:
				t.Fatalf("the run's audit file was not sealed: %+v\n%s", f, p.output())
			case f.footer.Status != audit.RunInterrupted || !strings.Contains(f.footer.Reason, "lease"):
				t.Errorf("footer status %q, reason %q; want interrupted, naming the lease", f.footer.Status, f.footer.Reason)
			}
			// Renewal runs every TTL/3 and the holder checks the lease before
			// every batch: it must have stopped, footer written, before its
			// lease could expire and somebody else take over.
			if d := f.footer.FinishedAt.Sub(broken); d >= leaseTTL {
				t.Errorf("the run finished %s after its lease renewal failed, past the lease's expiry (%s)", d, leaseTTL)
			}
			for _, it := range f.items {
				if it.PurgedAt != nil && !it.PurgedAt.Before(broken.Add(leaseTTL)) {
					t.Errorf("%s purged at %s, after the lease could have expired", it.ref(), it.PurgedAt)
				}
			}

			after, _ := checkConsistent(t, s, fx, before)
			deleted := 0
			for k := range before.keys {
				if _, ok := after.keys[k]; !ok {
					deleted++
				}
			}
			if int64(deleted) != f.footer.KeysDeleted {
				t.Errorf("%d keys deleted, the footer accounts for %d", deleted, f.footer.KeysDeleted)
			}
			if deleted == 0 || deleted == countMustGo(fx, before) {
				t.Fatalf("the run deleted %d keys before it stopped: no test of a stop mid-run", deleted)
			}
			t.Logf("stopped %s after the lease broke, %d keys deleted, footer: %s",
				f.footer.FinishedAt.Sub(broken), deleted, f.footer.Reason)

			sab.restore(t, s)
			crashes := crashUntilComplete(t, s, fx, before, pacedEnv(s), 0, nil, 0)
			checkInvariants(t, s, fx, before, crashes.abandoned)
		})
	}
}

// takeLeaseOver writes the lease file as another holder on this host would
// (a new owner and epoch, atomically renamed into place).
func takeLeaseOver(t *testing.T, s site) {
	t.Helper()
	cur, err := retention.ReadLease(s.lease)
	if err != nil {
		t.Fatalf("read lease: %v", err)
	}
	now := time.Now().UTC()
	intruder := retention.LeaseInfo{Owner: cur.Host + "/1/intruder", Host: cur.Host, PID: 1, Epoch: cur.Epoch + 1,
		AcquiredAt: wire.At(now), RenewedAt: wire.At(now), Expires: wire.At(now.Add(leaseTTL))}
	data, err := json.Marshal(intruder)
	if err != nil {
		t.Fatal(err)
	}
	tmp := filepath.Join(filepath.Dir(s.lease), ".intruder.tmp")
	if err := os.WriteFile(tmp, data, 0o640); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, s.lease); err != nil {
		t.Fatal(err)
	}
}

// countMustGo counts the keys of before that a completed run deletes.
func countMustGo(fx *fixture, before dbState) int {
	n := 0
	for k := range before.keys {
		if ref, _ := fx.owner(k); fx.mustGo(ref) {
			n++
		}
	}
	return n
}
