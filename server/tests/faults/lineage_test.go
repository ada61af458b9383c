package faults

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/progressdb/progressdb/audit"
)

// Copies never act for the original (spec §10.1). These are the
// operator's stories of issue 27 through the built binary: a restore
// drill on one host, sharing the original's audit folder.

// drillPeriod is the retention period of the drill's servers: a thread
// deleted on one is due a period later.
const drillPeriod = time.Second

// purgeOne soft-deletes thread tid on srv, waits until it is due and runs
// retention there, which must purge exactly it; it returns the run.
func purgeOne(t *testing.T, srv *server, tid string) runSummary {
	t.Helper()
	srv.mustCall(t, "DELETE", "/v1/threads/"+tid, nil, "", http.StatusNoContent, nil)
	// The deletion becomes due a period after it was made: no run can
	// purge it sooner.
	time.Sleep(drillPeriod + 100*time.Millisecond)
	var res runSummary
	srv.mustCall(t, "POST", "/admin/retention/run", nil, adminToken, http.StatusOK, &res)
	if res.Purged != 1 || res.Status != audit.RunCompleted {
		t.Fatalf("run purging %s: %+v, want completed with 1 purged", tid, res)
	}
	return res
}

// cliEnv is env for a command that goes through srv.
func (s *server) cliEnv(env envVars) envVars {
	return env.with("PROGRESSDB_ADDR", s.addr())
}

// runSummary is the part of a run's summary the drill reads.
type runSummary struct {
	RunID      string    `json:"run_id"`
	Status     string    `json:"status"`
	Purged     int64     `json:"purged"`
	AuditFile  string    `json:"audit_file"`
	FinishedAt time.Time `json:"finished_at"`
}

func newThread(t *testing.T, srv *server, tid string) {
	t.Helper()
	srv.mustCall(t, "POST", "/v1/threads", map[string]string{"id": tid, "title": "title-of-" + tid, "author": "a"}, "",
		http.StatusCreated, nil)
}

// restoreReport is the part of `restore --json` the drill reads.
type restoreReport struct {
	DatabaseID string `json:"database_id"`
	OriginID   string `json:"origin_id"`
	Replay     struct {
		RunID     string `json:"run_id"`
		Purged    int64  `json:"purged"`
		AuditFile string `json:"audit_file"`
	} `json:"replay"`
}

func restoreJSON(t *testing.T, env envVars, args ...string) restoreReport {
	t.Helper()
	p := runCLI(t, env, append([]string{"restore", "--json"}, args...)...)
	if p.code != 0 {
		t.Fatalf("restore: %d\n%s", p.code, p.output())
	}
	var rep restoreReport
	if err := json.Unmarshal([]byte(p.stdout.String()), &rep); err != nil {
		t.Fatalf("restore --json: %v\n%s", err, p.output())
	}
	return rep
}

