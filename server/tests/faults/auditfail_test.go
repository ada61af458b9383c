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
	t.Parallel()
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
// mount namespace (unshare -m, or unshare -Urm without privileges), so an
// append fails with ENOSPC part way. The run must stop and exit non-zero;
// every key it deleted must belong to an item whose purge is recorded or
// whose purge marker remains; the next run must record and finish the
// rest.
//
// Where no mount namespace can be made, the process runs with
// RLIMIT_FSIZE instead (Go ignores SIGXFSZ, so writes past the limit fail
// with EFBIG). That limit applies to the database's files too, and Pebble's
// log may reach it before the audit file does (Pebble then stops the
// process), so in that mode the test checks the same invariants after a
// write failure somewhere mid-run.
func TestFaultAuditWriteError(t *testing.T) {
	t.Parallel()
	s, fx, before := prepareSite(t, t.TempDir(), smallSpec(), trialRand(t, 0))
	env := pacedEnv(s)

	full := diskFull(t, s, env)
	p := startCommand(t, full.env, full.argv)
	code := p.wait(t, processTimeout)
	t.Logf("run with writes failing (%s): exit %d\n%s", full.how, code, p.output())
	if code == 0 {
		t.Fatalf("the run succeeded although its writes failed")
	}

	abandoned := abandonedRuns(t, s)
	after, files := checkConsistent(t, s, fx, before)
	if len(files) != 1 {
		t.Fatalf("want the run's audit file, got %d files", len(files))
	}
	if full.auditOnly && (len(files[0].items) == 0 || !strings.Contains(p.stderr.String(), "audit write")) {
		t.Fatalf("want records written before the audit disk filled, then an audit write error; got %d records", len(files[0].items))
	}
	deleted := len(before.keys) - len(after.keys)
	if deleted == 0 || deleted == countMustGo(fx, before) {
		t.Fatalf("the run deleted %d of %d keys: the disk did not fill mid-run", deleted, countMustGo(fx, before))
	}
	t.Logf("%d keys deleted, %d records written, %d purge markers pending when the writes failed",
		deleted, len(files[0].items), len(after.pending))

	crashes := crashUntilComplete(t, s, fx, before, env, 0, nil, 0)
	checkInvariants(t, s, fx, before, append(abandoned, crashes.abandoned...))
}

// tinyDisk is the size of the tmpfs the audit folder is put on, and the
// file size limit of the fallback.
const tinyDisk = 16 << 10

// diskFullRun is how to run `retention run` on a site with writes failing
// part way; its audit files end up in the site's audit folder.
type diskFullRun struct {
	env       envVars
	argv      []string
	how       string
	auditOnly bool // only the audit folder's writes fail
}

func diskFull(t *testing.T, s site, env envVars) diskFullRun {
	t.Helper()
	// The tmpfs lives only in the namespace: what the run wrote is copied
	// out before the namespace goes.
	tiny := filepath.Join(s.dir, "tiny-audit")
	if err := os.MkdirAll(tiny, 0o750); err != nil {
		t.Fatal(err)
	}
	script := `mount -t tmpfs -o size=` + strconv.Itoa(tinyDisk) + ` tmpfs "$1" || exit 99
"$2" retention run --json; rc=$?
mkdir -p "$3" && cp -a "$1"/. "$3"/ || exit 98
exit $rc`
	for _, unshare := range [][]string{{"unshare", "-m"}, {"unshare", "-Urm"}} {
		probe := append(append([]string{}, unshare...), "mount", "-t", "tmpfs", "-o", "size=4k", "tmpfs", tiny)
		if exec.Command(probe[0], probe[1:]...).Run() == nil {
			return diskFullRun{
				env:       env.with("PROGRESSDB_RETENTION_AUDIT_PATH", tiny),
				argv:      append(unshare, "bash", "-c", script, "disk-full", tiny, binary, s.audit),
				how:       "audit folder on a 16 KiB tmpfs, " + strings.Join(unshare, " "),
				auditOnly: true,
			}
		}
	}
	return diskFullRun{
		env:  env,
		argv: []string{"prlimit", "--fsize=" + strconv.Itoa(tinyDisk), "--", binary, "retention", "run", "--json"},
		how:  "no mount namespace: RLIMIT_FSIZE on every file",
	}
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
