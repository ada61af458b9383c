package cli

import (
	"context"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestMainHelper runs Main in a child process: the completion script
// calls the binary for a command's flags.
func TestMainHelper(t *testing.T) {
	if os.Getenv("PROGRESSDB_CLI_MAIN") == "" {
		t.Skip("helper process")
	}
	os.Exit(Main(context.Background(), flag.Args(), nil, os.Stdout, os.Stderr))
}

// The bash completion completes commands from the table and flags from
// each command's --help.
func TestBashCompletion(t *testing.T) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("no bash")
	}
	h := newHarness(t)
	dir := t.TempDir()
	script := filepath.Join(dir, "completion.bash")
	if err := os.WriteFile(script, []byte(h.mustRun("completion", "bash")), 0o600); err != nil {
		t.Fatal(err)
	}
	// A stand-in for the binary that runs Main in this test binary.
	bin := filepath.Join(dir, "progressdb")
	wrapper := "#!/bin/sh\nPROGRESSDB_CLI_MAIN=1 exec '" + os.Args[0] + "' -test.run='^TestMainHelper$' -- \"$@\"\n"
	if err := os.WriteFile(bin, []byte(wrapper), 0o700); err != nil {
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
		{[]string{"retention", "run", "--"}, "--dry-run --json"},
		{[]string{"seed", "--th"}, "--threads"},
		{[]string{"audit", "verify", "some/dir", "--j"}, "--json"},
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
