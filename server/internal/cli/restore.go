package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/progressdb/progressdb/audit"
	"github.com/progressdb/progressdb/server/internal/app"
	"github.com/progressdb/progressdb/server/internal/backup"
	"github.com/progressdb/progressdb/server/internal/retention"
	"github.com/progressdb/progressdb/server/pkg/config"
	"github.com/progressdb/progressdb/server/pkg/erase"
	"github.com/progressdb/progressdb/server/pkg/keystore"
	"github.com/progressdb/progressdb/server/pkg/store"
)

// restoreReport is what `restore --json` prints.
type restoreReport struct {
	ExitCode int    `json:"exit_code"`
	DB       string `json:"db"`
	Audit    string `json:"audit"`
	// DatabaseID is the restored database's own identity; OriginID the
	// one it was restored from (spec §10.1).
	DatabaseID string `json:"database_id,omitempty"`
	// KeyStore is where the backup's key store went (sealed content).
	KeyStore string            `json:"keystore,omitempty"`
	OriginID string            `json:"origin_id,omitempty"`
	Backup   *backup.Manifest  `json:"backup,omitempty"`
	Problems []string          `json:"problems,omitempty"` // why the backup does not verify
	Replay   *retention.Result `json:"replay,omitempty"`
	Error    string            `json:"error,omitempty"`
}

