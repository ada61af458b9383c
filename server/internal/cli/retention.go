package cli

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/progressdb/progressdb/audit"
	"github.com/progressdb/progressdb/server/internal/app"
	"github.com/progressdb/progressdb/server/internal/retention"
	"github.com/progressdb/progressdb/server/pkg/config"
	"github.com/progressdb/progressdb/server/pkg/store"
)

// runReport is what `retention run --json` prints on every exit path: the
// run's summary when a run happened, and why the command exits as it does.
type runReport struct {
	*retention.Result
	ExitCode int `json:"exit_code"`
	// Reason names the exit path: completed, failed, interrupted,
	// lease_held, database_busy, no_database, disabled, paused,
	// invalid_configuration or error.
	Reason string               `json:"reason"`
	Error  string               `json:"error,omitempty"`
	Holder *retention.LeaseInfo `json:"holder,omitempty"`
	// Database is the database the run was asked of.
	Database *database `json:"database,omitempty"`
}

// retentionRun runs retention once against PROGRESSDB_DB_PATH: on the
// database when no server holds it, else through that server's admin API
// (POST /admin/retention/run), with the same output either way. Exit 0
// completed, 75 lease held elsewhere, 2 invalid configuration, 1 anything
// else. On a terminal a direct run draws a progress bar on stderr.
func (e env) retentionRun(ctx context.Context, args []string) int {
	fs := flag.NewFlagSet("retention run", flag.ContinueOnError)
	dryRun := fs.Bool("dry-run", false, "write the audit, delete nothing")
	asJSON := fs.Bool("json", false, "print the summary as JSON (also when the run could not start)")
	server := serverFlag(fs)
	if !e.parseFlags(fs, args, false) {
		return exitUsage
	}
	// done prints the outcome: a line on stderr when something went
	// wrong, the JSON report on stdout with --json whatever happened.
	done := func(rep runReport, msg string) int {
		if msg != "" {
			fmt.Fprintf(e.stderr, "progressdb retention run: %s\n", msg)
			if rep.Error == "" {
				rep.Error = msg
			}
		}
		if *asJSON {
			writeJSON(e.stdout, rep)
		}
		return rep.ExitCode
	}
	cfg, err := config.Load(e.environ)
	if err != nil {
		fmt.Fprintf(e.stderr, "progressdb: invalid configuration: %v\n", err)
		return done(runReport{ExitCode: exitUsage, Reason: "invalid_configuration", Error: err.Error()}, "")
	}
	var ok bool
	if *server, ok = e.serverOf("retention run", *server, cfg); !ok {
		return done(runReport{ExitCode: exitUsage, Reason: "invalid_configuration", Error: "--server: not a server's URL"}, "")
	}
	bar, logger, closer, err := e.barAndLogger(cfg)
	if err != nil {
		fmt.Fprintf(e.stderr, "progressdb: invalid configuration: %v\n", err)
		return done(runReport{ExitCode: exitUsage, Reason: "invalid_configuration", Error: err.Error()}, "")
	}
	defer closer.Close()
	key, err := app.SigningKey(cfg)
	if err != nil {
		fmt.Fprintf(e.stderr, "progressdb: invalid configuration: %v\n", err)
		return done(runReport{ExitCode: exitUsage, Reason: "invalid_configuration", Error: err.Error()}, "")
	}

	var res retention.Result
	t, err := e.openTarget(ctx, cfg, logger, *server)
	switch {
	case errors.Is(err, store.ErrNoDatabase):
		return done(runReport{ExitCode: exitFailed, Reason: "no_database"}, err.Error())
	case errors.Is(err, errNotTheServer):
		// A process holds the database: the run is its to make, through
		// its admin API (POST /admin/retention/run), once it is known.
		return done(runReport{ExitCode: exitFailed, Reason: "database_busy"}, err.Error())
	case err != nil:
		return done(runReport{ExitCode: openExit(err), Reason: "error"}, err.Error())
	}
	defer t.close()
	switch {
	case t.db.Node:
		return e.clusterRetentionRun(ctx, t.c, *dryRun, *asJSON)
	case t.c != nil:
		var callErr error
		res, err, callErr = runOnServer(ctx, t.c, *dryRun)
		db := t.acted()
		if callErr != nil && ctx.Err() != nil {
			// The server does not stop a run whose client hangs up.
			return done(runReport{ExitCode: exitFailed, Reason: "error", Database: &db},
				"stopped waiting; the run goes on in the server at "+t.c.base+" (progressdb retention status shows it)")
		}
		if callErr != nil {
			return done(runReport{ExitCode: exitFailed, Reason: "database_busy", Database: &db}, fmt.Sprintf(
				"the server at %s did not run retention on database %s: %v", t.c.base, db, callErr))
		}
	default:
		var stop *runReport
		if res, err, stop = e.runDirect(ctx, t.st, cfg, logger, key, bar, *dryRun); stop != nil {
			return done(*stop, stop.Error)
		}
	}
	return done(e.runOutcome(res, err, t.acted(), *asJSON))
}

