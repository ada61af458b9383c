package faults

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/progressdb/progressdb/audit"
	"github.com/progressdb/progressdb/server/internal/backup"
	"github.com/progressdb/progressdb/server/pkg/store"
	"github.com/progressdb/progressdb/server/pkg/store/storetest"
)

// restoreFixture is a database with something due for every cause: doomed
// threads deleted 40 days ago (deleted), a message deleted 40 days ago
// (deleted), a message created 100 days ago (max_age 30d), and two
// messages beyond max_messages 3. Every text is unique, so the scanner
// can look for it.
type restoreFixture struct {
	due  map[string]string // item ID → its content
	kept map[string]string
	// threads are the doomed threads; messages the due messages with
	// their threads.
	threads  []string
	messages map[string]string
}

func (fx restoreFixture) dueText() []string {
	var out []string
	for _, text := range fx.due {
		out = append(out, text)
	}
	return out
}

func (fx restoreFixture) keptText() []string {
	var out []string
	for _, text := range fx.kept {
		out = append(out, text)
	}
	return out
}

// policyEnv is the site's environment with the fixture's policies.
func policyEnv(s site) envVars {
	return s.env().with("PROGRESSDB_RETENTION_MAX_AGE", "30d", "PROGRESSDB_RETENTION_MAX_MESSAGES", "3")
}