// restore unpacks a backup into an empty folder as a new database (its own
// identity, knowing its origin) and replays every purge the audit trail
// records after the backup's head (spec §10, §10.1). Until the replay
// completes, the folder's marker keeps every command from serving it;
// `restore --resume --db DIR` finishes it. Exit 0 restored and replayed,
// 1 failed (backup or trail does not verify, replay cut short), 2 usage
// (DIR not empty, trail folder missing: nothing touched), 75 lease held
// elsewhere. A backup of sealed content brings its key store, restored
// into --keystore (default PROGRESSDB_KEYSTORE_PATH) and opened with
// PROGRESSDB_KEK: the replay destroys there the keys that purges and
// erasures destroyed since, and erases them from its files (spec §12).
func (e env) restore(ctx context.Context, args []string) int {
	fs := flag.NewFlagSet("restore", flag.ContinueOnError)
	db := fs.String("db", "", "the folder to restore into: absent or empty (required)")
	auditDir := fs.String("audit", "", "the authoritative audit trail whose purges are replayed, where the restored database keeps its own (default PROGRESSDB_RETENTION_AUDIT_PATH; with --resume, the one the restore began with); it must exist")
	pubPath := fs.String("public-key", "", "ed25519 public key (PEM) the manifest and the audit files after its head must be signed with (default: the public half of PROGRESSDB_AUDIT_SIGNING_KEY)")
	keystoreDir := fs.String("keystore", "", "for a backup of sealed content: the folder its key store is restored into, absent or empty and outside --db (default PROGRESSDB_KEYSTORE_PATH; with --resume, the one the restore began with); opened with PROGRESSDB_KEK")
	accept := fs.Bool("accept-broken-audit", false, "replay what a trail that does not verify after the backup's head still shows, instead of nothing (recorded in the replay's header)")
	resume := fs.Bool("resume", false, "finish the restore in --db whose replay did not complete (killed, refused over a broken trail, trail folder missing)")
	asJSON := fs.Bool("json", false, "print the report as JSON")
	if !e.parseFlags(fs, args, true) {
		return exitUsage
	}
	if *db == "" || *resume && fs.NArg() != 0 || !*resume && fs.NArg() != 1 {
		fmt.Fprintln(e.stderr, "usage: progressdb restore FILE|- --db DIR [--audit DIR] [--keystore DIR] [--accept-broken-audit] [--json]\n"+
			"       progressdb restore --resume --db DIR [--audit DIR] [--accept-broken-audit] [--json]")
		return exitUsage
	}
	cfg, logger, closer, ok := e.configAndLogger()
	if !ok {
		return exitUsage
	}
	defer closer.Close()
	rep := restoreReport{DB: *db}
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
	var state store.RestoreState
	if *resume {
		st, found, err := store.ReadRestoreState(*db)
		switch {
		case err != nil:
			return done(exitFailed, err.Error())
		case !found:
			return done(exitUsage, fmt.Sprintf("%s holds no unfinished restore: nothing to resume", *db))
		case st.State != store.RestoreReplaying:
			return done(exitFailed, (&store.UnfinishedRestoreError{Dir: *db, State: st}).Error())
		}
		state = st
	}
	rcfg := cfg.Retention
	switch {
	case *auditDir != "":
		rcfg.AuditPath = *auditDir
	case *resume && state.Audit != "":
		rcfg.AuditPath = state.Audit
	}
	if rcfg.AuditPath != cfg.Retention.AuditPath {
		rcfg.LeasePath = filepath.Join(rcfg.AuditPath, "retention.lock")
	}
	rep.Audit = rcfg.AuditPath
	if !*resume {
		if err := backup.CheckEmpty(*db); err != nil {
			return done(exitUsage, err.Error()+": a restore goes into an absent or empty folder; nothing was touched")
		}
	}
	if inside(rcfg.AuditPath, *db) {
		return done(exitUsage, fmt.Sprintf("the audit trail %s lies inside %s: a restore replays the authoritative trail, which must live outside the database folder", rcfg.AuditPath, *db))
	}
	// A trail folder that is not there is a typo, not a trail without
	// purges: it is never made here.
	if fi, err := os.Stat(rcfg.AuditPath); err != nil || !fi.IsDir() {
		what := "nothing was touched"
		if *resume {
			what = "the restore stays unfinished"
		}
		return done(exitUsage, fmt.Sprintf("no audit trail folder at %s (--audit, or %s by default): a restore replays the purges it records; %s",
			rcfg.AuditPath, config.VarAuditPath, what))
	}
	key, err := app.SigningKey(cfg)
	if err != nil {
		return done(exitUsage, "invalid configuration: "+err.Error())
	}
	pub, code := e.backupPublicKey("restore", *pubPath)
	if code != exitOK {
		return done(code, "")
	}

	ksDir := *keystoreDir
	switch {
	case *resume:
		ksDir = state.KeyStore
	case ksDir == "":
		ksDir = cfg.KeystorePath // "" when sealing is off
	case cfg.KEK == "":
		return done(exitUsage, "--keystore needs "+config.VarKEK+" (the KEK of the backup's key store): the replay destroys keys in it; nothing was touched")
	}
	if ksDir != "" && !*resume {
		if err := keystore.CheckOutside(ksDir, *db); err != nil {
			return done(exitUsage, fmt.Sprintf("--keystore %s: %v; nothing was touched", ksDir, err))
		}
	}
	if !*resume {
		file := fs.Arg(0)
		trail, err := filepath.Abs(rcfg.AuditPath)
		if err != nil {
			return done(exitFailed, err.Error())
		}
		name := file
		if file == "-" {
			name = stdinName
		}
		state = store.RestoreState{Backup: name, DatabaseID: store.NewDatabaseID(), Audit: trail}
		var vrep backup.Report
		if file == "-" {
			vrep, err = backup.ExtractPendingReader(ctx, name, e.input(), *db, ksDir, pub, state)
		} else {
			vrep, err = backup.ExtractPending(ctx, file, *db, ksDir, pub, state)
		}
		if errors.Is(err, backup.ErrNotEmpty) {
			return done(exitUsage, fmt.Sprintf("%v: the backup holds a key store, restored into an absent or empty folder (--keystore, default %s); nothing was restored", err, config.VarKeystorePath))
		}
		if err != nil {
			return done(exitFailed, err.Error())
		}
		rep.Backup = &vrep.Manifest
		if !vrep.Valid && vrep.Manifest.Sealed && ksDir == "" {
			return done(exitUsage, fmt.Sprintf("the backup holds sealed content: set %s and %s (or --keystore DIR) to restore it with its keys; nothing was restored",
				config.VarKEK, config.VarKeystorePath))
		}
		if !vrep.Valid {
			rep.Problems = vrep.Problems
			for _, p := range vrep.Problems {
				fmt.Fprintf(e.stderr, "progressdb restore: backup does not verify: %s\n", p)
			}
			return done(exitFailed, "the backup does not verify; nothing was restored")
		}
		state.BackupID = vrep.Manifest.BackupID
		if vrep.Manifest.Sealed {
			state.KeyStore = ksDir
		}
	}
	unfinished := fmt.Sprintf("the restore is unfinished and nothing serves %s until it is: run 'progressdb restore --resume --db %s'", *db, *db)

	rep.KeyStore = state.KeyStore
	keys, code, msg := openRestoredKeys(ctx, cfg, state.KeyStore, *db, logger)
	if code != exitOK {
		return done(code, msg+"; "+unfinished)
	}
	opts := store.Options{Logger: logger, Restoring: true, Sealer: app.Sealer(keys)}
	if keys != nil {
		opts.Closer = keys // never a nil pointer in the interface
	}
	st, err := store.Open(*db, opts)
	if err != nil {
		if keys != nil {
			_ = keys.Close()
		}
		return done(exitFailed, err.Error()+"; "+unfinished)
	}
	defer st.Close()
	lineage, err := st.BecomeCopy(ctx, state.DatabaseID, state.BackupID)
	if err != nil {
		return done(exitFailed, err.Error()+"; "+unfinished)
	}
	rep.DatabaseID, rep.OriginID = state.DatabaseID, lineage.OriginID
	svc, err := app.NewRetention(st, rcfg, logger, prometheus.NewRegistry(), false, key)
	if err != nil {
		return done(exitFailed, err.Error()+"; "+unfinished)
	}
	defer svc.Close()
	res, err := svc.Run(ctx, retention.RunRequest{Trigger: audit.TriggerRestore, Replay: retention.ReplayOptions{
		BackupID: state.BackupID, AcceptBrokenAudit: *accept, PublicKey: pub}})
	var held *retention.LeaseHeldError
	switch {
	case errors.As(err, &held):
		return done(exitLeaseHeld, fmt.Sprintf("the retention lease is held by %s; the files are restored, and %s once it is free",
			held.Holder.Owner, unfinished))
	case res.RunID != "":
		rep.Replay = &res
	}
	if errors.Is(err, retention.ErrBrokenTrail) {
		return done(exitFailed, err.Error()+"; nothing was replayed, "+unfinished+" once the trail is fixed, or add --accept-broken-audit to replay what it still shows")
	}
	if err != nil {
		return done(exitFailed, err.Error()+"; "+unfinished)
	}
	if res.Status != audit.RunCompleted {
		return done(exitFailed, fmt.Sprintf("the replay ended %s: %s; %s", res.Status, res.Error, unfinished))
	}
	if keys != nil {
		// The replay's runs erase what they destroy; this also erases
		// what the backup's own key store still owed (a run killed
		// before its erase), so that no destroyed key is left in any
		// restored file.
		if _, err := keys.Erase(ctx, erase.Options{}); err != nil {
			return done(exitFailed, "erase the restored key store: "+err.Error()+"; "+unfinished)
		}
	}
	if err := store.FinishRestore(*db); err != nil {
		return done(exitFailed, err.Error()+"; "+unfinished)
	}
	if !*asJSON {
		printRestore(e.stdout, rep)
	}
	return done(exitOK, "")
}

