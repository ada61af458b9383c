package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/progressdb/progressdb/audit"
	"github.com/progressdb/progressdb/server/internal/retention"
	"github.com/progressdb/progressdb/server/pkg/config"
)

// auditShow prints one audit file for people: the run (header), one line
// per item, the footer, and whether the file verifies. Exit 0 when the file
// is sealed and verifies, 1 otherwise (a file still in progress included).
func (e env) auditShow(_ context.Context, args []string) int {
	fs := flag.NewFlagSet("audit show", flag.ContinueOnError)
	status := fs.String("status", "", "list only items with this status (purged, dry_run, failed, skipped, stamped)")
	if !e.parseFlags(fs, args, true) {
		return exitUsage
	}
	if fs.NArg() != 1 {
		fmt.Fprintln(e.stderr, "usage: progressdb audit show FILE [--status S]")
		return exitUsage
	}
	path := fs.Arg(0)
	r, err := audit.Open(path)
	if err != nil {
		fmt.Fprintf(e.stderr, "progressdb audit show: %v\n", err)
		return exitFailed
	}
	defer r.Close()

	w := e.stdout
	fmt.Fprintf(w, "file:       %s\n", path)
	footer, problems, err := printRecords(w, r, *status)
	if err != nil {
		fmt.Fprintf(e.stderr, "progressdb audit show: %v\n", err)
		return exitFailed
	}
	fmt.Fprintln(w)
	if footer == nil {
		fmt.Fprintln(w, "footer:     none: the run is still going, or was killed (the next run seals the file as aborted)")
	} else {
		printFooter(w, footer)
	}
	return printVerdict(w, path, problems)
}

// printRecords prints the header and the items (those with status when it
// is set) of r, and returns its footer and the problems found in its lines.
func printRecords(w io.Writer, r *audit.Reader, status string) (*audit.Footer, []error, error) {
	var (
		footer   *audit.Footer
		problems []error
		items    int
		shown    int
	)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for {
		rec, err := r.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		var p *audit.Problem
		if errors.As(err, &p) {
			problems = append(problems, err)
			continue
		}
		if err != nil {
			tw.Flush()
			return nil, nil, err
		}
		switch {
		case rec.Header != nil:
			printHeader(w, rec.RunID, rec.Header)
		case rec.Item != nil:
			items++
			if status != "" && rec.Item.Status != status {
				continue
			}
			if shown == 0 {
				fmt.Fprintln(w)
				fmt.Fprintln(tw, "LINE\tTYPE\tITEM\tTHREAD\tSTATUS\tCAUSE\tKEYS\tDELETED\tPURGED\tREASON")
			}
			shown++
			printItem(tw, rec.Line, rec.Item)
		case rec.Footer != nil:
			footer = rec.Footer
		}
	}
	tw.Flush()
	if shown == 0 {
		fmt.Fprintln(w)
		if status != "" {
			fmt.Fprintf(w, "items:      %d, none with status %s\n", items, status)
		} else {
			fmt.Fprintln(w, "items:      none")
		}
	} else if shown != items {
		fmt.Fprintf(w, "(%d of %d items shown)\n", shown, items)
	}
	return footer, problems, nil
}

// printVerdict prints the problems and whether the file at path verifies,
// and returns the command's exit status.
func printVerdict(w io.Writer, path string, problems []error) int {
	code := exitOK
	for _, p := range problems {
		fmt.Fprintf(w, "FAIL %v\n", p)
		code = exitFailed
	}
	switch {
	case strings.HasSuffix(path, ".inprogress"):
		fmt.Fprintln(w, "verifies:   not judged (file in progress); 'progressdb audit verify' checks the whole trail")
		code = exitFailed
	case len(problems) > 0:
	default:
		if err := audit.VerifyFile(path); err != nil {
			fmt.Fprintf(w, "FAIL %v\n", err)
			return exitFailed
		}
		fmt.Fprintln(w, "verifies:   yes (this file's chain and counts; 'progressdb audit verify' checks the links between files)")
	}
	return code
}