// runDirect makes the run on the database st when no server holds it:
// first the purges of its audit trail it lacks, then the run. stop is the
// report of a run that could not start, its Error the reason.
func (e env) runDirect(ctx context.Context, st *store.Store, cfg config.Config, logger *slog.Logger, key ed25519.PrivateKey,
	bar *progressBar, dryRun bool) (res retention.Result, err error, stop *runReport) {
	sts, serr := app.WithBlobs(ctx, cfg, st)
	if serr != nil {
		return res, nil, &runReport{ExitCode: exitFailed, Reason: "error", Error: serr.Error()}
	}
	defer sts.Blobs.Close()
	svc, serr := app.NewRetention(sts, cfg.Retention, logger, prometheus.NewRegistry(), false, key)
	if serr != nil {
		return res, nil, &runReport{ExitCode: exitFailed, Reason: "error", Error: serr.Error()}
	}
	// A database copied back by hand first gets the purges it lacks
	// (a dry run changes nothing: it previews the database as it is).
	if !dryRun {
		replayed, cerr := svc.CatchUp(ctx, false)
		var held *retention.LeaseHeldError
		switch {
		case errors.As(cerr, &held):
			return res, nil, &runReport{ExitCode: exitLeaseHeld, Reason: "lease_held", Holder: &held.Holder,
				Error: "the database lacks purges of its audit trail and the lease to replay them is held by " + held.Holder.Owner}
		case cerr != nil:
			return res, nil, &runReport{ExitCode: exitFailed, Reason: "error", Error: "replay the purges the database lacks: " + cerr.Error()}
		case replayed != nil:
			fmt.Fprintf(e.stderr, "progressdb retention run: the database lacked %d purges of its audit trail: replayed by run %s\n",
				replayed.Purged, replayed.RunID)
		}
	}
	req := retention.RunRequest{DryRun: dryRun, Trigger: retention.TriggerCLI}
	if bar != nil {
		req.Progress = bar.update
	}
	res, err = svc.Run(ctx, req)
	bar.clear()
	return res, err, nil
}

// runOutcome turns a run's result and error into the command's report and
// the message for stderr, printing the summary unless asJSON.
func (e env) runOutcome(res retention.Result, err error, db database, asJSON bool) (runReport, string) {
	var held *retention.LeaseHeldError
	switch {
	case errors.As(err, &held):
		return runReport{ExitCode: exitLeaseHeld, Reason: "lease_held", Holder: &held.Holder, Database: &db}, fmt.Sprintf(
			"lease held by %s (host %s, pid %d) until %s; run skipped",
			held.Holder.Owner, held.Holder.Host, held.Holder.PID, held.Holder.Expires.Format(time.RFC3339))
	case errors.Is(err, retention.ErrPaused):
		return runReport{ExitCode: exitFailed, Reason: "paused", Database: &db},
			"retention is paused; `progressdb retention resume` lifts it, --dry-run previews"
	case errors.Is(err, retention.ErrDisabled):
		return runReport{ExitCode: exitFailed, Reason: "disabled", Database: &db},
			"the server refused: retention is disabled there (PROGRESSDB_RETENTION_ENABLED); --dry-run previews"
	}
	rep := runReport{ExitCode: exitOK, Reason: res.Status, Error: res.Error, Database: &db}
	if res.RunID != "" || !res.StartedAt.IsZero() {
		rep.Result = &res
	}
	if !asJSON {
		printDatabase(e.stdout, db)
		printResult(e.stdout, res)
	}
	switch {
	case err != nil:
		rep.ExitCode = exitFailed
		return rep, err.Error()
	case res.Status != "completed":
		rep.ExitCode = exitFailed
	}
	return rep, ""
}

// runOnServer asks the server that holds the database for the run (POST
// /admin/retention/run, waiting for it) and turns its answer into what
// a run on the database returns, so that both print and exit alike.
// callErr is a call that brought no answer about a run (no server
// answered, the token was refused).
func runOnServer(ctx context.Context, c *adminClient, dryRun bool) (res retention.Result, runErr, callErr error) {
	err := c.untimed().do(ctx, http.MethodPost, "/admin/retention/run", map[string]bool{"dry_run": dryRun}, &res)
	var ae *adminError
	switch {
	case err == nil:
		return res, nil, nil
	case !errors.As(err, &ae):
		return res, nil, err
	case ae.Status == http.StatusConflict && ae.Holder != nil:
		return res, &retention.LeaseHeldError{Holder: *ae.Holder}, nil
	case ae.Status == http.StatusConflict && ae.Paused:
		return res, retention.ErrPaused, nil
	case ae.Status == http.StatusConflict && ae.Msg == retention.ErrDisabled.Error():
		return res, retention.ErrDisabled, nil // a server from before runs by hand did not need it
	case ae.Result != nil:
		return *ae.Result, errors.New(ae.Msg), nil
	default:
		return res, nil, err
	}
}

