package cli

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"

	"github.com/progressdb/progressdb/audit"
)

// auditVerify checks every sealed audit file under DIR (default: the
// configured audit path). Exit 0 when all verify, 1 otherwise.
func (e env) auditVerify(_ context.Context, args []string) int {
	fs := flag.NewFlagSet("audit verify", flag.ContinueOnError)
	asJSON := fs.Bool("json", false, "print the report as JSON")
	if !e.parseFlags(fs, args, true) {
		return exitUsage
	}
	dir := fs.Arg(0)
	if fs.NArg() > 1 {
		fmt.Fprintln(e.stderr, "usage: progressdb audit verify [DIR] [--json]")
		return exitUsage
	}
	if dir == "" {
		cfg, ok := e.loadConfig()
		if !ok {
			return exitUsage
		}
		dir = cfg.Retention.AuditPath
	}
	rep, err := audit.VerifyDir(dir)
	if err != nil {
		fmt.Fprintf(e.stderr, "progressdb audit verify: %v\n", err)
		return exitFailed
	}
	if *asJSON {
		enc := json.NewEncoder(e.stdout)
		enc.SetIndent("", "  ")
		_ = enc.Encode(rep)
	} else {
		for _, p := range rep.Problems {
			fmt.Fprintf(e.stdout, "FAIL %s:%d: %s\n", p.File, p.Line, p.Reason)
		}
		for _, f := range rep.Quarantined {
			fmt.Fprintf(e.stdout, "quarantined (could not be sealed, kept as is): %s\n", f)
		}
		for _, f := range rep.InProgress {
			fmt.Fprintf(e.stdout, "in progress (not judged): %s\n", f)
		}
		fmt.Fprintf(e.stdout, "%d of %d sealed audit files verify in %s\n", rep.Verified, rep.Files, dir)
	}
	if len(rep.Problems) > 0 {
		return exitFailed
	}
	return exitOK
}