func printHeader(w io.Writer, runID string, h *audit.Header) {
	mode := "purge"
	switch {
	case h.DryRun:
		mode = "dry run (nothing deleted)"
	case audit.IsReplay(h):
		// Its items were purged before, by the runs it replays: it is
		// the restored database's run, never the original's.
		mode = "replay of purges recorded before, on a restored database"
	case h.Trigger == audit.TriggerFormat:
		mode = fmt.Sprintf("record of the database's format raised from %d to %d (nothing purged)", h.FormatFrom, h.FormatTo)
	}
	fmt.Fprintf(w, "run:        %s, %s\n", runID, mode)
	if h.Trigger != "" {
		fmt.Fprintf(w, "trigger:    %s\n", h.Trigger)
	}
	if h.DatabaseID != "" {
		db := h.DatabaseID
		if h.OriginID != "" {
			db += " (restored from database " + h.OriginID + ")"
		}
		fmt.Fprintf(w, "database:   %s\n", db)
	}
	if h.BackupID != "" {
		fmt.Fprintf(w, "backup:     %s\n", h.BackupID)
	}
	if h.AcceptBrokenAudit {
		fmt.Fprintln(w, "trail:      replayed over a trail that did not verify (--accept-broken-audit)")
	}
	fmt.Fprintf(w, "started:    %s by %s (host %s, pid %d, lease epoch %d, version %s)\n",
		fmtTime(h.StartedAt), h.Owner, h.Host, h.PID, h.Epoch, h.Version)
	fmt.Fprintf(w, "policy:     period %s, message period %s, max age %s, max messages %d, %d thread override(s)\n",
		h.Period, h.MessagePeriod, orNone(h.MaxAge), h.MaxMessages, h.PolicyOverrides)
	fmt.Fprintf(w, "cutoff:     %s (threads and messages deleted before it were due)\n", fmtTime(h.Cutoff))
	switch {
	case h.PrevFile == nil:
		fmt.Fprintln(w, "previous:   not recorded (a file from before the chain between files)")
	case *h.PrevFile == "":
		fmt.Fprintln(w, "previous:   none (the first file of the trail)")
	default:
		fmt.Fprintf(w, "previous:   footer sha256 %s\n", *h.PrevFile)
	}
}

func printItem(w io.Writer, line int, it *audit.Item) {
	purged := "-"
	if it.PurgedAt != nil {
		purged = fmtTime(*it.PurgedAt)
	}
	if it.Recovered {
		purged += " (recovered)"
	}
	fmt.Fprintf(w, "%d\t%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\n", line, it.ItemType, it.ItemID, it.ThreadID,
		it.Status, orNone(it.Cause), it.KeysDeleted, fmtTime(it.DeletedAt), purged, orNone(it.Reason))
}

func printFooter(w io.Writer, f *audit.Footer) {
	reason := ""
	if f.Reason != "" {
		reason = " (" + f.Reason + ")"
	}
	fmt.Fprintf(w, "status:     %s%s\n", f.Status, reason)
	fmt.Fprintf(w, "finished:   %s, after %s\n", fmtTime(f.FinishedAt), time.Duration(f.DurationMS)*time.Millisecond)
	fmt.Fprintf(w, "counts:     scanned %d, eligible %d, purged %d, failed %d, skipped %d, stamped %d, keys deleted %d\n",
		f.Scanned, f.Eligible, f.Purged, f.Failed, f.Skipped, f.Stamped, f.KeysDeleted)
	if f.Erased {
		fmt.Fprintf(w, "erased:     yes, in %s (purged content unrecoverable from the data directory)\n", time.Duration(f.EraseMS)*time.Millisecond)
	} else {
		fmt.Fprintln(w, "erased:     no")
	}
	if f.Exported != nil {
		fmt.Fprintf(w, "export:     %d record(s) in %s (sha256 %s)\n", *f.Exported, f.ExportFile, f.ExportSHA256)
	}
	if f.Signature != "" {
		fmt.Fprintln(w, "signed:     yes ('progressdb audit verify --public-key FILE' checks it)")
	} else {
		fmt.Fprintln(w, "signed:     no")
	}
}

func fmtTime(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339Nano)
}

