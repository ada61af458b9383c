package cli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	iofs "io/fs"
	"path/filepath"
	"time"

	"github.com/progressdb/progressdb/audit"
	"github.com/progressdb/progressdb/server/internal/retention"
)

// auditVerify checks every file under DIR (default: the configured audit
// path): each sealed audit file, the links between them, and anything else
// in the tree. Exit 0 when all verify and nothing else is there but the
// live run's in-progress file and the lease, 1 otherwise.
func (e env) auditVerify(_ context.Context, args []string) int {
	fs := flag.NewFlagSet("audit verify", flag.ContinueOnError)
	asJSON := fs.Bool("json", false, "print the report as JSON")
	pubPath := fs.String("public-key", "", "ed25519 public key (PEM): every footer must carry a valid signature")
	since := fs.String("since", "", "check from this run's file on (and its link to the file before) instead of the whole trail")
	exports := fs.String("exports", "", "export folder to check too (default: PROGRESSDB_RETENTION_EXPORT_PATH when DIR is not given)")
	if !e.parseFlags(fs, args, true) {
		return exitUsage
	}
	dir := fs.Arg(0)
	if fs.NArg() > 1 {
		fmt.Fprintln(e.stderr, "usage: progressdb audit verify [DIR] [--json] [--public-key FILE] [--exports DIR] [--since RUN_ID]")
		return exitUsage
	}
	leasePath := filepath.Join(dir, "retention.lock")
	if dir == "" {
		cfg, ok := e.loadConfig()
		if !ok {
			return exitUsage
		}
		dir, leasePath = cfg.Retention.AuditPath, cfg.Retention.LeasePath
		if *exports == "" {
			*exports = cfg.Retention.ExportPath
		}
	}
	opts := audit.VerifyOptions{
		Live:    retention.LiveRun(leasePath, time.Now()),
		Belongs: retention.LeaseFiles(leasePath),
		Since:   *since,
	}
	if *pubPath != "" {
		pub, err := audit.LoadPublicKey(*pubPath)
		if err != nil {
			fmt.Fprintf(e.stderr, "progressdb audit verify: --public-key: %v\n", err)
			return exitUsage
		}
		opts.PublicKey = pub
	}
	rep, err := audit.VerifyDirWith(dir, opts)
	if errors.Is(err, audit.ErrInvalidRunID) || errors.Is(err, audit.ErrRunNotFound) {
		fmt.Fprintf(e.stderr, "progressdb audit verify: --since: %v\n", err)
		return exitUsage
	}
	if err != nil {
		fmt.Fprintf(e.stderr, "progressdb audit verify: %v\n", err)
		return exitFailed
	}
	problems := len(rep.Problems)
	if *exports != "" {
		// Exports no footer names (an aborted run's) are checked here.
		xr, err := audit.VerifyExportDir(*exports, audit.LiveExportName(rep.Live))
		if err != nil && !errors.Is(err, iofs.ErrNotExist) {
			fmt.Fprintf(e.stderr, "progressdb audit verify: %v\n", err)
			return exitFailed
		}
		if err == nil {
			rep.Exports = &xr
			problems += len(xr.Problems)
		}
	}
	if *asJSON {
		enc := json.NewEncoder(e.stdout)
		enc.SetIndent("", "  ")
		_ = enc.Encode(rep)
	} else {
		printVerifyReport(e.stdout, rep, dir, opts.PublicKey != nil)
	}
	if problems > 0 {
		return exitFailed
	}
	return exitOK
}

// printVerifyReport prints rep for people: each problem, the live run, and
// the counts of the audit files in dir and of the export files.
func printVerifyReport(w io.Writer, rep audit.Report, dir string, signatures bool) {
	for _, p := range rep.Problems {
		fmt.Fprintf(w, "FAIL %s:%d: %s\n", p.File, p.Line, p.Reason)
	}
	if rep.Live != "" {
		fmt.Fprintf(w, "in progress (live run, not judged): %s\n", rep.Live)
	}
	signed := ""
	if signatures {
		signed = ", signatures checked"
	}
	from := ""
	if rep.Since != "" {
		from = " from " + rep.Since + " on"
	}
	fmt.Fprintf(w, "%d of %d sealed audit files verify in %s%s%s; %d problem(s)\n",
		rep.Verified, rep.Files, dir, from, signed, len(rep.Problems))
	if x := rep.Exports; x != nil {
		for _, p := range x.Problems {
			fmt.Fprintf(w, "FAIL %s:%d: %s\n", p.File, p.Line, p.Reason)
		}
		fmt.Fprintf(w, "%d of %d sealed export files decompress whole in %s; %d problem(s)\n",
			x.Verified, x.Files, x.Root, len(x.Problems))
	}
}