// Sources of `retention status`: whose view it shows.
const (
	// statusFromServer: the running server's own answer (GET
	// /admin/retention at PROGRESSDB_ADDR).
	statusFromServer = "server"
	// statusFromDatabase: no server holds the database; the configuration
	// shown is this shell's, which a `retention run` from here would use.
	statusFromDatabase = "database"
	// statusFromFiles: a server holds the database and could not be asked;
	// only what it writes to disk (lease and audit files) is shown, never
	// this shell's configuration in its place.
	statusFromFiles = "files"
)

// statusReport is what `retention status --json` prints: the retention
// status and whose view it is. In the files view the status holds only
// the lease and the last run.
type statusReport struct {
	Source string `json:"source"`
	Server string `json:"server,omitempty"`
	Note   string `json:"note,omitempty"`
	// Database is the database whose status this is.
	Database database `json:"database"`
	*retention.Status
	// Lease and LastRun are known in every view, so they stand outside
	// Status (and shadow its copies in JSON).
	Lease   retention.LeaseStatus `json:"lease"`
	LastRun *retention.Result     `json:"last_run"`
}

func newStatusReport(source string, st *retention.Status) *statusReport {
	return &statusReport{Source: source, Status: st, Lease: st.Lease, LastRun: st.LastRun}
}

// retentionStatus prints the lease holder, the last run, the next run and
// the pause switch. When a server holds the database it shows the
// server's own view through its admin API, or, without a token, only what
// the server wrote to disk.
func (e env) retentionStatus(ctx context.Context, args []string) int {
	fs := flag.NewFlagSet("retention status", flag.ContinueOnError)
	asJSON := fs.Bool("json", false, "print the status as JSON")
	server := serverFlag(fs)
	if !e.parseFlags(fs, args, false) {
		return exitUsage
	}
	cfg, ok := e.loadConfig()
	if !ok {
		return exitUsage
	}
	if *server, ok = e.serverOf("retention status", *server, cfg); !ok {
		return exitUsage
	}
	rep, code := e.readStatus(ctx, cfg, *asJSON, *server)
	if rep == nil {
		return code
	}
	if *asJSON {
		writeJSON(e.stdout, rep)
	} else {
		printStatus(e.stdout, rep)
	}
	return code
}

// readStatus asks the server, the database or the files, in that order of
// truth. A nil report means the report was printed (a cluster's, one
// line per shard) or the error was.
func (e env) readStatus(ctx context.Context, cfg config.Config, asJSON bool, server string) (*statusReport, int) {
	fail := func(err error) (*statusReport, int) {
		fmt.Fprintf(e.stderr, "progressdb retention status: %v\n", err)
		return nil, exitFailed
	}
	t, err := e.openTarget(ctx, cfg, nil, server)
	switch {
	case errors.Is(err, errNotTheServer):
		// A process holds the database and cannot be asked: show what it
		// writes to disk, never this shell's configuration in its place.
		// Without a token that is all there is to show; a server that was
		// asked and did not answer for the database fails, so scripts
		// notice.
		code := exitOK
		if !errors.Is(err, errNoAdminToken) {
			code = exitFailed
			fmt.Fprintf(e.stderr, "progressdb retention status: %v\n", err)
		}
		db := database{Path: cfg.DBPath}
		db.ID, _ = store.FolderDatabaseID(cfg.DBPath)
		st, rerr := retention.ReadStatus(cfg.Retention, time.Now(), db.ID)
		if rerr != nil {
			return fail(rerr)
		}
		return &statusReport{Source: statusFromFiles, Note: err.Error() + "; lease and last run read from " + cfg.Retention.AuditPath,
			Database: db, Lease: st.Lease, LastRun: st.LastRun}, code
	case err != nil:
		_, _ = fail(err)
		return nil, openExit(err)
	}
	defer t.close()
	switch {
	case t.db.Node:
		return nil, e.clusterRetentionStatus(ctx, t.c, asJSON)
	case t.c != nil:
		var st retention.Status
		if err := t.c.do(ctx, http.MethodGet, "/admin/retention", nil, &st); err != nil {
			return fail(err)
		}
		rep := newStatusReport(statusFromServer, &st)
		rep.Server = t.c.base
		rep.Database = t.acted()
		return rep, exitOK
	}
	st, err := retention.ReadStatus(cfg.Retention, time.Now(), t.db.ID)
	if err == nil {
		var p store.RetentionPause
		p, err = t.st.RetentionPause(ctx)
		st.PauseState = retention.PauseStateOf(p)
	}
	if err != nil {
		return fail(err)
	}
	rep := newStatusReport(statusFromDatabase, &st)
	rep.Database = t.db
	rep.Note = "no server holds the database: this shell's configuration, nothing scheduled"
	return rep, exitOK
}