func orNone(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// findRecord is one record `audit find` reports: where it is, the run
// that wrote it, whether its file verifies, and the item record itself.
type findRecord struct {
	audit.Match
	Verified bool `json:"verified"`
}

// findReport is `audit find --json`.
type findReport struct {
	ItemID string `json:"item_id"`
	Dir    string `json:"dir"`
	// Purged is true when a purge (not a dry run) is recorded; PurgedAt,
	// Cause and Proof then name it.
	Purged   bool         `json:"purged"`
	PurgedAt *time.Time   `json:"purged_at,omitempty"`
	Cause    string       `json:"cause,omitempty"`
	Proof    *findRecord  `json:"proof,omitempty"`
	Records  []findRecord `json:"records"`
	Problems []string     `json:"problems"` // of the files holding records, from audit verify
}

// auditFind answers an auditor's question about one thread or message:
// was it purged, when, why, and which file proves it. Every record of the
// item in the trail is listed, oldest run first. Exit 0 when a record was
// found and every file holding one verifies, 1 otherwise.
func (e env) auditFind(_ context.Context, args []string) int {
	fs := flag.NewFlagSet("audit find", flag.ContinueOnError)
	asJSON := fs.Bool("json", false, "print the report as JSON")
	if !e.parseFlags(fs, args, true) {
		return exitUsage
	}
	if fs.NArg() < 1 || fs.NArg() > 2 {
		fmt.Fprintln(e.stderr, "usage: progressdb audit find ID [DIR] [--json]")
		return exitUsage
	}
	id, dir := fs.Arg(0), fs.Arg(1)
	leasePath := filepath.Join(dir, "retention.lock")
	if dir == "" {
		cfg, ok := e.loadConfig()
		if !ok {
			return exitUsage
		}
		dir, leasePath = cfg.Retention.AuditPath, cfg.Retention.LeasePath
	}
	// A trail that is not there is not one without the item: a mistyped
	// path must not read as "never purged".
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		fmt.Fprintf(e.stderr, "progressdb audit find: no audit trail at %s (DIR, or %s by default): nothing was searched\n",
			dir, config.VarAuditPath)
		return exitFailed
	}
	matches, err := audit.Find(dir, id)
	if err != nil {
		fmt.Fprintf(e.stderr, "progressdb audit find: %v\n", err)
		return exitFailed
	}
	rep := findReport{ItemID: id, Dir: dir, Records: []findRecord{}, Problems: []string{}}
	if len(matches) > 0 {
		// The proof is only as good as the trail: verify it as audit
		// verify does, and judge each file holding a record.
		vr, err := audit.VerifyDirWith(dir, audit.VerifyOptions{
			Live:    retention.LiveRun(leasePath, time.Now()),
			Belongs: retention.LeaseFiles(leasePath),
		})
		if err != nil {
			fmt.Fprintf(e.stderr, "progressdb audit find: %v\n", err)
			return exitFailed
		}
		bad := map[string][]string{}
		for _, p := range vr.Problems {
			bad[p.File] = append(bad[p.File], p.Error())
		}
		seen := map[string]bool{}
		for _, m := range matches {
			r := findRecord{Match: m, Verified: !m.InProgress && len(bad[m.File]) == 0}
			rep.Records = append(rep.Records, r)
			if !seen[m.File] {
				seen[m.File] = true
				rep.Problems = append(rep.Problems, bad[m.File]...)
			}
			if m.Item.Status == audit.StatusPurged && !m.DryRun && rep.Proof == nil {
				rep.Purged, rep.PurgedAt, rep.Cause = true, m.Item.PurgedAt, m.Item.Cause
				proof := r
				rep.Proof = &proof
			}
		}
	}
	code := exitOK
	if len(rep.Records) == 0 || len(rep.Problems) > 0 {
		code = exitFailed
	}
	if *asJSON {
		writeJSON(e.stdout, rep)
		return code
	}
	printFind(e.stdout, rep)
	return code
}

func printFind(w io.Writer, rep findReport) {
	if len(rep.Records) == 0 {
		fmt.Fprintf(w, "no record of %s in the audit trail at %s\n", rep.ItemID, rep.Dir)
		return
	}
	if p := rep.Proof; p != nil {
		it := p.Item
		when := "-"
		if it.PurgedAt != nil {
			when = fmtTime(*it.PurgedAt)
		}
		fmt.Fprintf(w, "%s %s: purged at %s, cause %s, %d key(s) deleted\n", it.ItemType, it.ItemID, when, orNone(it.Cause), it.KeysDeleted)
		fmt.Fprintf(w, "proven by:  %s line %d (run %s started %s)\n", p.File, p.Line, p.RunID, fmtTime(p.RunStarted))
		if p.DatabaseID != "" {
			fmt.Fprintf(w, "database:   %s\n", p.DatabaseID)
		}
		if p.Verified {
			fmt.Fprintln(w, "verifies:   yes (the file and its links in the trail)")
		} else {
			fmt.Fprintln(w, "verifies:   NO (see the problems below)")
		}
	} else {
		last := rep.Records[len(rep.Records)-1]
		fmt.Fprintf(w, "%s %s: not purged; last recorded %s", last.Item.ItemType, rep.ItemID, last.Item.Status)
		if last.DryRun {
			fmt.Fprint(w, " (a dry run)")
		}
		if last.Item.Reason != "" {
			fmt.Fprintf(w, ", reason: %s", last.Item.Reason)
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintf(w, "\nrecords (%d):\n", len(rep.Records))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  WRITTEN\tRUN\tSTATUS\tCAUSE\tREASON\tFILE:LINE")
	for _, r := range rep.Records {
		status := r.Item.Status
		if r.Item.Recovered {
			status += " (recovered)"
		}
		run := r.RunID
		switch {
		case r.DryRun:
			run += " (dry run)"
		case r.InProgress:
			run += " (in progress)"
		case audit.IsReplayTrigger(r.Trigger):
			run += " (replay, trigger " + r.Trigger + ")"
		}
		if r.DatabaseID != "" {
			run += " db " + r.DatabaseID
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\t%s:%d\n", fmtTime(r.Written), run, status, orNone(r.Item.Cause), orNone(r.Item.Reason), r.File, r.Line)
	}
	tw.Flush()
	for _, p := range rep.Problems {
		fmt.Fprintf(w, "FAIL %s\n", p)
	}
}