// Issue 27, problem 1: a restore drill into the original's audit folder.
// Server L has thread victim; a backup of L is restored into R (default
// trail: L's); R deletes victim and purges it. L never takes R's run for
// its own: victim answers 200 on L, before and after a restart, which
// replays nothing. Before, R kept L's database_id and L's restart logged
// retention_database_behind_trail and deleted victim. The copy still
// replays L's purges after the backup's head: at restore (doomed, purged
// on L after the backup) and at its next start (later, purged on L after
// the restore).
func TestFaultRestoreDrillNeverActsForOriginal(t *testing.T) {
	t.Parallel()
	s := newSite(t.TempDir())
	envL := s.shortPeriodEnv(drillPeriod)
	srvL := startServer(t, envL)
	for _, tid := range []string{"victim", "doomed", "later"} {
		newThread(t, srvL, tid)
	}
	archive := filepath.Join(s.dir, "b.tar")
	if p := runCLI(t, srvL.cliEnv(envL), "backup", "create", "--out", archive); p.code != 0 {
		t.Fatalf("backup create through L: %d\n%s", p.code, p.output())
	}
	runL := purgeOne(t, srvL, "doomed")
	idL := readAuditFile(t, runL.AuditFile, true).header.DatabaseID
	if idL == "" {
		t.Fatal("L's run names no database_id")
	}

	r := filepath.Join(s.dir, "restored")
	rep := restoreJSON(t, envL, archive, "--db", r)
	if rep.DatabaseID == "" || rep.DatabaseID == idL || rep.OriginID != idL {
		t.Fatalf("restored database_id %q origin_id %q; want a new identity whose origin is L's %q", rep.DatabaseID, rep.OriginID, idL)
	}
	if rep.Replay.Purged != 1 {
		t.Fatalf("the restore replayed %d purges, want L's purge of doomed", rep.Replay.Purged)
	}
	rh := readAuditFile(t, rep.Replay.AuditFile, true).header
	if rh.Trigger != audit.TriggerRestore || rh.DatabaseID != rep.DatabaseID || rh.OriginID != idL || rh.BackupID == "" {
		t.Fatalf("the restore's replay header %+v: want trigger restore under the restored identity, origin L, the backup", rh)
	}

	envR := envL.with("PROGRESSDB_DB_PATH", r)
	srvR := startServer(t, envR)
	srvR.mustCall(t, "GET", "/v1/threads/doomed?include_deleted=true", nil, "", http.StatusNotFound, nil)
	runR := purgeOne(t, srvR, "victim")
	if h := readAuditFile(t, runR.AuditFile, true).header; h.DatabaseID != rep.DatabaseID || h.OriginID != idL {
		t.Fatalf("R's run header %+v: want R's identity and origin L", h)
	}

	srvL.mustCall(t, "GET", "/v1/threads/victim", nil, "", http.StatusOK, nil)
	srvL.stop(t)
	srvL = startServer(t, envL)
	srvL.mustCall(t, "GET", "/v1/threads/victim", nil, "", http.StatusOK, nil)
	if strings.Contains(srvL.stderr.String(), "retention_database_behind_trail") {
		t.Fatalf("L took the copy's run for its own at start:\n%s", srvL.output())
	}

	// L purges later; R's next start replays it, and L still has victim.
	purgeOne(t, srvL, "later")
	srvR.stop(t)
	srvR = startServer(t, envR)
	srvR.mustCall(t, "GET", "/v1/threads/later?include_deleted=true", nil, "", http.StatusNotFound, nil)
	srvR.stop(t)
	starts := 0
	for _, f := range replayFiles(t, s) {
		if f.header.Trigger == audit.TriggerStart {
			starts++
			if f.header.DatabaseID != rep.DatabaseID {
				t.Errorf("start replay %s names database %q, want the copy's %q", f.path, f.header.DatabaseID, rep.DatabaseID)
			}
		}
	}
	if starts != 1 {
		t.Fatalf("%d start replays, want R's one", starts)
	}
	srvL.mustCall(t, "GET", "/v1/threads/victim", nil, "", http.StatusOK, nil)
	srvL.stop(t)
	srvL = startServer(t, envL)
	srvL.mustCall(t, "GET", "/v1/threads/victim", nil, "", http.StatusOK, nil)
	srvL.stop(t)
	if p := runCLI(t, envL, "audit", "verify"); p.code != 0 {
		t.Fatalf("audit verify: %d\n%s", p.code, p.output())
	}
}

