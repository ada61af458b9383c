// Package cli is progressdb's command line: the server and the operator
// commands of spec §9.
//
// Flags use the standard library's flag package: `--name` and `-name`
// mean the same flag, there are no one-letter clusters, and flags may come
// before or after positional arguments (`--` ends the flags). Every
// command is one entry in commands(); its help comes from that entry and
// its FlagSet.
package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/progressdb/progressdb/server/internal/logging"
	"github.com/progressdb/progressdb/server/pkg/config"
	"github.com/progressdb/progressdb/server/pkg/suggest"
)

// Exit statuses.
const (
	exitOK        = 0
	exitFailed    = 1
	exitUsage     = 2 // also: invalid configuration
	exitLeaseHeld = 75
)

// command is one entry of the command line.
type command struct {
	name    string // the words after "progressdb", e.g. "retention run"
	args    string // positional arguments and key flags for the synopsis, e.g. "[DIR]"
	summary string // one line for the command list
	run     func(e env, ctx context.Context, args []string) int
}

// commands lists every command, in the order help shows them. Adding a
// command is adding an entry here (and documenting it in README.md).
func commands() []command {
	return []command{
		{"serve", "", "run the HTTP API, with the retention scheduler when enabled (the default)", env.serve},
		{"config check", "", "validate the environment and print the effective configuration, secrets redacted", env.configCheck},
		{"retention run", "[--dry-run] [--json]", "run retention once against PROGRESSDB_DB_PATH (through the running server when there is one) and print the summary", env.retentionRun},
		{"retention status", "[--json]", "lease holder, last run, next run (from the running server when there is one)", env.retentionStatus},
		{"retention pause", "[--reason R] [--json]", "pause retention (stored in the database; dry runs still work)",
			func(e env, ctx context.Context, args []string) int { return e.retentionPause(ctx, args, true) }},
		{"retention resume", "[--json]", "resume paused retention",
			func(e env, ctx context.Context, args []string) int { return e.retentionPause(ctx, args, false) }},
		{"retention policy get", "<thread-id> [--json]", "a thread's retention override and the policy in force for it", env.policyGet},
		{"retention policy set", "<thread-id> [--period D --message-period D --max-age D --max-messages N] [--json]",
			"replace a thread's retention override with the flags given", env.policySet},
		{"retention policy clear", "<thread-id> [--json]", "remove a thread's retention override", env.policyClear},
		{"thread get", "<thread-id> [--json]", "a thread, deleted or not, with its legal hold, retention override and the policy in force", env.threadGet},
		{"legal-hold set", "<thread-id> [--json]", "put a thread under legal hold: retention purges nothing of it",
			func(e env, ctx context.Context, args []string) int { return e.legalHoldSet(ctx, args, true) }},
		{"legal-hold clear", "<thread-id> [--json]", "release a thread's legal hold",
			func(e env, ctx context.Context, args []string) int { return e.legalHoldSet(ctx, args, false) }},
		{"legal-hold list", "[--json]", "every thread on legal hold, deleted or not", env.legalHoldList},
		{"audit verify", "[DIR] [--json] [--public-key FILE] [--exports DIR] [--since RUN_ID]", "check every audit file (chain, seq, footer, counts, name), the chain between files, signatures with a key, each export a footer names, every export file, and report any other file in the tree; --since RUN_ID checks from that run's file on and its link to the file before", env.auditVerify},
		{"audit show", "FILE [--status S]", "print one audit file for people: the run, its items, the footer, and whether the file verifies", env.auditShow},
		{"audit find", "ID [DIR] [--json]", "was this thread or message purged, when, why, and which audit file proves it: every record of it in the trail", env.auditFind},
		{"erasure request", "AUTHOR [--json] [--server URL]", "erase everything AUTHOR wrote (spec §12, sealing on): the server destroys their keys and purges their versions at once, and answers the erasure's ID", env.erasureRequest},
		{"erasure status", "ID [--json] [--server URL]", "an erasure's status: keys destroyed, versions and messages purged, threads held, runs", env.erasureStatus},
		{"erasure receipt", "ID [--out FILE] [--server URL]", "write a completed erasure's receipt (JSON): the subject as an HMAC, every item erased and the audit lines and signed footers that record them", env.erasureReceipt},
		{"erasure verify", "RECEIPT --public-key F [--audit DIR] [--json]", "check a receipt offline against nothing but the audit files: lines, hashes, chains, footer signatures, one line per item", env.erasureVerify},
		{"backup create", "[--out FILE|DIR|-] [--force] [--zstd=false] [--shard N] [--json]", "make an online backup (through the running server when there is one; on a cluster node, of shard N through the node holding it): a Pebble checkpoint and manifest.json in one tar file", env.backupCreate},
		{"backup list", "[--json]", "the backups in PROGRESSDB_BACKUP_PATH: age, expiry (PROGRESSDB_BACKUP_KEEP), size, and how many purged items each still holds", env.backupList},
		{"backup verify", "FILE|- [--public-key F] [--json]", "check a backup: every file's hash, the manifest and its signature, and the database opened on a temporary copy with the store's consistency check", env.backupVerify},
		{"restore", "FILE|- --db DIR [--audit DIR] [--accept-broken-audit] [--json] | --resume --db DIR", "restore a backup into an empty folder as a new database, then replay every purge the audit trail records after the backup (a restore never brings purged data back); --resume finishes one that did not", env.restore},
		{"keys generate-kek", "[--out FILE]", "make a fresh local key-encryption key (a base64key:// URL of 32 random bytes): written to FILE (0600, never overwritten) for PROGRESSDB_KEK_FILE, else printed alone on stdout", env.keysGenerateKEK},
		{"keys rotate-kek", "--to-file FILE|- | --to URL [--json]", "re-wrap every data key and secret of the key store with the new KEK (its URL read from FILE or standard input; --to for a KMS key URL only) and erase the old wrapped values from its files; run with the server stopped, then start it with the new KEK (the old one opens nothing after)", env.keysRotateKEK},
		{"keys status", "[--json] [--server URL]", "how many threads of the database are sealed and how many still plain (written before sealing was on; keys encrypt-existing seals them)", env.keysStatus},
		{"keys encrypt-existing", "[--json]", "seal what the database holds in plain (written before PROGRESSDB_KEK was set), under the retention lease, in batches, resumable, then erase the plaintext it replaced; run with the server stopped", env.keysEncryptExisting},
		{"export read", "FILE [--item ID]", "print the records of an export file as JSON lines (all, or one item's)", env.exportRead},
		{"cluster create", "--nodes ID,ID,... [--wait D] [--json]", "create the cluster in etcd once the nodes named have reported what they hold: fix its shard count (PROGRESSDB_CLUSTER_SHARDS), put each shard on the node holding it and spread the others over the nodes named", env.clusterCreate},
		{"cluster status", "[--json]", "the cluster as etcd has it: nodes (alive, URL, shards held) and shards (home, owner, epoch, state)", env.clusterStatus},
		{"cluster move-shard", "N --to NODE [--json]", "move shard N to node NODE through the node at PROGRESSDB_ADDR: fenced, backed up, restored with purge replay on NODE, handed over with a new epoch, the old copy deleted; a replicated shard's home replica is replaced by one on NODE (added as a learner, caught up, promoted, the old one removed)", env.clusterMoveShard},
		{"cluster set-replicas", "N [--json]", "change the replicas of every shard of a running replicated cluster to N (3 or 5) over the running nodes; each shard's leader adds or removes them one at a time", env.clusterSetReplicas},
		{"seed", "[--threads N --messages M ...]", "fill a database with realistic data, deletions back-dated, for demos", env.seed},
		{"version", "[--json]", "print version, commit, Go and Pebble versions", env.version},
		{"completion", "bash|zsh|fish", "print a shell completion script (bash, zsh or fish; see README)", env.completion},
	}
}

