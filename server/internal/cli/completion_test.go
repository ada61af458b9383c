package cli

import (
	"context"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/progressdb/progressdb/server/internal/testtools"
)

// TestMainHelper runs Main in a child process: the completion script
// calls the binary for a command's flags.
func TestMainHelper(t *testing.T) {
	if os.Getenv("PROGRESSDB_CLI_MAIN") == "" {
		t.Skip("helper process")
	}
	os.Exit(Main(context.Background(), flag.Args(), nil, os.Stdin, os.Stdout, os.Stderr))
}

// The bash completion completes commands from the table and flags from
// each command's --help.
func TestBashCompletion(t *testing.T) {
	t.Parallel()
	bash := testtools.Need(t, "bash", "Debian package bash")
	script, bin := completionScript(t, "bash")
	files := t.TempDir()
	if err := os.WriteFile(filepath.Join(files, "run.jsonl"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	complete := func(words ...string) string {
		t.Helper()
		cmd := exec.Command(bash, "-c", `source "$1"; shift; COMP_WORDS=("$@"); COMP_CWORD=$((${#COMP_WORDS[@]}-1)); _progressdb; echo "${COMPREPLY[*]}"`,
			"complete", script, bin)
		cmd.Args = append(cmd.Args, words...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%v: %v\n%s", words, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	for _, tt := range []struct {
		words []string
		want  string
	}{
		{[]string{"ret"}, "retention"},
		{[]string{"config", ""}, "check"},
		{[]string{"retention", "run", "--"}, "--dry-run --json --server"},
		{[]string{"seed", "--th"}, "--threads"},
		{[]string{"audit", "verify", "some/dir", "--j"}, "--json"},
		{[]string{"audit", "show", filepath.Join(files, "ru")}, filepath.Join(files, "run.jsonl")},
	} {
		if got := complete(tt.words...); got != tt.want {
			t.Errorf("%q: completed %q, want %q", tt.words, got, tt.want)
		}
	}
	// Every command's first words are offered, from the table.
	for _, words := range [][]string{{""}, {"retention", ""}} {
		got := " " + complete(words...) + " "
		for _, c := range commands() {
			w := strings.Fields(c.name)
			if len(w) > len(words)-1 && strings.Join(w[:len(words)-1], " ") == strings.Join(words[:len(words)-1], " ") &&
				!strings.Contains(got, " "+w[len(words)-1]+" ") {
				t.Errorf("%q: %q not offered in %q", words, w[len(words)-1], got)
			}
		}
	}
}

// completionScript writes `progressdb completion SHELL` to a file and a
// stand-in for the binary (named progressdb) that runs Main in this test
// binary, and returns both paths.
func completionScript(t *testing.T, shell string) (script, bin string) {
	t.Helper()
	h := newHarness(t)
	dir := t.TempDir()
	script = filepath.Join(dir, "completion."+shell)
	if err := os.WriteFile(script, []byte(h.mustRun("completion", shell)), 0o600); err != nil {
		t.Fatal(err)
	}
	bin = filepath.Join(dir, "progressdb")
	wrapper := "#!/bin/sh\nPROGRESSDB_CLI_MAIN=1 exec '" + os.Args[0] + "' -test.run='^TestMainHelper$' -- \"$@\"\n"
	if err := os.WriteFile(bin, []byte(wrapper), 0o700); err != nil {
		t.Fatal(err)
	}
	return script, bin
}

// wantOffered checks that every word the command table allows after the
// typed words (all but the last of words) is in got.
func wantOffered(t *testing.T, words []string, got []string) {
	t.Helper()
	typed := strings.Join(words[:len(words)-1], " ")
	for _, c := range commands() {
		w := strings.Fields(c.name)
		if len(w) > len(words)-1 && strings.Join(w[:len(words)-1], " ") == typed && !slices.Contains(got, w[len(words)-1]) {
			t.Errorf("%q: %q not offered in %q", words, w[len(words)-1], got)
		}
	}
}

// The zsh script registers itself with compinit and offers the table's
// words with their descriptions, flags from --help and file names after a
// whole command. zsh's completion builtins only run inside a completion
// widget, so _describe, compadd and _files print what they are given.
func TestZshCompletion(t *testing.T) {
	t.Parallel()
	zsh := testtools.Need(t, "zsh", "Debian package zsh; .ci/run installs it")
	script, bin := completionScript(t, "zsh")
	out, err := exec.Command(zsh, "-f", "-c", `autoload -U compinit && compinit -u -D && source "$1" && print -r -- $_comps[progressdb]`, "zsh", script).CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "_progressdb" {
		t.Fatalf("compinit then source: %v\n%s", err, out)
	}
	complete := func(words ...string) []string {
		t.Helper()
		cmd := exec.Command(zsh, "-f", "-c", `source "$1"; shift
_describe() { print -rl -- "${(@P)4}" }
compadd() { shift; print -rl -- "$@" }
_files() { print -r -- "<files>" }
words=("$@"); CURRENT=$#words
_progressdb`, "zsh", script, bin)
		cmd.Args = append(cmd.Args, words...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%v: %v\n%s", words, err, out)
		}
		return strings.Split(strings.TrimSpace(string(out)), "\n")
	}
	for _, tt := range []struct {
		words []string
		want  string
	}{
		{[]string{"config", ""}, "check:validate the environment and print the effective configuration, secrets redacted"},
		{[]string{"retention", "run", "--"}, "--dry-run --json --server"},
		{[]string{"audit", "verify", "some/dir", "--j"}, "--exports --json --public-key --since"},
		{[]string{"audit", "show", ""}, "<files>"},
		{[]string{"legal-hold", ""}, "set:put a thread under legal hold: retention purges nothing of it " +
			"clear:release a thread's legal hold list:every thread on legal hold, deleted or not"},
	} {
		if got := strings.Join(complete(tt.words...), " "); got != tt.want {
			t.Errorf("%q: completed %q, want %q", tt.words, got, tt.want)
		}
	}
	for _, words := range [][]string{{""}, {"retention", ""}, {"audit", ""}} {
		var got []string
		for _, c := range complete(words...) {
			w, _, _ := strings.Cut(c, ":")
			got = append(got, w)
		}
		wantOffered(t, words, got)
	}
}

// fish completes for real: complete -C prints what fish would offer.
func TestFishCompletion(t *testing.T) {
	t.Parallel()
	fish := testtools.Need(t, "fish", "Debian package fish; .ci/run installs it")
	script, bin := completionScript(t, "fish")
	complete := func(line string) []string {
		t.Helper()
		cmd := exec.Command(fish, "--no-config", "-c", `source $argv[1]; complete -C $argv[2]`, script, line)
		cmd.Env = append(os.Environ(), "PATH="+filepath.Dir(bin)+string(os.PathListSeparator)+os.Getenv("PATH"))
		cmd.Dir = t.TempDir()
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%q: %v\n%s", line, err, out)
		}
		return strings.Split(strings.TrimSpace(string(out)), "\n")
	}
	for _, tt := range []struct {
		line, want string
	}{
		{"progressdb ret", "retention\tretention commands"},
		{"progressdb config ", "check\tvalidate the environment and print the effective configuration, secrets redacted"},
		{"progressdb retention run --", "--dry-run --json --server"},
		{"progressdb seed --th", "--threads"},
		{"progressdb audit verify some/dir --j", "--json"},
		{"progressdb legal-hold cl", "clear\trelease a thread's legal hold"},
	} {
		if got := strings.Join(complete(tt.line), " "); got != tt.want {
			t.Errorf("%q: completed %q, want %q", tt.line, got, tt.want)
		}
	}
	// After a whole command, file names (fish's own completion).
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "run.jsonl"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if got := complete("progressdb audit show " + filepath.Join(dir, "ru")); len(got) != 1 || got[0] != filepath.Join(dir, "run.jsonl") {
		t.Errorf("file names after audit show: %q", got)
	}
	for _, words := range [][]string{{""}, {"retention", ""}, {"audit", ""}} {
		var got []string
		for _, c := range complete("progressdb " + strings.Join(words, " ")) {
			w, _, _ := strings.Cut(c, "\t")
			got = append(got, w)
		}
		wantOffered(t, words, got)
	}
}
