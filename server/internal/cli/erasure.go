package cli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/progressdb/progressdb/audit"
	"github.com/progressdb/progressdb/server/internal/app"
	"github.com/progressdb/progressdb/server/internal/retention"
	"github.com/progressdb/progressdb/server/pkg/config"
	"github.com/progressdb/progressdb/server/pkg/store"
)

// maxReceiptBytes bounds the receipt `erasure verify` reads.
const maxReceiptBytes = 256 << 20

// errNoSealing: subject erasure destroys keys; a database opened without
// PROGRESSDB_KEK has none (the API answers 409 sealing_disabled).
var errNoSealing = errors.New("subject erasure needs sealing: set PROGRESSDB_KEK and PROGRESSDB_KEYSTORE_PATH")

// erasurePoll spaces the status reads of a command waiting for an
// erasure it ran on the database itself.
const erasurePoll = 10 * time.Millisecond

// erasureRequest asks for the erasure of an author (spec §12): the
// server starts its run at once and answers its ID.
func (e env) erasureRequest(ctx context.Context, args []string) int {
	const name = "erasure request"
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	asJSON := fs.Bool("json", false, "print the answer as JSON")
	server := serverFlag(fs)
	if !e.parseFlags(fs, args, true) {
		return exitUsage
	}
	if fs.NArg() != 1 || fs.Arg(0) == "" {
		fmt.Fprintln(e.stderr, "usage: progressdb erasure request AUTHOR [--json] [--server URL]")
		return exitUsage
	}
	var acc retention.ErasureAccepted
	var local *retention.ErasureStatus
	db, code := e.onErasures(ctx, name, *server, func(m *retention.Manager) error {
		// Run here, the erasure lives as long as the command: it waits.
		var err error
		if acc, err = m.Request(ctx, fs.Arg(0)); err != nil {
			return err
		}
		st, err := waitErasure(ctx, m, acc.ErasureID)
		local = &st
		return err
	}, func(c *adminClient) error {
		return c.do(ctx, http.MethodPost, "/admin/erasures", map[string]string{"author": fs.Arg(0)}, &acc)
	})
	if code != exitOK {
		return code
	}
	if local != nil {
		return e.printErasure(db, *local, *asJSON)
	}
	if *asJSON {
		writeJSON(e.stdout, struct {
			retention.ErasureAccepted
			Database database `json:"database"`
		}{acc, db})
		return exitOK
	}
	printDatabase(e.stdout, db)
	started := "started (run " + acc.RunID + ")"
	if acc.RunID == "" {
		started = "recorded: every shard's owner runs it" // a cluster (spec §11.1)
	}
	fmt.Fprintf(e.stdout, "erasure %s %s; follow it with: progressdb erasure status %s\n", acc.ErasureID, started, acc.ErasureID)
	return exitOK
}

// waitErasure waits for an erasure run in this process to end.
func waitErasure(ctx context.Context, m *retention.Manager, id string) (retention.ErasureStatus, error) {
	for {
		st, err := m.Erasure(ctx, id)
		if err != nil || st.Status == retention.ErasureCompleted || st.Status == retention.ErasureFailed {
			if err == nil && st.Status == retention.ErasureFailed {
				err = fmt.Errorf("erasure %s failed: %s", id, st.Error)
			}
			return st, err
		}
		select {
		case <-ctx.Done():
			return st, ctx.Err()
		case <-time.After(erasurePoll):
		}
	}
}

// erasureStatus prints an erasure's status.
func (e env) erasureStatus(ctx context.Context, args []string) int {
	const name = "erasure status"
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	asJSON := fs.Bool("json", false, "print the status as JSON")
	server := serverFlag(fs)
	if !e.parseFlags(fs, args, true) {
		return exitUsage
	}
	if fs.NArg() != 1 || fs.Arg(0) == "" {
		fmt.Fprintln(e.stderr, "usage: progressdb erasure status ID [--json] [--server URL]")
		return exitUsage
	}
	var st retention.ErasureStatus
	db, code := e.onErasures(ctx, name, *server, func(m *retention.Manager) error {
		var err error
		st, err = m.Erasure(ctx, fs.Arg(0))
		return err
	}, func(c *adminClient) error {
		return c.do(ctx, http.MethodGet, "/admin/erasures/"+url.PathEscape(fs.Arg(0)), nil, &st)
	})
	if code != exitOK {
		return code
	}
	return e.printErasure(db, st, *asJSON)
}