// openRestoredKeys opens the key store a sealed backup was restored into
// (nil when the backup was plain) with PROGRESSDB_KEK; on failure it
// returns the exit status and why.
func openRestoredKeys(ctx context.Context, cfg config.Config, dir, db string, logger *slog.Logger) (*keystore.KeyStore, int, string) {
	if dir == "" {
		return nil, exitOK, ""
	}
	if cfg.KEK == "" {
		return nil, exitUsage, fmt.Sprintf("the backup's key store is in %s and %s is not set: the replay needs it", dir, config.VarKEK)
	}
	keeper, err := keystore.OpenKEK(ctx, cfg.KEK)
	if err != nil {
		return nil, exitUsage, err.Error()
	}
	ks, err := keystore.Open(ctx, dir, keystore.Options{Keeper: keeper, DataPath: db, Logger: logger})
	if errors.Is(err, keystore.ErrWrongKEK) {
		_ = keeper.Close()
		return nil, exitFailed, fmt.Sprintf("%s does not open the backup's key store (restored into %s): set it to the KEK the backup was made with", config.VarKEK, dir)
	}
	if err != nil {
		_ = keeper.Close()
		return nil, exitFailed, fmt.Sprintf("open the restored key store %s: %v", dir, err)
	}
	return ks, exitOK, ""
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
	if m := rep.Backup; m != nil {
		fmt.Fprintf(w, "restored:    %s into %s\n", m.BackupID, rep.DB)
		fmt.Fprintf(w, "contents:    %d threads, %d messages\n", m.Threads, m.Messages)
		fmt.Fprintf(w, "audit_head:  %s\n", headName(*m))
	} else {
		fmt.Fprintf(w, "resumed:     the restore into %s\n", rep.DB)
	}
	fmt.Fprintf(w, "database_id: %s (a new database; origin %s)\n", rep.DatabaseID, orNone(rep.OriginID))
	if rep.KeyStore != "" {
		fmt.Fprintf(w, "keystore:    %s (the backup's keys; what was purged since is destroyed and erased)\n", rep.KeyStore)
	}
	if r := rep.Replay; r != nil {
		fmt.Fprintf(w, "replayed:    %d purges (%d absent from the backup), run %s\n", r.Purged, r.Skipped, r.RunID)
		fmt.Fprintf(w, "audit_file:  %s\n", r.AuditFile)
	}
}