func printStatus(w io.Writer, rep *statusReport) {
	printDatabase(w, rep.Database)
	switch rep.Source {
	case statusFromServer:
		fmt.Fprintf(w, "source:          server at %s\n", rep.Server)
	default:
		fmt.Fprintf(w, "source:          %s (%s)\n", rep.Source, rep.Note)
	}
	lease, last := rep.Lease, rep.LastRun
	if st := rep.Status; st != nil {
		fmt.Fprintf(w, "enabled:         %t\n", st.Enabled)
		fmt.Fprintf(w, "dry run:         %t\n", st.DryRun)
		fmt.Fprintf(w, "period:          %s (messages %s)\n", st.Period, st.MessagePeriod)
		fmt.Fprintf(w, "policies:        max_age %s, max_messages %d (0: off; per-thread overrides: retention policy get)\n",
			st.MaxAge, st.MaxMessages)
		fmt.Fprintf(w, "schedule:        %s (UTC)\n", st.Cron)
		printPause(w, st.PauseState)
		switch {
		case !st.NextRun.IsZero():
			fmt.Fprintf(w, "next run:        %s\n", st.NextRun.Format(time.RFC3339))
		case rep.Source == statusFromDatabase:
			fmt.Fprintln(w, "next run:        none (no server is running)")
		default:
			fmt.Fprintln(w, "next run:        none (retention disabled)")
		}
	}
	printLease(w, lease)
	if last == nil {
		fmt.Fprintln(w, "last run:        none")
		return
	}
	fmt.Fprintln(w, "last run:")
	printResult(w, *last)
}

// printLease says whether the lease is held, and by whom until when; a
// lease given up or left to expire is free, and its time is shown as when
// that happened, never as an expiry in the past.
func printLease(w io.Writer, l retention.LeaseStatus) {
	switch {
	case l.Owner == "":
		fmt.Fprintln(w, "lease:           never taken")
	case l.Held:
		fmt.Fprintf(w, "lease:           held by %s until %s\n", l.Owner, l.Expires.Format(time.RFC3339))
	case l.State == retention.LeaseReleased:
		fmt.Fprintf(w, "lease:           free (released by %s at %s)\n", l.Owner, l.ReleasedAt.Format(time.RFC3339))
	default:
		fmt.Fprintf(w, "lease:           free (expired at %s: %s stopped renewing it)\n", l.Expires.Format(time.RFC3339), l.Owner)
	}
}

func printResult(w io.Writer, r retention.Result) {
	fmt.Fprintf(w, "  run_id:        %s\n", r.RunID)
	fmt.Fprintf(w, "  status:        %s (dry_run=%t)\n", r.Status, r.DryRun)
	fmt.Fprintf(w, "  started_at:    %s\n", r.StartedAt.Format(time.RFC3339))
	if !r.FinishedAt.IsZero() {
		fmt.Fprintf(w, "  finished_at:   %s (%s)\n", r.FinishedAt.Format(time.RFC3339), r.FinishedAt.Sub(r.StartedAt.Time).Round(time.Millisecond))
	}
	fmt.Fprintf(w, "  scanned=%d eligible=%d purged=%d failed=%d skipped=%d stamped=%d keys_deleted=%d\n",
		r.Scanned, r.Eligible, r.Purged, r.Failed, r.Skipped, r.Stamped, r.KeysDeleted)
	for _, c := range []string{audit.CauseDeleted, audit.CauseMaxAge, audit.CauseMaxMessages} {
		if cc, ok := r.ByCause[c]; ok {
			fmt.Fprintf(w, "  %-14s eligible=%d purged=%d failed=%d skipped=%d\n", c+":", cc.Eligible, cc.Purged, cc.Failed, cc.Skipped)
		}
	}
	if r.AuditFile != "" {
		fmt.Fprintf(w, "  audit_file:    %s\n", r.AuditFile)
	}
	if r.ExportFile != "" {
		fmt.Fprintf(w, "  export_file:   %s (%d records)\n", r.ExportFile, r.Exported)
	}
	if r.Error != "" {
		fmt.Fprintf(w, "  error:         %s\n", r.Error)
	}
}

func writeJSON(w io.Writer, v any) {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		fmt.Fprintf(w, "{\"error\": %q}\n", err.Error())
	}
}