// env bundles what every command receives.
type env struct {
	environ []string
	// stdin is what `restore -` and `backup verify -` read.
	stdin          io.Reader
	stdout, stderr io.Writer
	// helpShown is set when a command printed its --help; Main then exits 0
	// whatever the command returned.
	helpShown *bool
}

// Main runs the command named by args and returns the exit status.
func Main(ctx context.Context, args, environ []string, stdin io.Reader, stdout, stderr io.Writer) int {
	e := env{environ: environ, stdin: stdin, stdout: stdout, stderr: stderr, helpShown: new(bool)}
	cmds := commands()
	if len(args) == 0 {
		return e.serve(ctx, nil)
	}
	switch args[0] {
	case "-h", "-help", "--help":
		e.topHelp(e.stdout, cmds)
		return exitOK
	case "help":
		code := e.help(ctx, cmds, args[1:])
		if *e.helpShown {
			return exitOK
		}
		return code
	case "-version", "--version":
		return e.version(ctx, args[1:])
	}
	c, rest, ok := lookup(cmds, args)
	if !ok {
		return e.noCommand(cmds, args)
	}
	code := c.run(e, ctx, rest)
	if *e.helpShown {
		return exitOK
	}
	return code
}

// lookup finds the command whose name is the longest run of leading words
// of args, and returns the remaining arguments.
func lookup(cmds []command, args []string) (command, []string, bool) {
	var best command
	n := 0
	for _, c := range cmds {
		words := strings.Fields(c.name)
		if len(words) > n && len(words) <= len(args) && equalWords(words, args[:len(words)]) {
			best, n = c, len(words)
		}
	}
	return best, args[n:], n > 0
}