// printErasure prints an erasure's status and the database it is of.
func (e env) printErasure(db database, st retention.ErasureStatus, asJSON bool) int {
	if asJSON {
		writeJSON(e.stdout, struct {
			retention.ErasureStatus
			Database database `json:"database"`
		}{st, db})
		return exitOK
	}
	w := e.stdout
	printDatabase(w, db)
	fmt.Fprintf(w, "erasure:         %s\n", st.ErasureID)
	fmt.Fprintf(w, "status:          %s\n", st.Status)
	fmt.Fprintf(w, "subject:         %s\n", st.Subject)
	fmt.Fprintf(w, "requested_at:    %s\n", st.RequestedAt.Format(time.RFC3339Nano))
	if !st.CompletedAt.IsZero() {
		fmt.Fprintf(w, "completed_at:    %s\n", st.CompletedAt.Format(time.RFC3339Nano))
	}
	fmt.Fprintf(w, "keys_destroyed=%d versions_purged=%d messages_purged=%d\n", st.KeysDestroyed, st.VersionsPurged, st.MessagesPurged)
	fmt.Fprintf(w, "held_threads:    %s\n", listOrNone(st.HeldThreads))
	fmt.Fprintf(w, "runs:            %s\n", listOrNone(st.RunIDs))
	if st.Error != "" {
		fmt.Fprintf(w, "error:           %s\n", st.Error)
	}
	for _, sh := range st.Shards {
		fmt.Fprintf(w, "shard %-3d        %s keys_destroyed=%d messages_purged=%d held_threads=%s\n",
			sh.Shard, sh.Status, sh.KeysDestroyed, sh.MessagesPurged, listOrNone(sh.HeldThreads))
	}
	if st.Status == retention.ErasureCompleted && st.KeysDestroyed+st.VersionsPurged+st.MessagesPurged == 0 && len(st.HeldThreads) == 0 {
		fmt.Fprintln(w, "note:            nothing of this author was found: an author who never wrote here, or a name written otherwise (authors match exactly, case included)")
	}
	return exitOK
}

func listOrNone(s []string) string {
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, ", ")
}

// erasureReceipt writes a completed erasure's receipt (JSON) to --out or
// stdout.
func (e env) erasureReceipt(ctx context.Context, args []string) int {
	const name = "erasure receipt"
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	out := fs.String("out", "", "write the receipt to FILE (created, 0600) instead of stdout")
	server := serverFlag(fs)
	if !e.parseFlags(fs, args, true) {
		return exitUsage
	}
	if fs.NArg() != 1 || fs.Arg(0) == "" {
		fmt.Fprintln(e.stderr, "usage: progressdb erasure receipt ID [--out FILE] [--server URL]")
		return exitUsage
	}
	var rc audit.Receipt
	db, code := e.onErasures(ctx, name, *server, func(m *retention.Manager) error {
		var err error
		rc, err = m.Receipt(ctx, fs.Arg(0))
		return err
	}, func(c *adminClient) error {
		// Streamed: a receipt lists every item erased, and may be larger
		// than an admin answer is read whole.
		body, err := c.stream(ctx, http.MethodGet, "/admin/erasures/"+url.PathEscape(fs.Arg(0))+"/receipt")
		if err != nil {
			return err
		}
		defer body.Close()
		if err := json.NewDecoder(io.LimitReader(body, maxReceiptBytes)).Decode(&rc); err != nil {
			return fmt.Errorf("decode the server's receipt: %w", err)
		}
		return nil
	})
	if code != exitOK {
		return code
	}
	if *out == "" {
		writeJSON(e.stdout, rc)
		return exitOK
	}
	f, err := os.OpenFile(*out, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		fmt.Fprintf(e.stderr, "progressdb %s: --out: %v\n", name, err)
		return exitFailed
	}
	writeJSON(f, rc)
	if err := errors.Join(f.Sync(), f.Close()); err != nil {
		fmt.Fprintf(e.stderr, "progressdb %s: --out: %v\n", name, err)
		return exitFailed
	}
	printDatabase(e.stdout, db)
	fmt.Fprintf(e.stdout, "receipt of erasure %s written to %s (%s); check it with: progressdb erasure verify %s --public-key FILE\n",
		rc.ErasureID, *out, count(len(rc.Items), "item"), *out)
	return exitOK
}

// onErasures runs local on the database when no server holds it (the
// erasure then runs in this process, under the lease, with the audit
// signing key), and remote through the server that holds it otherwise
// (openTarget); it prints errors naming the command.
func (e env) onErasures(ctx context.Context, name, server string, local func(m *retention.Manager) error,
	remote func(c *adminClient) error) (database, int) {
	cfg, logger, sink, ok := e.configAndLogger()
	if !ok {
		return database{}, exitUsage
	}
	defer sink.Close()
	server, ok = e.serverOf(name, server, cfg)
	if !ok {
		return database{}, exitUsage
	}
	key, err := app.SigningKey(cfg)
	if err != nil {
		fmt.Fprintf(e.stderr, "progressdb: invalid configuration: %v\n", err)
		return database{}, exitUsage
	}
	return e.onDatabase(ctx, cfg, logger, name, server, func(st *store.Store) error {
		if st.KeySealer() == nil {
			return errNoSealing
		}
		return withRetention(ctx, st, cfg, logger, key, local)
	}, remote)
}