// Issue 27, problem 6: the restore's replay run is the restored
// database's, never the original's. After a restart, L's last_run and
// progressdb_retention_last_success_timestamp_seconds are L's own run;
// `audit show` names the replay as one and shows trigger: restore, and
// `audit find` marks its record as a replay. A restore with its own
// --audit folder (a drill on a copy of the trail) writes its replay there,
// and adds nothing to L's trail.
func TestFaultRestoreReplayIsTheCopysRun(t *testing.T) {
	t.Parallel()
	s := newSite(t.TempDir())
	envL := s.shortPeriodEnv(drillPeriod)
	srvL := startServer(t, envL)
	newThread(t, srvL, "doomed")
	archive := filepath.Join(s.dir, "b.tar")
	if p := runCLI(t, srvL.cliEnv(envL), "backup", "create", "--out", archive); p.code != 0 {
		t.Fatalf("backup create through L: %d\n%s", p.code, p.output())
	}
	runL := purgeOne(t, srvL, "doomed")
	rep := restoreJSON(t, envL, archive, "--db", filepath.Join(s.dir, "restored"))

	srvL.stop(t)
	srvL = startServer(t, envL)
	var st struct {
		LastRun runSummary `json:"last_run"`
	}
	srvL.mustCall(t, "GET", "/admin/retention", nil, adminToken, http.StatusOK, &st)
	if st.LastRun.RunID != runL.RunID {
		t.Errorf("L's last_run after a restart is %s, want L's own run %s (the restore's replay is %s)",
			st.LastRun.RunID, runL.RunID, rep.Replay.RunID)
	}
	finished := readAuditFile(t, runL.AuditFile, true).footer.FinishedAt
	if got := metricValue(t, srvL, "progressdb_retention_last_success_timestamp_seconds"); got != float64(finished.UnixNano())/1e9 {
		t.Errorf("L's last success %v, want its own run's end %v", got, float64(finished.UnixNano())/1e9)
	}
	srvL.stop(t)
	if p := runCLI(t, envL, "retention", "status", "--json"); p.code != 0 || !strings.Contains(p.stdout.String(), runL.RunID) {
		t.Errorf("retention status on L: %d, want L's own run %s as last run\n%s", p.code, runL.RunID, p.output())
	}

	show := runCLI(t, envL, "audit", "show", rep.Replay.AuditFile)
	if out := show.stdout.String(); show.code != 0 || !strings.Contains(out, "replay") || !strings.Contains(out, "trigger:    restore") ||
		!strings.Contains(out, rep.DatabaseID) {
		t.Errorf("audit show of the restore's replay: %d, want it named a replay with trigger restore and the copy's identity\n%s",
			show.code, show.output())
	}
	find := runCLI(t, envL, "audit", "find", "doomed")
	if out := find.stdout.String(); find.code != 0 || !strings.Contains(out, rep.Replay.RunID+" (replay, trigger restore)") ||
		!strings.Contains(out, "proven by:  "+runL.AuditFile) {
		t.Errorf("audit find doomed: %d, want L's run as the proof and the restore's record named a replay\n%s", find.code, find.output())
	}

	// A drill on a copy of the trail: its replay stays there.
	drill := filepath.Join(s.dir, "drill-audit")
	copyTrail(t, s.audit, drill)
	before := len(readAudit(t, s.audit))
	dr := restoreJSON(t, envL, archive, "--db", filepath.Join(s.dir, "drill"), "--audit", drill)
	if !strings.HasPrefix(dr.Replay.AuditFile, drill+string(filepath.Separator)) || dr.Replay.Purged != 1 {
		t.Fatalf("the drill's replay %s (%d purged), want it in %s with L's purge", dr.Replay.AuditFile, dr.Replay.Purged, drill)
	}
	if after := len(readAudit(t, s.audit)); after != before {
		t.Fatalf("a drill with its own --audit folder added %d files to L's trail", after-before)
	}
}

// copyTrail copies the audit files of root (not its lease file, which
// belongs to the server running on it) into a new folder dst.
func copyTrail(t testing.TB, root, dst string) {
	t.Helper()
	months, err := filepath.Glob(filepath.Join(root, "[0-9][0-9][0-9][0-9]-[0-9][0-9]"))
	must(t, err)
	must(t, os.MkdirAll(dst, 0o750))
	for _, m := range months {
		copyFolder(t, m, filepath.Join(dst, filepath.Base(m)))
	}
}

// metricValue reads one unlabelled metric from srv's /metrics.
func metricValue(t testing.TB, srv *server, name string) float64 {
	t.Helper()
	resp, err := httpClient.Get(srv.url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("%s: %v", sc.Text(), err)
			}
			return f
		}
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	t.Fatalf("%s not in /metrics", name)
	return 0
}