func buildRestoreFixture(t testing.TB, dbPath string, doomed int) restoreFixture {
	t.Helper()
	fx := restoreFixture{due: map[string]string{}, kept: map[string]string{}, messages: map[string]string{}}
	st, err := store.Open(dbPath, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	b := st.NewBulk()
	now := time.Now()
	ago := func(d time.Duration) int64 { return now.Add(-d).UnixNano() }
	msg := func(tid, mid string, ts int64, deletedTS int64, due bool) {
		text := "content-of-" + mid
		body, _ := json.Marshal(text)
		vs := []store.Message{{ID: mid, Thread: tid, Author: "a", Body: body, TS: ts}}
		if deletedTS > 0 {
			vs = append(vs, store.Message{ID: mid, Thread: tid, Author: "a", Body: json.RawMessage("null"), TS: deletedTS,
				Deleted: true, DeletedTS: deletedTS})
		}
		must(t, b.PutMessage(vs))
		if due {
			fx.due[mid] = text
			fx.messages[mid] = tid
		} else {
			fx.kept[mid] = text
		}
	}
	thread := func(tid string, deletedTS int64) {
		must(t, b.PutThread(store.Thread{ID: tid, Title: "title-of-" + tid, Author: "a", CreatedTS: ago(200 * 24 * time.Hour),
			UpdatedTS: ago(200 * 24 * time.Hour), Deleted: deletedTS > 0, DeletedTS: deletedTS}))
		if deletedTS > 0 {
			fx.due[tid] = "title-of-" + tid
			fx.threads = append(fx.threads, tid)
		} else {
			fx.kept[tid] = "title-of-" + tid
		}
	}
	for i := range doomed {
		tid := fmt.Sprintf("doomed%03d", i)
		thread(tid, ago(40*24*time.Hour))
		for j := range 3 {
			mid := fmt.Sprintf("%s-m%d", tid, j)
			msg(tid, mid, ago(50*24*time.Hour)+int64(j), 0, false)
			delete(fx.kept, mid)
			fx.due[mid] = "content-of-" + mid // goes with its thread
		}
	}
	thread("mixed", 0)
	msg("mixed", "mixed-m0", ago(45*24*time.Hour), ago(40*24*time.Hour), true)
	msg("mixed", "mixed-m1", ago(time.Hour), 0, false)
	thread("aged", 0)
	msg("aged", "aged-m0", ago(100*24*time.Hour), 0, true)
	msg("aged", "aged-m1", ago(time.Hour), 0, false)
	thread("capped", 0)
	for j := range 5 {
		msg("capped", fmt.Sprintf("capped-m%d", j), ago(time.Hour)+int64(j)*int64(time.Second), 0, j < 2)
	}
	must(t, b.Close())
	must(t, st.Close())
	return fx
}

// requireGone checks that no item the fixture purges answers in the
// database at dir, and that no file of it holds their content.
func requireGone(t *testing.T, dir string, fx restoreFixture) {
	t.Helper()
	st := openStore(t, dir)
	ctx := context.Background()
	for _, tid := range fx.threads {
		if ok, _ := st.ItemExists(ctx, store.KindThread, tid); ok {
			t.Errorf("thread %s is back", tid)
		}
	}
	for mid := range fx.messages {
		if ok, _ := st.ItemExists(ctx, store.KindMessage, mid); ok {
			t.Errorf("message %s is back", mid)
		}
	}
	st.Close()
	storetest.RequireNone(t, dir, fx.dueText()...)
	storetest.RequireAll(t, dir, fx.keptText()...)
}

// replayFiles lists the audit files of replay runs.
func replayFiles(t testing.TB, s site) map[string]auditFile {
	t.Helper()
	out := map[string]auditFile{}
	for _, f := range readAudit(t, s.audit) {
		if f.header != nil && (f.header.Trigger == audit.TriggerRestore || f.header.Trigger == audit.TriggerStart) {
			out[f.path] = f
		}
	}
	return out
}

// The operator's story of the issue, through progressdb restore: a backup
// taken before purges of every cause, the purges, then the restore into a
// new folder. Every purge is replayed (replayed: true), no file of the
// restored database holds purged content, and a server on it answers 404
// for every purged thread.
func TestFaultRestoreReplaysEveryCause(t *testing.T) {
	t.Parallel()
	s := newSite(t.TempDir())
	fx := buildRestoreFixture(t, s.db, 5)
	env := policyEnv(s)
	archive := filepath.Join(s.dir, "b.tar.zst")
	if p := runCLI(t, env, "backup", "create", "--out", archive); p.code != 0 {
		t.Fatalf("backup create: %d\n%s", p.code, p.output())
	}
	p, res := runRetention(t, env)
	if p.code != 0 || res == nil || int(res.Purged) != len(fx.threads)+len(fx.messages) {
		t.Fatalf("retention run: %d %+v, want %d purged\n%s", p.code, res, len(fx.threads)+len(fx.messages), p.output())
	}
	restored := filepath.Join(s.dir, "restored")
	p = runCLI(t, env, "restore", archive, "--db", restored, "--json")
	if p.code != 0 {
		t.Fatalf("restore: %d\n%s", p.code, p.output())
	}
	var rep struct {
		Replay struct {
			RunID     string `json:"run_id"`
			Purged    int64  `json:"purged"`
			AuditFile string `json:"audit_file"`
		} `json:"replay"`
	}
	if err := json.Unmarshal([]byte(p.stdout.String()), &rep); err != nil {
		t.Fatalf("restore --json: %v\n%s", err, p.output())
	}
	if rep.Replay.Purged != res.Purged {
		t.Fatalf("replayed %d purges, the run purged %d", rep.Replay.Purged, res.Purged)
	}
	ra := readAuditFile(t, rep.Replay.AuditFile, true)
	if ra.header.Trigger != audit.TriggerRestore || ra.header.BackupID == "" {
		t.Fatalf("replay header %+v", ra.header)
	}
	causes := map[string]int{}
	for _, it := range ra.items {
		if it.Status != audit.StatusPurged || !it.Replayed {
			t.Errorf("item %+v: want purged, replayed", it)
		}
		causes[it.Cause]++
	}
	if causes[audit.CauseDeleted] == 0 || causes[audit.CauseMaxAge] != 1 || causes[audit.CauseMaxMessages] != 2 {
		t.Errorf("replayed by cause %v", causes)
	}
	requireGone(t, restored, fx)
	if p := runCLI(t, env, "audit", "verify"); p.code != 0 {
		t.Fatalf("audit verify after the restore: %d\n%s", p.code, p.output())
	}

	// A server on the restored database serves none of it.
	srv := startServer(t, env.with("PROGRESSDB_DB_PATH", restored))
	for _, tid := range fx.threads {
		srv.mustCall(t, "GET", "/v1/threads/"+tid+"?include_deleted=true", nil, "", http.StatusNotFound, nil)
	}
	srv.mustCall(t, "GET", "/v1/threads/capped", nil, "", http.StatusOK, nil)
	srv.stop(t)

	// A second restore into the same folder is refused, touching nothing.
	before := snapshotDir(t, restored)
	if p := runCLI(t, env, "restore", archive, "--db", restored); p.code != 2 {
		t.Fatalf("restore into a non-empty folder: %d, want 2\n%s", p.code, p.output())
	}
	if after := snapshotDir(t, restored); after != before {
		t.Fatal("a refused restore changed the folder")
	}
}

// snapshotDir lists a folder's files with their sizes and times.
func snapshotDir(t testing.TB, dir string) string {
	t.Helper()
	var b strings.Builder
	err := filepath.Walk(dir, func(path string, info os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		fmt.Fprintf(&b, "%s %d %d\n", path, info.Size(), info.ModTime().UnixNano())
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// A database copied back by hand (the files of a backup put in place, as
// an operator copying DB_PATH back would) is caught at start: the server
// replays the purges its trail records since (trigger start) before it
// answers the first request.
func TestFaultHandRestoreCaughtAtStart(t *testing.T) {
	t.Parallel()
	s := newSite(t.TempDir())
	fx := buildRestoreFixture(t, s.db, 3)
	env := policyEnv(s).with("PROGRESSDB_ADMIN_TOKEN", adminToken)
	archive := filepath.Join(s.dir, "b.tar")
	if p := runCLI(t, env, "backup", "create", "--out", archive); p.code != 0 {
		t.Fatalf("backup create: %d\n%s", p.code, p.output())
	}
	if p, res := runRetention(t, env); p.code != 0 || res == nil || res.Purged == 0 {
		t.Fatalf("retention run: %d %+v\n%s", p.code, res, p.output())
	}
	// The operator puts the old files back.
	must(t, os.RemoveAll(s.db))
	must(t, os.Mkdir(s.db, 0o700))
	if rep, err := backup.Unpack(context.Background(), archive, s.db, "", nil); err != nil || !rep.Valid {
		t.Fatalf("unpack: %v %v", err, rep.Problems)
	}
	srv := startServer(t, env)
	for _, tid := range fx.threads {
		srv.mustCall(t, "GET", "/v1/threads/"+tid+"?include_deleted=true", nil, "", http.StatusNotFound, nil)
	}
	srv.stop(t)
	replays := replayFiles(t, s)
	if len(replays) != 1 {
		t.Fatalf("replay files %v, want one", replays)
	}
	for _, f := range replays {
		if f.header.Trigger != audit.TriggerStart {
			t.Fatalf("replay trigger %q, want start", f.header.Trigger)
		}
	}
	requireGone(t, s.db, fx)
	// The next start finds nothing to replay.
	srv = startServer(t, env)
	srv.stop(t)
	if n := len(replayFiles(t, s)); n != 1 {
		t.Fatalf("%d replay files after a second start, want 1", n)
	}
}

// A restore killed with SIGKILL while it replays leaves a database that
// nothing serves (spec §10.1): serve and the commands that open it exit 1
// naming the unfinished restore and `restore --resume`, which finishes
// it: every purge replayed, the killed run's file sealed aborted, no
// purged content in any file, and a server on it serves.
func TestFaultRestoreKilledMidReplay(t *testing.T) {
	t.Parallel()
	s := newSite(t.TempDir())
	fx := buildRestoreFixture(t, s.db, pick(40, 80))
	env := policyEnv(s)
	archive := filepath.Join(s.dir, "b.tar")
	if p := runCLI(t, env, "backup", "create", "--out", archive); p.code != 0 {
		t.Fatalf("backup create: %d\n%s", p.code, p.output())
	}
	if p, res := runRetention(t, env); p.code != 0 || res == nil {
		t.Fatalf("retention run: %d %+v\n%s", p.code, res, p.output())
	}
	restored := filepath.Join(s.dir, "restored")
	slow := env.with("PROGRESSDB_RETENTION_BATCH_SIZE", "1", "PROGRESSDB_RETENTION_BATCH_PAUSE", "20ms")
	p := start(t, slow, "restore", archive, "--db", restored)
	waitFor(t, time.Minute, "the replay to record a few purges", func() bool {
		if p.exited() {
			t.Fatalf("restore ended before it could be killed: %d\n%s", p.code, p.output())
		}
		files, _ := filepath.Glob(filepath.Join(s.audit, "*", "*.jsonl.inprogress"))
		for _, f := range files {
			data, _ := os.ReadFile(f)
			if strings.Contains(string(data), `"trigger":"restore"`) && strings.Count(string(data), `"replayed":true`) >= 2 {
				return true
			}
		}
		return false
	})
	p.kill()

	on := env.with("PROGRESSDB_DB_PATH", restored)
	requireUnfinishedRefused(t, on, restored)
	if p := runCLI(t, on, "restore", "--resume", "--db", restored); p.code != 0 {
		t.Fatalf("restore --resume: %d\n%s", p.code, p.output())
	}
	var restoreAborted, restoreCompleted bool
	for _, f := range replayFiles(t, s) {
		switch {
		case f.header.Trigger != audit.TriggerRestore:
			t.Errorf("replay %s with trigger %q: only the restore replays", f.path, f.header.Trigger)
		case f.sealed && f.footer != nil && f.footer.Status == audit.RunAborted:
			restoreAborted = true
		case f.sealed && f.footer != nil && f.footer.Status == audit.RunCompleted:
			restoreCompleted = true
		}
	}
	if !restoreAborted || !restoreCompleted {
		t.Fatalf("want the killed restore's file aborted and a completed one from --resume: %v", replayFiles(t, s))
	}
	srv := startServer(t, on)
	for _, tid := range fx.threads {
		srv.mustCall(t, "GET", "/v1/threads/"+tid+"?include_deleted=true", nil, "", http.StatusNotFound, nil)
	}
	srv.stop(t)
	requireGone(t, restored, fx)
	if p := runCLI(t, env, "audit", "verify"); p.code != 0 {
		t.Fatalf("audit verify: %d\n%s", p.code, p.output())
	}
}

// requireUnfinishedRefused checks that serve and a command that opens the
// database at dir (env's) exit 1 naming the unfinished restore and how to
// finish it.
func requireUnfinishedRefused(t *testing.T, env envVars, dir string) {
	t.Helper()
	hint := "progressdb restore --resume --db " + dir
	srv := start(t, env.with("PROGRESSDB_ADDR", freeAddr(t)), "serve")
	if code := srv.wait(t, processTimeout); code != 1 || !strings.Contains(srv.stderr.String(), "unfinished restore") ||
		!strings.Contains(srv.stderr.String(), hint) {
		t.Fatalf("serve on an unfinished restore: exit %d, want 1 naming it and %q\n%s", code, hint, srv.output())
	}
	for _, args := range [][]string{{"retention", "run"}, {"backup", "create", "--out", filepath.Join(t.TempDir(), "x.tar")}, {"retention", "status"}} {
		p := runCLI(t, env, args...)
		if p.code != 1 || !strings.Contains(p.stderr.String(), hint) {
			t.Fatalf("%v on an unfinished restore: exit %d, want 1 naming %q\n%s", args, p.code, hint, p.output())
		}
	}
}

// A trail that does not verify after the backup's head (a file deleted)
// makes restore replay nothing and exit 1; --accept-broken-audit replays
// what the trail still shows and says so in the replay's header.
func TestFaultRestoreBrokenTrail(t *testing.T) {
	t.Parallel()
	s := newSite(t.TempDir())
	fx := buildRestoreFixture(t, s.db, 2)
	env := policyEnv(s)
	archive := filepath.Join(s.dir, "b.tar")
	if p := runCLI(t, env, "backup", "create", "--out", archive); p.code != 0 {
		t.Fatalf("backup create: %d\n%s", p.code, p.output())
	}
	first, res := runRetention(t, env)
	if first.code != 0 || res == nil || res.Purged == 0 {
		t.Fatalf("retention run: %d %+v\n%s", first.code, res, first.output())
	}
	// A second run (nothing due) follows the first; then the first's file
	// goes missing, which breaks the chain after the backup's head.
	if p, _ := runRetention(t, env); p.code != 0 {
		t.Fatalf("second run: %d\n%s", p.code, p.output())
	}
	must(t, os.Remove(res.AuditFile))

	restored := filepath.Join(s.dir, "restored")
	p := runCLI(t, env, "restore", archive, "--db", restored)
	if p.code != 1 || !strings.Contains(p.stderr.String(), "does not verify") || !strings.Contains(p.stderr.String(), "--resume") {
		t.Fatalf("restore over a broken trail: %d, want 1 naming the trail and --resume\n%s", p.code, p.output())
	}
	st, err := store.Open(restored, store.Options{Restoring: true})
	must(t, err)
	for _, tid := range fx.threads {
		if ok, _ := st.ItemExists(context.Background(), store.KindThread, tid); !ok {
			t.Fatalf("thread %s replayed although the trail does not verify", tid)
		}
	}
	st.Close()
	// Refused, the restore is unfinished: nothing serves it until it is
	// resumed, here over what the trail still shows.
	on := env.with("PROGRESSDB_DB_PATH", restored)
	requireUnfinishedRefused(t, on, restored)
	p = runCLI(t, on, "restore", "--resume", "--db", restored, "--accept-broken-audit", "--json")
	if p.code != 0 {
		t.Fatalf("restore --resume --accept-broken-audit: %d\n%s", p.code, p.output())
	}
	var rep struct {
		Replay struct {
			AuditFile string `json:"audit_file"`
		} `json:"replay"`
	}
	must(t, json.Unmarshal([]byte(p.stdout.String()), &rep))
	data, err := os.ReadFile(rep.Replay.AuditFile)
	must(t, err)
	if !strings.Contains(string(data), `"accept_broken_audit":true`) {
		t.Fatalf("the replay's header does not record the accepted broken trail:\n%s", data)
	}
	srv := startServer(t, on)
	srv.stop(t)
}

// copyFolder copies the regular files of src into a new folder dst, as an
// operator's cp of a stopped server's data folder would.
func copyFolder(t testing.TB, src, dst string) {
	t.Helper()
	must(t, os.MkdirAll(dst, 0o700))
	entries, err := os.ReadDir(src)
	must(t, err)
	for _, e := range entries {
		if !e.Type().IsRegular() {
			continue
		}
		data, err := os.ReadFile(filepath.Join(src, e.Name()))
		must(t, err)
		must(t, os.WriteFile(filepath.Join(dst, e.Name()), data, 0o600))
	}
}

// The operator's story of issue 20, word for word: stop the server, copy
// DB_PATH (the audit folder elsewhere), start, delete three threads and a
// message, run retention (4 purged), stop, copy the old folder back,
// start. The first request after the start must not serve any of them.
func TestFaultCopiedBackFolder(t *testing.T) {
	t.Parallel()
	s := newSite(t.TempDir())
	const period = time.Second
	env := s.shortPeriodEnv(period)
	srv := startServer(t, env)
	for i := range 4 {
		tid := fmt.Sprintf("t%d", i)
		srv.mustCall(t, "POST", "/v1/threads", map[string]string{"id": tid, "title": "title-of-" + tid, "author": "a"}, "", http.StatusCreated, nil)
		srv.mustCall(t, "POST", "/v1/threads/"+tid+"/messages", map[string]any{"id": tid + "-m", "author": "a",
			"body": "content-of-" + tid + "-m"}, "", http.StatusCreated, nil)
	}
	srv.stop(t)
	old := filepath.Join(s.dir, "copy")
	copyFolder(t, s.db, old)

	srv = startServer(t, env)
	for i := range 3 {
		srv.mustCall(t, "DELETE", fmt.Sprintf("/v1/threads/t%d", i), nil, "", http.StatusNoContent, nil)
	}
	srv.mustCall(t, "DELETE", "/v1/threads/t3/messages/t3-m", nil, "", http.StatusNoContent, nil)
	time.Sleep(period + 100*time.Millisecond)
	var res struct {
		Purged int `json:"purged"`
	}
	srv.mustCall(t, "POST", "/admin/retention/run", nil, adminToken, http.StatusOK, &res)
	if res.Purged != 4 {
		t.Fatalf("purged %d, want 4", res.Purged)
	}
	srv.stop(t)

	must(t, os.RemoveAll(s.db))
	copyFolder(t, old, s.db)
	srv = startServer(t, env)
	for i := range 3 {
		srv.mustCall(t, "GET", fmt.Sprintf("/v1/threads/t%d?include_deleted=true", i), nil, "", http.StatusNotFound, nil)
	}
	srv.mustCall(t, "GET", "/v1/threads/t3/messages/t3-m", nil, "", http.StatusNotFound, nil)
	srv.mustCall(t, "GET", "/v1/threads/t3", nil, "", http.StatusOK, nil)
	srv.stop(t)
	storetest.RequireNone(t, s.db, "title-of-t0", "title-of-t1", "title-of-t2", "content-of-t0-m", "content-of-t3-m")
	storetest.RequireAll(t, s.db, "title-of-t3")
}

// Issue 27, problem 3: a mistyped --audit folder is an error (exit 2)
// that creates nothing, neither the folder nor the database; before, the
// restore made the folder, left the database in place and exited 1, and
// a server on it served threads the trail records as purged.
func TestFaultRestoreMissingTrailFolder(t *testing.T) {
	t.Parallel()
	s := newSite(t.TempDir())
	buildRestoreFixture(t, s.db, 1)
	env := policyEnv(s)
	archive := filepath.Join(s.dir, "b.tar.zst")
	if p := runCLI(t, env, "backup", "create", "--out", archive); p.code != 0 {
		t.Fatalf("backup create: %d\n%s", p.code, p.output())
	}
	typo, restored := filepath.Join(s.dir, "typo"), filepath.Join(s.dir, "r3")
	p := runCLI(t, env, "restore", archive, "--db", restored, "--audit", typo)
	if p.code != 2 || !strings.Contains(p.stderr.String(), typo) {
		t.Fatalf("restore with a missing --audit folder: %d, want 2 naming it\n%s", p.code, p.output())
	}
	for _, dir := range []string{typo, restored} {
		if _, err := os.Stat(dir); !os.IsNotExist(err) {
			t.Fatalf("the refused restore made %s (%v)", dir, err)
		}
	}
}