// receiptReport is what `erasure verify --json` prints.
type receiptReport struct {
	Receipt   string          `json:"receipt"`
	ErasureID string          `json:"erasure_id"`
	Items     int             `json:"items"`
	Files     int             `json:"files"`
	Verified  bool            `json:"verified"`
	Problems  []audit.Problem `json:"problems"`
}

// erasureVerify checks a receipt offline against the audit files alone
// (audit.VerifyReceipt). Exit 0 when it verifies, 1 when not, 2 for a
// receipt or key that cannot be read.
func (e env) erasureVerify(_ context.Context, args []string) int {
	const name = "erasure verify"
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	pubPath := fs.String("public-key", "", "ed25519 public key (PEM) of the audit signing key (required)")
	dir := fs.String("audit", "", "the audit folder (default PROGRESSDB_RETENTION_AUDIT_PATH)")
	asJSON := fs.Bool("json", false, "print the report as JSON")
	if !e.parseFlags(fs, args, true) {
		return exitUsage
	}
	if fs.NArg() != 1 || *pubPath == "" {
		fmt.Fprintln(e.stderr, "usage: progressdb erasure verify RECEIPT --public-key FILE [--audit DIR] [--json]")
		return exitUsage
	}
	from := "--audit"
	if *dir == "" {
		*dir, from = config.AuditPathOf(e.environ), config.VarAuditPath
	}
	// A folder that is not there is a typo or a volume not mounted: it
	// says nothing of the receipt.
	if fi, err := os.Stat(*dir); err != nil || !fi.IsDir() {
		fmt.Fprintf(e.stderr, "progressdb %s: no audit folder at %s (%s): the receipt is checked against the audit files it names there; give the folder the server wrote them in with --audit DIR\n",
			name, *dir, from)
		return exitUsage
	}
	pub, err := audit.LoadPublicKey(*pubPath)
	if err != nil {
		fmt.Fprintf(e.stderr, "progressdb %s: --public-key: %v\n", name, err)
		return exitUsage
	}
	rc, err := readReceipt(fs.Arg(0))
	if err != nil {
		fmt.Fprintf(e.stderr, "progressdb %s: %v\n", name, err)
		return exitUsage
	}
	rep := receiptReport{Receipt: fs.Arg(0), ErasureID: rc.ErasureID, Items: len(rc.Items), Files: len(rc.Audit),
		Problems: audit.VerifyReceipt(rc, *dir, pub)}
	rep.Verified = len(rep.Problems) == 0
	if rep.Problems == nil {
		rep.Problems = []audit.Problem{}
	}
	if *asJSON {
		writeJSON(e.stdout, rep)
	} else {
		for _, p := range rep.Problems {
			fmt.Fprintf(e.stdout, "FAIL %s:%d: %s\n", p.File, p.Line, p.Reason)
		}
		verdict := "verifies"
		if !rep.Verified {
			verdict = fmt.Sprintf("does NOT verify: %d problem(s)", len(rep.Problems))
		}
		fmt.Fprintf(e.stdout, "receipt of erasure %s (%s in %s under %s, signatures checked) %s\n",
			rc.ErasureID, count(rep.Items, "item"), count(rep.Files, "audit file"), *dir, verdict)
		if unsigned(rep.Problems) {
			fmt.Fprintf(e.stdout, "to verify later erasures, set %s on the server (docs/audit.md): runs and receipts are signed from then on\n",
				config.VarAuditSigningKey)
		}
	}
	if !rep.Verified {
		return exitFailed
	}
	return exitOK
}

// count is "1 item", "2 items".
func count(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// unsigned reports whether a receipt failed for files without signatures.
func unsigned(problems []audit.Problem) bool {
	for _, p := range problems {
		if strings.HasPrefix(p.Reason, "unsigned:") {
			return true
		}
	}
	return false
}

// readReceipt reads and decodes a receipt file; unknown fields are refused
// (a receipt is checked as written, not as a reader guesses it).
func readReceipt(path string) (audit.Receipt, error) {
	var rc audit.Receipt
	f, err := os.Open(path)
	if err != nil {
		return rc, err
	}
	defer f.Close()
	dec := json.NewDecoder(io.LimitReader(f, maxReceiptBytes))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&rc); err != nil {
		return rc, fmt.Errorf("%s: not a receipt: %w", path, err)
	}
	return rc, nil
}
