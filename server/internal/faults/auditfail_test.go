package faults

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// smallSpec is a database with enough due items that a run writes many
// audit records.
func smallSpec() fixtureSpec {
	return fixtureSpec{EligibleThreads: 60, LiveThreads: 30, HeldThreads: 2, RecentThreads: 2,
		Messages: 4, Versions: 2, OldDeletedMessages: 2, RecentDeletedMessages: 1}
}

// TestFaultUnwritableAudit points the audit folder at a regular file, and
// below one (the tests run as root, which ignores permission bits): the
// run must fail closed (nothing deleted, no purge marker written), report
// the error and exit non-zero, and leave the lease free.
func TestFaultUnwritableAudit(t *testing.T) {
	for _, layout := range []string{"audit_path_is_a_file", "audit_parent_is_a_file"} {
		t.Run(layout, func(t *testing.T) {
			s, _, before := prepareSite(t, t.TempDir(), smallSpec(), trialRand(t, 0))
			file := filepath.Join(s.dir, "a-regular-file")
			content := []byte("backup tooling must find this unchanged\n")
			if err := os.WriteFile(file, content, 0o640); err != nil {
				t.Fatal(err)
			}
			s.audit = file
			if layout == "audit_parent_is_a_file" {
				s.audit = filepath.Join(file, "audit")
			}
			s.lease = filepath.Join(s.dir, "lease", "retention.lock")

			p, _ := runRetention(t, s.env())
			if p.code == 0 {
				t.Errorf("the run succeeded without an audit folder\n%s", p.output())
			}
			if !strings.Contains(p.stderr.String(), "audit") {
				t.Errorf("the error does not name the audit folder:\n%s", p.output())
			}
			after := snapshotLive(t, s.db)
			if !sameKeys(before, after) || len(after.pending) > 0 {
				t.Errorf("a run without an audit folder changed the database: %d keys before, %d after, %d purge markers",
					len(before.keys), len(after.keys), len(after.pending))
			}
			if got, err := os.ReadFile(file); err != nil || string(got) != string(content) {
				t.Errorf("the file in the audit folder's place changed: %q, %v", got, err)
			}
			checkLeaseFree(t, s.lease)
		})
	}
}

// TestFaultAuditWriteError fills the disk under the audit folder while a
// run appends records: the folder is a 16 KiB tmpfs mounted in a private
// mount namespace (unshare -m), so appends fail with ENOSPC part way. Where
// that is not possible, the process runs with RLIMIT_FSIZE instead, so
// writes past a size fail with EFBIG (Go ignores SIGXFSZ). The run must
// stop and exit non-zero; every key it deleted must belong to an item whose
// purge is recorded or whose purge marker remains; the next run must record
// and finish the rest.
func TestFaultAuditWriteError(t *testing.T) {
	s, fx, before := prepareSite(t, t.TempDir(), smallSpec(), trialRand(t, 0))
	env := pacedEnv(s)

	fullEnv, argv := diskFullCommand(t, s, env)
	p := startCommand(t, fullEnv, argv)
	code := p.wait(t, processTimeout)
	t.Logf("run on a full disk: exit %d\n%s", code, p.output())
	if code == 0 {
		t.Fatalf("the run succeeded although its audit writes failed")
	}

	abandoned := abandonedRuns(t, s)
	after, files := checkConsistent(t, s, fx, before)
	if len(files) != 1 || len(files[0].items) == 0 {
		t.Fatalf("want one audit file with records written before the disk filled, got %d files", len(files))
	}
	deleted := len(before.keys) - len(after.keys)
	if deleted == 0 || deleted == countMustGo(fx, before) {
		t.Fatalf("the run deleted %d of %d keys: the disk did not fill mid-run", deleted, countMustGo(fx, before))
	}
	t.Logf("%d keys deleted, %d records written, %d purge markers pending before the disk filled",
		deleted, len(files[0].items), len(after.pending))

	crashes := crashUntilComplete(t, s, fx, before, env, 0, nil, 0)
	checkInvariants(t, s, fx, before, append(abandoned, crashes.abandoned...))
}

// tinyAuditDisk is the size of the tmpfs the audit folder is put on.
const tinyAuditDisk = 16 << 10

// diskFullCommand returns the environment and command line that run
// `retention run` on s with audit writes failing part way, leaving the
// audit files in s.audit.
func diskFullCommand(t *testing.T, s site, env envVars) (envVars, []string) {
	t.Helper()
	run := []string{binary, "retention", "run", "--json"}
	if err := exec.Command("unshare", "-m", "true").Run(); err == nil {
		// The tmpfs lives only in the namespace: copy what the run wrote
		// out before the namespace goes.
		tiny := filepath.Join(s.dir, "tiny-audit")
		if err := os.MkdirAll(tiny, 0o750); err != nil {
			t.Fatal(err)
		}
		script := `mount -t tmpfs -o size=` + strconv.Itoa(tinyAuditDisk) + ` tmpfs "$1" || exit 99
"$2" retention run --json; rc=$?
mkdir -p "$3" && cp -a "$1"/. "$3"/ || exit 98
exit $rc`
		t.Log("audit folder on a 16 KiB tmpfs in a private mount namespace")
		return env.with("PROGRESSDB_RETENTION_AUDIT_PATH", tiny),
			[]string{"unshare", "-m", "bash", "-c", script, "disk-full", tiny, binary, s.audit}
	}
	t.Log("unshare unavailable: RLIMIT_FSIZE instead")
	return env, append([]string{"prlimit", "--fsize=" + strconv.Itoa(tinyAuditDisk), "--"}, run...)
}

// sameKeys reports whether two states hold the same keys and values.
func sameKeys(a, b dbState) bool {
	if len(a.keys) != len(b.keys) {
		return false
	}
	for k, v := range a.keys {
		if w, ok := b.keys[k]; !ok || w != v {
			return false
		}
	}
	return true
}
