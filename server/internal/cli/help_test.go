package cli

import (
	"encoding/json"
	"flag"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"

	"github.com/progressdb/progressdb/internal/testbin"
	"github.com/progressdb/progressdb/server/internal/buildinfo"
)

func TestHelpListsEveryCommandAndTheEnvironment(t *testing.T) {
	h := newHarness(t)
	for _, args := range [][]string{{"--help"}, {"-h"}, {"help"}} {
		out := h.mustRun(args...)
		for _, c := range commands() {
			if !strings.Contains(out, "  "+c.name+" ") || !strings.Contains(out, c.summary) {
				t.Errorf("%v: command %q or its summary missing:\n%s", args, c.name, out)
			}
		}
		if !strings.Contains(out, "PROGRESSDB_") || !strings.Contains(out, "config check") {
			t.Errorf("%v: no pointer to the environment variables:\n%s", args, out)
		}
	}
}

// Every command's --help exits 0 on stdout, names the command and lists
// every flag it defines, without running it (serve would block; retention
// run would create a database).
func TestEveryCommandHelpExits0WithItsFlags(t *testing.T) {
	for _, c := range commands() {
		t.Run(c.name, func(t *testing.T) {
			h := newHarness(t)
			for _, helpArgs := range [][]string{{"--help"}, {"-h"}} {
				args := append(strings.Fields(c.name), helpArgs...)
				code, out, errOut := h.run(args...)
				if code != exitOK || errOut != "" {
					t.Fatalf("%v: exit %d, stderr %q", args, code, errOut)
				}
				if !strings.HasPrefix(out, "usage: progressdb "+c.name) || !strings.Contains(out, c.summary) {
					t.Fatalf("%v: output:\n%s", args, out)
				}
			}
			if _, err := os.Stat(h.dbPath); err == nil {
				t.Fatalf("%s --help created the database: it ran the command", c.name)
			}
			_, out, _ := h.run(append(strings.Fields(c.name), "--help")...)
			// help COMMAND says the same.
			code, out2, _ := h.run(append([]string{"help"}, strings.Fields(c.name)...)...)
			if code != exitOK || out2 != out {
				t.Fatalf("help %s: exit %d, output differs:\n%s", c.name, code, out2)
			}
		})
	}
}

func TestGroupsListTheirCommands(t *testing.T) {
	h := newHarness(t)
	code, out, _ := h.run("retention", "--help")
	if code != exitOK || !strings.Contains(out, "retention run") || !strings.Contains(out, "retention status") || strings.Contains(out, "audit verify") {
		t.Fatalf("retention --help: exit %d\n%s", code, out)
	}
	code, _, errOut := h.run("retention")
	if code != exitUsage || !strings.Contains(errOut, "retention run") {
		t.Fatalf("retention: exit %d, stderr %q", code, errOut)
	}
	code, _, errOut = h.run("retention", "frobnicate")
	if code != exitUsage || !strings.Contains(errOut, `unknown command "frobnicate"`) {
		t.Fatalf("retention frobnicate: exit %d, stderr %q", code, errOut)
	}
}

func TestBadFlagIsAUsageErrorPointingToHelp(t *testing.T) {
	h := newHarness(t)
	code, out, errOut := h.run("retention", "run", "--dry-rn")
	if code != exitUsage || out != "" || !strings.Contains(errOut, "dry-rn") || !strings.Contains(errOut, "progressdb retention run --help") {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	if code, _, errOut := h.run("retention", "status", "extra"); code != exitUsage || !strings.Contains(errOut, `unexpected argument "extra"`) {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
}

func TestParseFlagsTakesArgumentsAnywhere(t *testing.T) {
	for _, args := range [][]string{
		{"DIR", "--json", "--key", "K"},
		{"--json", "DIR", "--key", "K"},
		{"--key", "K", "DIR", "--json"},
		{"-json", "-key=K", "DIR"},
	} {
		e := env{stdout: new(strings.Builder), stderr: new(strings.Builder), helpShown: new(bool)}
		fs := flag.NewFlagSet("test", flag.ContinueOnError)
		asJSON := fs.Bool("json", false, "")
		key := fs.String("key", "", "")
		if !e.parseFlags(fs, args, true) {
			t.Fatalf("%v: refused: %s", args, e.stderr)
		}
		if !*asJSON || *key != "K" || fs.NArg() != 1 || fs.Arg(0) != "DIR" {
			t.Errorf("%v: json=%t key=%q args=%q", args, *asJSON, *key, fs.Args())
		}
	}
	// After --, a dash is an argument.
	e := env{stdout: new(strings.Builder), stderr: new(strings.Builder), helpShown: new(bool)}
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	asJSON := fs.Bool("json", false, "")
	if !e.parseFlags(fs, []string{"A", "--", "--json", "-x"}, true) || *asJSON || strings.Join(fs.Args(), " ") != "A --json -x" {
		t.Fatalf("json=%t args=%q", *asJSON, fs.Args())
	}
}

func TestVersion(t *testing.T) {
	h := newHarness(t)
	for _, args := range [][]string{{"version"}, {"--version"}} {
		out := h.mustRun(args...)
		if !strings.HasPrefix(out, "progressdb ") || !strings.Contains(out, "commit ") || !strings.Contains(out, runtime.Version()) {
			t.Errorf("%v:\n%s", args, out)
		}
	}
	var info buildinfo.Info
	if err := json.Unmarshal([]byte(h.mustRun("version", "--json")), &info); err != nil {
		t.Fatal(err)
	}
	if info.Version == "" || info.Commit == "" || info.Go != runtime.Version() {
		t.Fatalf("version --json: %+v", info)
	}
}

// A test binary records no dependencies, so the Pebble version and the
// stamps are checked on a built binary: the one the package's tests
// share, stamped with -ldflags as the Makefile stamps a release
// (testbin.LDFlags), rather than one more linked here.
func TestVersionOfABuiltBinary(t *testing.T) {
	t.Parallel()
	out, err := exec.Command(binary(t), "--version").Output()
	if err != nil {
		t.Fatal(err)
	}
	want := "progressdb " + testbin.Version + " (commit " + testbin.Commit + ")\ngo:     " + runtime.Version() + "\npebble: v2."
	if !strings.HasPrefix(string(out), want) {
		t.Fatalf("--version:\n%s\nwant prefix:\n%s", out, want)
	}
}

// The flags a command's help lists are exactly those it parses.
func TestHelpListsTheFlagsTheCommandParses(t *testing.T) {
	h := newHarness(t)
	_, out, _ := h.run("seed", "--help")
	for _, f := range []string{"--threads int", "--messages int", "--versions int", "--deleted float", "--deleted-age duration", "--legal-hold float", "--seed int"} {
		if !strings.Contains(out, f) {
			t.Errorf("seed --help lacks %q:\n%s", f, out)
		}
	}
}
