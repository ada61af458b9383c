package cli

import (
	"context"
	"crypto/ed25519"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/progressdb/progressdb/audit"
	"github.com/progressdb/progressdb/server/internal/app"
	"github.com/progressdb/progressdb/server/internal/backup"
	"github.com/progressdb/progressdb/server/pkg/attachments"
	"github.com/progressdb/progressdb/server/pkg/config"
)

// backupVerify checks a backup file (spec §10): exit 0 valid, 1 not,
// naming what failed.
func (e env) backupVerify(ctx context.Context, args []string) int {
	fs := flag.NewFlagSet("backup verify", flag.ContinueOnError)
	pubPath := fs.String("public-key", "", "ed25519 public key (PEM) the manifest must be signed with (default: the public half of PROGRESSDB_AUDIT_SIGNING_KEY, when set)")
	asJSON := fs.Bool("json", false, "print the report as JSON")
	if !e.parseFlags(fs, args, true) {
		return exitUsage
	}
	if fs.NArg() != 1 {
		fmt.Fprintln(e.stderr, "usage: progressdb backup verify FILE|- [--public-key F] [--json]")
		return exitUsage
	}
	pub, code := e.backupPublicKey("backup verify", *pubPath)
	if code != exitOK {
		return code
	}
	var rep backup.Report
	var err error
	if fs.Arg(0) == "-" {
		rep, err = backup.VerifyReader(ctx, stdinName, e.input(), pub, "")
	} else {
		rep, err = backup.Verify(ctx, fs.Arg(0), pub, "")
	}
	if err == nil {
		backup.CheckRemoteBlobs(ctx, &rep, e.configuredBlobs)
	}
	if err != nil {
		fmt.Fprintf(e.stderr, "progressdb backup verify: %v\n", err)
		if *asJSON {
			rep.Problems = append(rep.Problems, err.Error())
			writeJSON(e.stdout, rep)
		}
		return exitFailed
	}
	if *asJSON {
		writeJSON(e.stdout, rep)
	} else {
		printVerify(e.stdout, rep)
	}
	if !rep.Valid {
		return exitFailed
	}
	return exitOK
}

// configuredBlobs opens the attachments store the environment names
// for PROGRESSDB_DB_PATH, for backup.CheckRemoteBlobs.
func (e env) configuredBlobs(ctx context.Context) (*attachments.Blobs, error) {
	cfg, err := config.Load(e.environ)
	if err != nil {
		return nil, err
	}
	return app.OpenBlobs(ctx, cfg, cfg.DBPath)
}

// stdinName is how reports name an archive read from standard input
// (FILE "-").
const stdinName = "standard input"

// input is standard input, or an empty one when Main was given none.
func (e env) input() io.Reader {
	if e.stdin == nil {
		return strings.NewReader("")
	}
	return e.stdin
}

// backupPublicKey loads --public-key, or the public half of the
// configured signing key, or none.
func (e env) backupPublicKey(name, path string) (ed25519.PublicKey, int) {
	if path != "" {
		pub, err := audit.LoadPublicKey(path)
		if err != nil {
			fmt.Fprintf(e.stderr, "progressdb %s: --public-key: %v\n", name, err)
			return nil, exitUsage
		}
		return pub, exitOK
	}
	cfg, err := config.Load(e.environ)
	if err != nil {
		return nil, exitOK // only the key is wanted here; a bad environment is not this command's business
	}
	key, err := app.SigningKey(cfg)
	if err != nil {
		fmt.Fprintf(e.stderr, "progressdb: invalid configuration: %v\n", err)
		return nil, exitUsage
	}
	if key == nil {
		return nil, exitOK
	}
	return key.Public().(ed25519.PublicKey), exitOK
}

func printVerify(w io.Writer, rep backup.Report) {
	m := rep.Manifest
	verdict := "valid"
	if !rep.Valid {
		verdict = "NOT VALID"
	}
	fmt.Fprintf(w, "%s: %s\n", rep.File, verdict)
	if m.BackupID != "" {
		fmt.Fprintf(w, "backup_id:   %s (created %s)\n", m.BackupID, m.CreatedAt.Format("2006-01-02T15:04:05Z"))
		fmt.Fprintf(w, "contents:    %d threads, %d messages, %d files\n", m.Threads, m.Messages, len(m.Files))
		fmt.Fprintf(w, "audit_head:  %s\n", headName(m))
		fmt.Fprintf(w, "sealed:      %t\n", m.Sealed)
		if a := m.Attachments; a != nil {
			where := "in the archive"
			if a.Store != "file" {
				where = "named, in the " + a.Store + ":// store"
			}
			fmt.Fprintf(w, "attachments: %d blobs %s, %d missing when the backup was taken\n", a.Count-int64(len(a.Missing)), where, len(a.Missing))
		}
	}
	switch {
	case rep.SignatureChecked:
		fmt.Fprintln(w, "signature:   checked")
	case rep.Signed:
		fmt.Fprintln(w, "signature:   present, not checked (no --public-key)")
	default:
		fmt.Fprintln(w, "signature:   none")
	}
	for _, p := range rep.Problems {
		fmt.Fprintf(w, "problem:     %s\n", p)
	}
}