func equalWords(a, b []string) bool {
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// noCommand answers words that name no command: a group (`retention`,
// `retention --help`) lists its commands; anything else is a usage error.
func (e env) noCommand(cmds []command, args []string) int {
	group := groupOf(cmds, args)
	if group == nil && strings.HasPrefix(args[0], "-") {
		fmt.Fprintf(e.stderr, "progressdb: unknown flag %s: flags follow a command\n", args[0])
		fmt.Fprintln(e.stderr, "usage: progressdb [COMMAND] [flags]; run 'progressdb --help' for the list of commands")
		return exitUsage
	}
	if group == nil {
		fmt.Fprintf(e.stderr, "progressdb: unknown command %q%s\n", strings.Join(args, " "), didYouMean(cmds, args[:1]))
		fmt.Fprintln(e.stderr, "usage: progressdb [COMMAND] [flags]; run 'progressdb --help' for the list of commands")
		return exitUsage
	}
	prefix := strings.Join(args[:len(args)-len(group.rest)], " ")
	if len(group.rest) > 0 && isHelpFlag(group.rest[0]) {
		e.listCommands(e.stdout, "usage: progressdb "+prefix+" COMMAND [flags]", group.cmds)
		return exitOK
	}
	if len(group.rest) > 0 {
		fmt.Fprintf(e.stderr, "progressdb %s: unknown command %q%s\n", prefix, group.rest[0],
			didYouMean(cmds, args[:len(args)-len(group.rest)+1]))
	}
	e.listCommands(e.stderr, "usage: progressdb "+prefix+" COMMAND [flags]", group.cmds)
	return exitUsage
}

type group struct {
	cmds []command
	rest []string
}

// groupOf returns the commands that start with the longest run of leading
// words of args, or nil when no command does.
func groupOf(cmds []command, args []string) *group {
	for n := len(args); n > 0; n-- {
		var g group
		for _, c := range cmds {
			words := strings.Fields(c.name)
			if len(words) > n && equalWords(words[:n], args[:n]) {
				g.cmds = append(g.cmds, c)
			}
		}
		if len(g.cmds) > 0 {
			g.rest = args[n:]
			return &g
		}
	}
	return nil
}

func isHelpFlag(s string) bool { return s == "-h" || s == "-help" || s == "--help" }

// helpEntry is `progressdb help`'s entry. Main answers it (it is about
// the other commands), so commands() does not list it.
func helpEntry() command {
	return command{name: "help", args: "[COMMAND]", summary: "this text, or a command's flags and arguments"}
}

// help answers `progressdb help [COMMAND...]`: the command list, a
// group's commands or a command's help; `help help` and `help --help`
// are its own help. A name that is no command is a usage error.
func (e env) help(ctx context.Context, cmds []command, args []string) int {
	fs := flag.NewFlagSet("help", flag.ContinueOnError)
	if !e.parseFlags(fs, args, true) {
		return exitUsage
	}
	words := fs.Args()
	if len(words) == 0 {
		e.topHelp(e.stdout, cmds)
		return exitOK
	}
	if len(words) == 1 && words[0] == "help" {
		e.commandHelp(e.stdout, fs)
		return exitOK
	}
	if c, rest, ok := lookup(cmds, words); ok && len(rest) == 0 {
		return c.run(e, ctx, []string{"--help"})
	}
	if g := groupOf(cmds, words); g != nil && len(g.rest) == 0 {
		e.listCommands(e.stdout, "usage: progressdb "+strings.Join(words, " ")+" COMMAND [flags]", g.cmds)
		return exitOK
	}
	fmt.Fprintf(e.stderr, "progressdb help: unknown command %q%s\n", strings.Join(words, " "), didYouMean(cmds, words))
	fmt.Fprintln(e.stderr, "Run 'progressdb help' for the list of commands.")
	return exitUsage
}

// didYouMean suggests the command or group that words most likely meant,
// as "; did you mean ...?", or "".
func didYouMean(cmds []command, words []string) string {
	typed := strings.Join(words, " ")
	var names []string
	for _, c := range append(cmds, helpEntry()) {
		w := strings.Fields(c.name)
		for n := 1; n <= len(w); n++ {
			if name := strings.Join(w[:n], " "); !slices.Contains(names, name) {
				names = append(names, name)
			}
		}
	}
	if s := suggest.Closest(typed, names, maxEdits(typed)); s != "" && s != typed {
		return fmt.Sprintf("; did you mean %q?", s)
	}
	// A command's last word without its group: `progressdb status`.
	if len(words) == 1 {
		for _, c := range cmds {
			w := strings.Fields(c.name)
			if len(w) > 1 && suggest.Distance(typed, w[len(w)-1]) <= maxEdits(typed) {
				return fmt.Sprintf("; did you mean %q?", c.name)
			}
		}
	}
	return ""
}

// maxEdits is how far a typo of word may be from what was meant: a third
// of it, from 1 to 3 edits.
func maxEdits(word string) int { return min(max(len(word)/3, 1), 3) }

func (e env) topHelp(w io.Writer, cmds []command) {
	fmt.Fprintln(w, "progressdb: chat storage on an embedded Pebble database, with retention that")
	fmt.Fprintln(w, "purges soft-deleted threads and messages and writes audit files proving it.")
	fmt.Fprintln(w)
	help := helpEntry()
	help.name += " " + help.args
	e.listCommands(w, "usage: progressdb [COMMAND] [flags]   (no command: serve)", append(cmds, help))
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Configuration comes from PROGRESSDB_* environment variables, listed with their")
	fmt.Fprintln(w, "defaults in README.md (Configuration); 'progressdb config check' validates them")
	fmt.Fprintln(w, "and prints the effective values. Commands that act on a database take")
	fmt.Fprintln(w, "--server URL (or PROGRESSDB_SERVER) to act through that server's admin API;")
	fmt.Fprintln(w, "without it they open PROGRESSDB_DB_PATH, or go through the server at")
	fmt.Fprintln(w, "PROGRESSDB_ADDR that holds it. Admin calls use PROGRESSDB_ADMIN_TOKEN.")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Run 'progressdb COMMAND --help' for a command's flags and arguments.")
	fmt.Fprintln(w, "Exit status: 0 ok, 1 failed, 2 usage error or invalid configuration,")
	fmt.Fprintln(w, "75 retention lease held elsewhere (run skipped).")
}

// listCommands prints a usage line and one line per command.
func (e env) listCommands(w io.Writer, usage string, cmds []command) {
	fmt.Fprintln(w, usage)
	fmt.Fprintln(w)
	fmt.Fprintln(w, "commands:")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, c := range cmds {
		fmt.Fprintf(tw, "  %s\t%s\n", c.name, c.summary)
	}
	tw.Flush()
}

// loadConfig reads the environment; on error it prints the one-line
// message and returns false (the caller exits 2).
func (e env) loadConfig() (config.Config, bool) {
	cfg, err := config.Load(e.environ)
	if err != nil {
		fmt.Fprintf(e.stderr, "progressdb: invalid configuration: %v\n", err)
		return cfg, false
	}
	return cfg, true
}

// configAndLogger reads the environment and builds the configured logger,
// whose sink the command closes when done. On error it prints the one-line
// message and returns false (the caller exits 2).
func (e env) configAndLogger() (config.Config, *slog.Logger, *logging.Sink, bool) {
	cfg, ok := e.loadConfig()
	if !ok {
		return cfg, nil, nil, false
	}
	l, c, err := e.logger(cfg, nil)
	if err != nil {
		fmt.Fprintf(e.stderr, "progressdb: invalid configuration: %v\n", err)
		return cfg, nil, nil, false
	}
	return cfg, l, c, true
}

// logger builds the configured logger; stderr, when not nil, replaces
// e.stderr as the stderr sink (a progress bar that clears its line
// around log lines). config.Load has checked the level, the format and
// the sink's syntax, so what can still fail is opening the sink's file,
// reported as a *config.Error.
func (e env) logger(cfg config.Config, stderr io.Writer) (*slog.Logger, *logging.Sink, error) {
	if stderr == nil {
		stderr = e.stderr
	}
	l, c, err := logging.New(logging.Options{Level: cfg.LogLevel, Format: cfg.LogFormat, Sink: cfg.LogSink, Stderr: stderr})
	if err != nil {
		return nil, nil, &config.Error{Var: config.VarLogSink, Value: cfg.LogSink, Rule: "must be stderr or a writable file:<path>: " + err.Error()}
	}
	return l, c, nil
}

// parseFlags parses a command's flags, printing errors to stderr;
// positional arguments are allowed only when allowArgs is set, and may
// stand before, between or after the flags. --help prints the command's
// help on stdout and returns false; Main then exits 0.
func (e env) parseFlags(fs *flag.FlagSet, args []string, allowArgs bool) bool {
	fs.SetOutput(io.Discard) // help and errors are printed below
	fs.Usage = func() {}
	var pos []string
	for {
		err := fs.Parse(args)
		if errors.Is(err, flag.ErrHelp) {
			e.commandHelp(e.stdout, fs)
			*e.helpShown = true
			return false
		}
		if err != nil {
			e.flagError(fs, err)
			return false
		}
		rest := fs.Args()
		if len(rest) == 0 {
			break
		}
		if consumed := len(args) - len(rest); consumed > 0 && args[consumed-1] == "--" {
			pos = append(pos, rest...) // after --, everything is an argument
			break
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
	if !allowArgs && len(pos) > 0 {
		fmt.Fprintf(e.stderr, "progressdb %s: unexpected argument %q\n", fs.Name(), pos[0])
		e.flagsHint(fs)
		return false
	}
	// Leave the positional arguments in fs.Args() for the command.
	_ = fs.Parse(append([]string{"--"}, pos...))
	return true
}

// flagError prints what fs.Parse refused, naming the command: an unknown
// flag with the command's closest flag, a value with the flag's rule;
// then where the command's flags are listed.
func (e env) flagError(fs *flag.FlagSet, err error) {
	msg := err.Error()
	if name, ok := strings.CutPrefix(msg, "flag provided but not defined: -"); ok {
		msg = "unknown flag --" + name
		var names []string
		fs.VisitAll(func(f *flag.Flag) { names = append(names, f.Name) })
		if s := suggest.Closest(name, names, maxEdits(name)); s != "" {
			msg += "; did you mean --" + s + "?"
		}
	} else {
		// The flag package names flags with one dash; help shows two.
		msg = strings.NewReplacer("for flag -", "for --", "for -", "for --", "argument: -", "argument: --").Replace(msg)
	}
	fmt.Fprintf(e.stderr, "progressdb %s: %s\n", fs.Name(), msg)
	e.flagsHint(fs)
}

func (e env) flagsHint(fs *flag.FlagSet) {
	fmt.Fprintf(e.stderr, "Run 'progressdb %s --help' for its flags and arguments.\n", fs.Name())
}

// commandHelp prints a command's synopsis, summary and flags, named by
// the FlagSet's name.
func (e env) commandHelp(w io.Writer, fs *flag.FlagSet) {
	c, _, ok := lookup(append(commands(), helpEntry()), strings.Fields(fs.Name()))
	fmt.Fprintf(w, "usage: progressdb %s", fs.Name())
	if ok && c.args != "" {
		fmt.Fprintf(w, " %s", c.args)
	}
	fmt.Fprintln(w)
	if ok {
		fmt.Fprintf(w, "\n%s\n", c.summary)
	}
	n := 0
	fs.VisitAll(func(*flag.Flag) { n++ })
	if n == 0 {
		fmt.Fprintln(w, "\nNo flags. Configuration comes from PROGRESSDB_* environment variables.")
		return
	}
	fmt.Fprintln(w, "\nflags:")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fs.VisitAll(func(f *flag.Flag) {
		name, usage := flag.UnquoteUsage(f)
		if t, ok := f.Value.(interface{ typeName() string }); ok {
			name = t.typeName()
		}
		arg := "--" + f.Name
		if name != "" {
			arg += " " + name
		}
		def := ""
		if f.DefValue != "" && f.DefValue != "false" && f.DefValue != "0" {
			def = fmt.Sprintf(" (default %s)", f.DefValue)
		}
		fmt.Fprintf(tw, "  %s\t%s%s\n", arg, usage, def)
	})
	tw.Flush()
}
