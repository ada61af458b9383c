package cli

import (
	"context"
	"crypto/ed25519"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/progressdb/progressdb/server/internal/app"
	"github.com/progressdb/progressdb/server/internal/backup"
	"github.com/progressdb/progressdb/server/internal/retention"
	"github.com/progressdb/progressdb/server/pkg/attachments"
	"github.com/progressdb/progressdb/server/pkg/config"
	"github.com/progressdb/progressdb/server/pkg/store"
)

// restoreReport is what `restore --json` prints.
type restoreReport struct {
	ExitCode int `json:"exit_code"`
	backup.RestoreResult
	// ServeEnv is the environment that serves the copy (serveEnv); an
	// empty value means unset.
	ServeEnv map[string]string `json:"serve_env,omitempty"`
	Error    string            `json:"error,omitempty"`
}

// restore unpacks a backup into an empty folder as a new database and
// replays every purge the audit trail records after the backup's head
// (backup.Restore; spec §10, §10.1, §12); `restore --resume --db DIR`
// finishes one whose replay did not complete. Exit 0 restored and
// replayed, 1 failed (backup or trail does not verify, replay cut short),
// 2 usage (DIR not empty, trail folder missing: nothing touched), 75
// lease held elsewhere.
func (e env) restore(ctx context.Context, args []string) int {
	fs := flag.NewFlagSet("restore", flag.ContinueOnError)
	db := fs.String("db", "", "the folder to restore into: absent or empty (required)")
	auditDir := fs.String("audit", "", "the authoritative audit trail whose purges are replayed, where the restored database keeps its own (default PROGRESSDB_RETENTION_AUDIT_PATH; with --resume, the one the restore began with); it must exist")
	pubPath := fs.String("public-key", "", "ed25519 public key (PEM) the manifest and the audit files after its head must be signed with (default: the public half of PROGRESSDB_AUDIT_SIGNING_KEY)")
	keystoreDir := fs.String("keystore", "", "for a backup of sealed content: the folder its key store is restored into, absent or empty and outside --db (default PROGRESSDB_KEYSTORE_PATH; with --resume, the one the restore began with); opened with PROGRESSDB_KEK")
	blobsDir := fs.String("attachments", "", "the folder a backup's attachments (of a file:// store) are restored into, the copy's attachments store: absent or empty unless --force, outside --db (default: the folder beside --db, DIR-attachments)")
	force := fs.Bool("force", false, "restore the attachments into a --attachments folder that is not empty (blobs of the same name are replaced)")
	accept := fs.Bool("accept-broken-audit", false, "replay what a trail that does not verify after the backup's head still shows, instead of nothing (recorded in the replay's header)")
	resume := fs.Bool("resume", false, "finish the restore in --db whose replay did not complete (killed, refused over a broken trail, trail folder missing)")
	asJSON := fs.Bool("json", false, "print the report as JSON")
	if !e.parseFlags(fs, args, true) {
		return exitUsage
	}
	if *db == "" || *resume && fs.NArg() != 0 || !*resume && fs.NArg() != 1 {
		fmt.Fprintln(e.stderr, "usage: progressdb restore FILE|- --db DIR [--audit DIR] [--keystore DIR] [--attachments DIR [--force]] [--accept-broken-audit] [--json]\n"+
			"       progressdb restore --resume --db DIR [--audit DIR] [--accept-broken-audit] [--json]")
		return exitUsage
	}
	cfg, logger, closer, ok := e.configAndLogger()
	if !ok {
		return exitUsage
	}
	defer closer.Close()
	rep := restoreReport{RestoreResult: backup.RestoreResult{DB: *db}}
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
	key, err := app.SigningKey(cfg)
	if err != nil {
		return done(exitUsage, "invalid configuration: "+err.Error())
	}
	pub, code := e.backupPublicKey("restore", *pubPath)
	if code != exitOK {
		return done(code, "")
	}
	o := backup.RestoreOptions{File: fs.Arg(0), DB: *db, Resume: *resume, Retention: cfg.Retention, Audit: *auditDir,
		KeyStore: *keystoreDir, DefaultKeyStore: cfg.KeystorePath, KEK: cfg.KEK, PublicKey: pub, AcceptBrokenAudit: *accept,
		Attachments: *blobsDir, ForceAttachments: *force,
		Logger: logger, NewReplayer: func(st *store.Store, rc config.Retention) (backup.Replayer, error) {
			return newReplayer(ctx, cfg, *db, st, rc, logger, key)
		}}
	if o.File == "-" {
		o.File, o.Input = stdinName, e.input()
	}
	rep.RestoreResult, err = backup.Restore(ctx, o)
	for _, p := range rep.Problems {
		fmt.Fprintf(e.stderr, "progressdb restore: backup does not verify: %s\n", p)
	}
	if err != nil {
		return done(restoreExit(err), err.Error())
	}
	rep.ServeEnv = serveEnv(rep, cfg)
	if !*asJSON {
		printRestore(e.stdout, rep)
	}
	return done(exitOK, "")
}

// newReplayer builds a restore's replay over the restored store st and
// its blob store (app.CopyBlobsURL: the folder the restore put a file://
// store's blobs in, as its marker records): the replayed purges delete
// the blobs they owe there.
func newReplayer(ctx context.Context, cfg config.Config, db string, st *store.Store, rc config.Retention,
	logger *slog.Logger, key ed25519.PrivateKey) (backup.Replayer, error) {
	state, _, err := store.ReadRestoreState(db)
	if err != nil {
		return nil, err
	}
	u, err := app.CopyBlobsURL(cfg, db, state.Attachments)
	if err != nil {
		return nil, err
	}
	blobs, err := attachments.Open(ctx, u)
	if err != nil {
		return nil, fmt.Errorf("open the restored attachments store: %w", err)
	}
	svc, err := app.NewRetention(app.Stores{Store: st, Blobs: blobs}, rc, logger, prometheus.NewRegistry(), false, key)
	if err != nil {
		return nil, errors.Join(err, blobs.Close())
	}
	return closingReplayer{svc, blobs}, nil
}

// closingReplayer closes the blob store after the service.
type closingReplayer struct {
	*retention.Manager
	blobs *attachments.Blobs
}

func (r closingReplayer) Close() {
	r.Manager.Close()
	_ = r.blobs.Close()
}

// restoreExit is the exit status of a restore that failed with err.
func restoreExit(err error) int {
	var held *retention.LeaseHeldError
	switch {
	case errors.As(err, &held):
		return exitLeaseHeld
	case errors.Is(err, backup.ErrRefused):
		return exitUsage
	}
	return exitFailed
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
	if rep.Attachments != "" {
		fmt.Fprintf(w, "attachments: %s (the backup's blobs; those purged since are deleted)\n", rep.Attachments)
	} else if m := rep.Backup; m != nil && m.Attachments != nil {
		fmt.Fprintf(w, "attachments: in the %s:// store the backup was taken of (%s), which a copy served on it shares with the original: its purges delete blobs the original may still show (docs/backup.md)\n",
			m.Attachments.Store, config.VarAttachmentsURL)
	}
	if r := rep.Replay; r != nil {
		fmt.Fprintf(w, "replayed:    %d purges (%d absent from the backup), run %s\n", r.Purged, r.Skipped, r.RunID)
		fmt.Fprintf(w, "audit_file:  %s\n", r.AuditFile)
	}
	printServeEnv(w, rep.ServeEnv)
}
