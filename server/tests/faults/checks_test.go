package faults

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/progressdb/progressdb/audit"
	"github.com/progressdb/progressdb/server/internal/retention"
	"github.com/progressdb/progressdb/server/pkg/store"
)

// site is one deployment on disk: a database, its audit folder and its lease.
type site struct {
	dir, db, audit, lease string
}

func newSite(dir string) site {
	audit := filepath.Join(dir, "audit")
	return site{dir: dir, db: filepath.Join(dir, "db"), audit: audit, lease: filepath.Join(audit, "retention.lock")}
}

// env is the configuration of a retention-enabled process on this site:
// a 30-day period, JSON logs at info.
func (s site) env() envVars {
	return envVars{
		"PROGRESSDB_DB_PATH":                  s.db,
		"PROGRESSDB_RETENTION_AUDIT_PATH":     s.audit,
		"PROGRESSDB_RETENTION_LEASE_PATH":     s.lease,
		"PROGRESSDB_RETENTION_ENABLED":        "true",
		"PROGRESSDB_RETENTION_PERIOD":         period,
		"PROGRESSDB_RETENTION_MESSAGE_PERIOD": period,
		"PROGRESSDB_LOG_FORMAT":               "json",
		"PROGRESSDB_LOG_LEVEL":                "info",
	}
}

// shortPeriodEnv is env with deletions due period after they are made (a
// period too short for production, allowed), the admin token set and runs
// asked for by hand: the schedule is hourly, later than any test ends.
func (s site) shortPeriodEnv(period time.Duration) envVars {
	return s.env().with(
		"PROGRESSDB_ADMIN_TOKEN", adminToken,
		"PROGRESSDB_RETENTION_PERIOD", period.String(),
		"PROGRESSDB_RETENTION_MESSAGE_PERIOD", period.String(),
		"PROGRESSDB_RETENTION_ALLOW_SHORT_PERIOD", "true",
		"PROGRESSDB_RETENTION_CRON", "@every 1h",
	)
}

// checkConsistent checks what must hold whenever no process runs, after
// any fault at any instant, and returns what it read:
//   - every key of an item that must stay is there, byte for byte, and no
//     key appeared;
//   - an item with a "purged" record has no key left;
//   - every item that lost a key has a "purged" record or a pending purge
//     marker (its own or its thread's), so the next run finishes and
//     records it;
//   - every sealed audit file verifies.
func checkConsistent(t testing.TB, s site, fx *fixture, before dbState) (dbState, []auditFile) {
	t.Helper()
	after := snapshotLive(t, s.db)
	files := readAudit(t, s.audit)
	purged := purgedRecords(files)
	pending := map[itemRef]bool{}
	for _, m := range after.pending {
		pending[itemRef{m.Kind, m.ID}] = true
	}

	bad := &findings{t: t}
	defer bad.close()
	touched := map[itemRef]bool{}
	for k, v := range before.keys {
		ref, _ := fx.owner(k)
		got, present := after.keys[k]
		switch {
		case present && (got == v || fx.legacy[ref]): // legacy records are stamped
		case present:
			bad.errorf("key %q of %s changed:\nbefore %q\nafter  %q", k, ref, v, got)
		case !fx.mustGo(ref):
			bad.errorf("key %q of %s, which must stay, was deleted", k, ref)
		default:
			touched[ref] = true
		}
	}
	left := map[itemRef]int{} // keys left per item; a thread's count includes its messages'
	for k := range after.keys {
		if _, ok := before.keys[k]; !ok {
			bad.errorf("key %q appeared", k)
		}
		ref, ok := fx.owner(k)
		if !ok {
			bad.errorf("key %q belongs to no thread or message", k)
			continue
		}
		left[ref]++
		if ref.kind == store.KindMessage {
			left[threadRef(fx.threadOf[ref.id])]++
		}
	}
	for ref := range purged {
		if n := left[ref]; n > 0 {
			bad.errorf("%s has a purged record but %d of its keys remain", ref, n)
		}
	}
	for ref := range touched {
		thread := threadRef(fx.threadOf[ref.id])
		accounted := len(purged[ref]) > 0 || pending[ref] ||
			(ref.kind == store.KindMessage && (len(purged[thread]) > 0 || pending[thread]))
		if !accounted {
			bad.errorf("keys of %s were deleted, but neither a purged record nor a purge marker accounts for it", ref)
		}
	}
	verifyAudit(t, s.audit)
	return after, files
}

