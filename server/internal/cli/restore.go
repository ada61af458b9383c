package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"path/filepath"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/progressdb/progressdb/audit"
	"github.com/progressdb/progressdb/server/internal/app"
	"github.com/progressdb/progressdb/server/internal/backup"
	"github.com/progressdb/progressdb/server/internal/retention"
	"github.com/progressdb/progressdb/server/pkg/store"
)

// restoreReport is what `restore --json` prints.
type restoreReport struct {
	ExitCode int               `json:"exit_code"`
	DB       string            `json:"db"`
	Audit    string            `json:"audit"`
	Backup   *backup.Manifest  `json:"backup,omitempty"`
	Problems []string          `json:"problems,omitempty"` // why the backup does not verify
	Replay   *retention.Result `json:"replay,omitempty"`
	Error    string            `json:"error,omitempty"`
}

// restore unpacks a backup into an empty folder and replays every purge
// the audit trail records after the backup's head (spec §10). Exit 0
// restored and replayed, 1 failed (backup or trail does not verify), 2
// usage (DIR not empty: nothing touched), 75 lease held elsewhere.
func (e env) restore(ctx context.Context, args []string) int {
	fs := flag.NewFlagSet("restore", flag.ContinueOnError)
	db := fs.String("db", "", "the folder to restore into: absent or empty (required)")
	auditDir := fs.String("audit", "", "the authoritative audit trail whose purges are replayed (default PROGRESSDB_RETENTION_AUDIT_PATH)")
	pubPath := fs.String("public-key", "", "ed25519 public key (PEM) the manifest and the audit files after its head must be signed with (default: the public half of PROGRESSDB_AUDIT_SIGNING_KEY)")
	accept := fs.Bool("accept-broken-audit", false, "replay what a trail that does not verify after the backup's head still shows, instead of nothing (recorded in the replay's header)")
	asJSON := fs.Bool("json", false, "print the report as JSON")
	if !e.parseFlags(fs, args, true) {
		return exitUsage
	}
	if fs.NArg() != 1 || *db == "" {
		fmt.Fprintln(e.stderr, "usage: progressdb restore FILE --db DIR [--audit DIR] [--accept-broken-audit] [--json]")
		return exitUsage
	}
	file := fs.Arg(0)
	cfg, logger, closer, ok := e.configAndLogger()
	if !ok {
		return exitUsage
	}
	defer closer.Close()
	rcfg := cfg.Retention
	if *auditDir != "" {
		rcfg.AuditPath = *auditDir
		rcfg.LeasePath = filepath.Join(*auditDir, "retention.lock")
	}
	rep := restoreReport{DB: *db, Audit: rcfg.AuditPath}
	done := func(code int, msg string) int {
		rep.ExitCode = code
		if msg != "" {
			fmt.Fprintf(e.stderr, "progressdb restore: %s\n", msg)
			rep.Error = msg
		}
		if *asJSON {
			writeJSON(e.stdout, rep)
		}
		return code
	}
	if err := backup.CheckEmpty(*db); err != nil {
		return done(exitUsage, err.Error()+": a restore goes into an absent or empty folder; nothing was touched")
	}
	if inside(rcfg.AuditPath, *db) {
		return done(exitUsage, fmt.Sprintf("the audit trail %s lies inside %s: a restore replays the authoritative trail, which must live outside the database folder", rcfg.AuditPath, *db))
	}
	key, err := app.SigningKey(cfg)
	if err != nil {
		return done(exitUsage, "invalid configuration: "+err.Error())
	}
	pub, code := e.backupPublicKey("restore", *pubPath)
	if code != exitOK {
		return done(code, "")
	}

	vrep, err := backup.Extract(ctx, file, *db, pub)
	if err != nil {
		return done(exitFailed, err.Error())
	}
	rep.Backup = &vrep.Manifest
	if !vrep.Valid {
		rep.Problems = vrep.Problems
		for _, p := range vrep.Problems {
			fmt.Fprintf(e.stderr, "progressdb restore: backup does not verify: %s\n", p)
		}
		return done(exitFailed, "the backup does not verify; nothing was restored")
	}

	st, err := store.Open(*db, store.Options{Logger: logger})
	if err != nil {
		return done(exitFailed, err.Error())
	}
	defer st.Close()
	svc, err := app.NewRetention(st, rcfg, logger, prometheus.NewRegistry(), false, key)
	if err != nil {
		return done(exitFailed, err.Error())
	}
	defer svc.Close()
	res, err := svc.Run(ctx, retention.RunRequest{Trigger: audit.TriggerRestore, Replay: retention.ReplayOptions{
		BackupID: vrep.Manifest.BackupID, AcceptBrokenAudit: *accept, PublicKey: pub}})
	var held *retention.LeaseHeldError
	switch {
	case errors.As(err, &held):
		return done(exitLeaseHeld, fmt.Sprintf("the retention lease is held by %s; the files are restored, "+
			"and the first start of a server on %s replays the purges", held.Holder.Owner, *db))
	case res.RunID != "":
		rep.Replay = &res
	}
	if errors.Is(err, retention.ErrBrokenTrail) {
		return done(exitFailed, err.Error()+"; nothing was replayed: fix the trail, or restore again with --accept-broken-audit")
	}
	if err != nil {
		return done(exitFailed, err.Error())
	}
	if res.Status != audit.RunCompleted {
		return done(exitFailed, fmt.Sprintf("the replay ended %s: %s; the next start of a server on %s finishes it", res.Status, res.Error, *db))
	}
	if !*asJSON {
		printRestore(e.stdout, rep)
	}
	return done(exitOK, "")
}

// inside reports whether path is dir or lies under it.
func inside(path, dir string) bool {
	p, err1 := filepath.Abs(path)
	d, err2 := filepath.Abs(dir)
	if err1 != nil || err2 != nil {
		return false
	}
	return p == d || strings.HasPrefix(p, d+string(filepath.Separator))
}

func printRestore(w io.Writer, rep restoreReport) {
	m := rep.Backup
	fmt.Fprintf(w, "restored:    %s into %s\n", m.BackupID, rep.DB)
	fmt.Fprintf(w, "contents:    %d threads, %d messages\n", m.Threads, m.Messages)
	fmt.Fprintf(w, "audit_head:  %s\n", headName(*m))
	if r := rep.Replay; r != nil {
		fmt.Fprintf(w, "replayed:    %d purges (%d absent from the backup), run %s\n", r.Purged, r.Skipped, r.RunID)
		fmt.Fprintf(w, "audit_file:  %s\n", r.AuditFile)
	}
}
