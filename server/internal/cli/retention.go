package cli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/progressdb/progressdb/server/internal/app"
	"github.com/progressdb/progressdb/server/internal/retention"
	"github.com/progressdb/progressdb/server/pkg/config"
	"github.com/progressdb/progressdb/server/pkg/store"
)

// retentionRun runs retention once against PROGRESSDB_DB_PATH.
// Exit 0 completed, 75 lease held elsewhere, 1 anything else.
func (e env) retentionRun(ctx context.Context, args []string) int {
	fs := flag.NewFlagSet("retention run", flag.ContinueOnError)
	dryRun := fs.Bool("dry-run", false, "write the audit, delete nothing")
	asJSON := fs.Bool("json", false, "print the summary as JSON")
	if !e.parseFlags(fs, args, false) {
		return exitUsage
	}
	cfg, logger, closer, ok := e.configAndLogger()
	if !ok {
		return exitUsage
	}
	defer closer.Close()

	st, err := store.Open(cfg.DBPath, store.Options{})
	if errors.Is(err, store.ErrDatabaseLocked) {
		fmt.Fprintf(e.stderr, "progressdb retention run: the database at %s is open in a running server; "+
			"ask that server instead: POST /admin/retention/run\n", cfg.DBPath)
		return exitFailed
	}
	if err != nil {
		fmt.Fprintf(e.stderr, "progressdb retention run: %v\n", err)
		return exitFailed
	}
	defer st.Close()

	svc, err := app.NewRetention(st, cfg.Retention, logger, prometheus.NewRegistry(), false)
	if err != nil {
		fmt.Fprintf(e.stderr, "progressdb retention run: %v\n", err)
		return exitFailed
	}
	res, err := svc.Run(ctx, retention.RunRequest{DryRun: *dryRun, Trigger: "cli"})
	var held *retention.LeaseHeldError
	switch {
	case errors.As(err, &held):
		fmt.Fprintf(e.stderr, "progressdb retention run: lease held by %s (host %s, pid %d) until %s; run skipped\n",
			held.Holder.Owner, held.Holder.Host, held.Holder.PID, held.Holder.Expires.Format(time.RFC3339))
		return exitLeaseHeld
	case errors.Is(err, retention.ErrPaused):
		fmt.Fprintln(e.stderr, "progressdb retention run: retention is paused; `progressdb retention resume` lifts it, --dry-run previews")
		return exitFailed
	case errors.Is(err, retention.ErrDisabled):
		fmt.Fprintln(e.stderr, "progressdb retention run: retention is disabled; set PROGRESSDB_RETENTION_ENABLED=true or use --dry-run")
		return exitFailed
	}
	if *asJSON {
		writeJSON(e.stdout, res)
	} else {
		printResult(e.stdout, res)
	}
	if err != nil {
		fmt.Fprintf(e.stderr, "progressdb retention run: %v\n", err)
		return exitFailed
	}
	if res.Status != "completed" {
		return exitFailed
	}
	return exitOK
}

// retentionStatus prints the lease holder, the last run and the next run.
// It reads only the lease and audit files, so it works while a server runs.
func (e env) retentionStatus(ctx context.Context, args []string) int {
	fs := flag.NewFlagSet("retention status", flag.ContinueOnError)
	asJSON := fs.Bool("json", false, "print the status as JSON")
	if !e.parseFlags(fs, args, false) {
		return exitUsage
	}
	cfg, ok := e.loadConfig()
	if !ok {
		return exitUsage
	}
	st, err := retention.ReadStatus(cfg.Retention, time.Now())
	if err != nil {
		fmt.Fprintf(e.stderr, "progressdb retention status: %v\n", err)
		return exitFailed
	}
	pauseKnown := true
	switch db, err := store.Open(cfg.DBPath, store.Options{}); {
	case errors.Is(err, store.ErrDatabaseLocked):
		// A server holds the database: the pause switch is its to tell.
		if c, cerr := newAdminClient(cfg); cerr == nil {
			var remote retention.Status
			if err := c.do(ctx, http.MethodGet, "/admin/retention", nil, &remote); err == nil {
				st.PauseState = remote.PauseState
				break
			}
		}
		pauseKnown = false
	case err != nil:
		fmt.Fprintf(e.stderr, "progressdb retention status: %v\n", err)
		return exitFailed
	default:
		p, perr := db.RetentionPause(ctx)
		if cerr := db.Close(); perr == nil {
			perr = cerr
		}
		if perr != nil {
			fmt.Fprintf(e.stderr, "progressdb retention status: %v\n", perr)
			return exitFailed
		}
		st.PauseState = retention.PauseStateOf(p)
	}
	if *asJSON {
		writeJSON(e.stdout, st)
		return exitOK
	}
	w := e.stdout
	fmt.Fprintf(w, "enabled:         %t\n", st.Enabled)
	fmt.Fprintf(w, "dry run:         %t\n", st.DryRun)
	fmt.Fprintf(w, "period:          %s (messages %s)\n", st.Period, st.MessagePeriod)
	fmt.Fprintf(w, "schedule:        %s (UTC)\n", st.Cron)
	if pauseKnown {
		printPause(w, st.PauseState)
	} else {
		fmt.Fprintf(w, "paused:          unknown (a server holds the database; set %s to ask it)\n", config.VarAdminToken)
	}
	if st.NextRun != nil {
		fmt.Fprintf(w, "next run:        %s\n", st.NextRun.Format(time.RFC3339))
	} else {
		fmt.Fprintln(w, "next run:        none (retention disabled)")
	}
	if st.Lease.Owner == "" {
		fmt.Fprintln(w, "lease:           never taken")
	} else {
		fmt.Fprintf(w, "lease:           held=%t owner=%s expires=%s\n", st.Lease.Held, st.Lease.Owner, st.Lease.Expires.Format(time.RFC3339))
	}
	if st.LastRun == nil {
		fmt.Fprintln(w, "last run:        none")
		return exitOK
	}
	fmt.Fprintln(w, "last run:")
	printResult(w, *st.LastRun)
	return exitOK
}

func printResult(w io.Writer, r retention.Result) {
	fmt.Fprintf(w, "  run_id:        %s\n", r.RunID)
	fmt.Fprintf(w, "  status:        %s (dry_run=%t)\n", r.Status, r.DryRun)
	fmt.Fprintf(w, "  started_at:    %s\n", r.StartedAt.Format(time.RFC3339))
	if !r.FinishedAt.IsZero() {
		fmt.Fprintf(w, "  finished_at:   %s (%s)\n", r.FinishedAt.Format(time.RFC3339), r.FinishedAt.Sub(r.StartedAt).Round(time.Millisecond))
	}
	fmt.Fprintf(w, "  scanned=%d eligible=%d purged=%d failed=%d skipped=%d stamped=%d keys_deleted=%d\n",
		r.Scanned, r.Eligible, r.Purged, r.Failed, r.Skipped, r.Stamped, r.KeysDeleted)
	if r.AuditFile != "" {
		fmt.Fprintf(w, "  audit_file:    %s\n", r.AuditFile)
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