// checkInvariants checks the state a completed run must leave, after any
// faults before it: checkConsistent, and
//   - every item that must go is gone, with exactly one "purged" record
//     (written again by no later run, recovered or not: spec §5);
//   - malformed and future items are recorded as skipped, legacy ones as
//     stamped;
//   - no purge marker is pending;
//   - no audit file is in progress, and the files of the runs in abandoned
//     (left in progress without a footer) are sealed "aborted";
//   - the lease is free.
func checkInvariants(t testing.TB, s site, fx *fixture, before dbState, abandoned []string) {
	t.Helper()
	after, files := checkConsistent(t, s, fx, before)

	bad := &findings{t: t}
	defer bad.close()
	stayed := map[itemRef]int{}
	for k := range after.keys {
		if ref, _ := fx.owner(k); fx.mustGo(ref) {
			stayed[ref]++
		}
	}
	for _, ref := range sortedRefs(stayed) {
		bad.errorf("%s must be purged, but %d of its keys remain", ref, stayed[ref])
	}

	purged := purgedRecords(files)
	for ref := range fx.due {
		if len(purged[ref]) == 0 {
			bad.errorf("%s was purged without a purged record", ref)
		}
	}
	for ref := range fx.legacy {
		if len(purged[ref]) == 0 {
			bad.errorf("legacy %s was purged without a purged record", ref)
		}
	}
	for ref, recs := range purged {
		if !fx.mustGo(ref) {
			bad.errorf("%s has a purged record but must stay", ref)
		}
		if len(recs) > 1 {
			bad.errorf("%s has %d purged records, want exactly one", ref, len(recs))
		}
	}
	checkRecorded(t, files, audit.StatusSkipped, fx.malformed, "malformed")
	checkRecorded(t, files, audit.StatusSkipped, fx.future, "future")
	checkRecorded(t, files, audit.StatusStamped, fx.legacy, "legacy")

	for _, m := range after.pending {
		bad.errorf("purge marker still pending after a completed run: %+v", m)
	}
	checkSealed(t, s.audit, files, abandoned)
	if s.lease != "" { // a cluster shard's runs hold its ownership, not a file
		checkLeaseFree(t, s.lease)
	}
}

// checkRecorded checks that every item of refs has a record with status.
func checkRecorded(t testing.TB, files []auditFile, status string, refs map[itemRef]bool, what string) {
	t.Helper()
	got := itemsWithStatus(files, status)
	for ref := range refs {
		if _, ok := got[ref]; !ok {
			t.Errorf("%s %s has no %q record", what, ref, status)
		}
	}
}

// checkSealed checks that no audit file is in progress and that the
// abandoned runs' files were sealed "aborted".
func checkSealed(t testing.TB, root string, files []auditFile, abandoned []string) {
	t.Helper()
	for _, f := range inProgress(files) {
		t.Errorf("audit file left in progress: %s", f.path)
	}
	for _, id := range abandoned {
		f := fileOfRun(files, id)
		switch {
		case f == nil:
			t.Errorf("the file of abandoned run %s is gone", id)
		case f.footer == nil || f.footer.Status != audit.RunAborted:
			t.Errorf("the file of abandoned run %s was not sealed aborted: %+v", id, f.footer)
		}
	}
	if rep := verifyAudit(t, root); rep.Files == 0 || rep.Verified != rep.Files || len(rep.InProgress) > 0 {
		t.Errorf("audit verification: %d of %d sealed files verify, in progress: %v", rep.Verified, rep.Files, rep.InProgress)
	}
}

// verifyAudit runs the audit package's verifier over root; every sealed
// file must verify. A root that does not exist yet (a run killed before it
// made the folder) holds no files.
func verifyAudit(t testing.TB, root string) audit.Report {
	t.Helper()
	if _, err := os.Stat(root); errors.Is(err, fs.ErrNotExist) {
		return audit.Report{}
	}
	rep, err := audit.VerifyDir(root)
	if err != nil {
		t.Errorf("audit.VerifyDir(%s): %v", root, err)
	}
	for _, p := range rep.Problems {
		// A file a kill left in progress is the next run's to seal; the
		// checks that want none say so on their own.
		if slices.Contains(rep.InProgress, p.File) {
			continue
		}
		t.Errorf("audit file does not verify: %s:%d: %s", p.File, p.Line, p.Reason)
	}
	return rep
}

// abandonedRuns returns the runs whose files are in progress without a
// footer: what a kill left for the next run to seal. A file still empty
// (killed before its header) is a run that never started, which the next
// run removes.
func abandonedRuns(t testing.TB, s site) []string {
	t.Helper()
	var ids []string
	for _, f := range inProgress(readAudit(t, s.audit)) {
		if info, err := os.Stat(f.path); err == nil && info.Size() == 0 {
			continue
		}
		if f.footer == nil {
			ids = append(ids, f.runID())
		}
	}
	return ids
}

// checkLeaseFree checks that the lease file says nobody holds the lease.
func checkLeaseFree(t testing.TB, path string) {
	t.Helper()
	info, err := retention.ReadLease(path)
	switch {
	case err != nil:
		t.Errorf("read lease %s: %v", path, err)
	case info.Expires.After(time.Now()):
		t.Errorf("lease still held by %s until %s", info.Owner, info.Expires)
	}
}

func sortedRefs[V any](m map[itemRef]V) []itemRef {
	refs := make([]itemRef, 0, len(m))
	for r := range m {
		refs = append(refs, r)
	}
	sort.Slice(refs, func(i, j int) bool { return refs[i].String() < refs[j].String() })
	return refs
}
