package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Usage errors of the built binary: help about help, unknown commands
// and flags named with a suggestion and where to look, and every bad flag
// value exit 2 whatever was wrong with it (before, `help help` and
// `help --help` failed, an unknown flag printed only the flag package's
// bare message, and `seed --threads -5` exited 1 where `abc` exited 2).
func TestUsageErrorsOfTheBinary(t *testing.T) {
	db := filepath.Join(t.TempDir(), "data")
	environ := []string{"PATH=" + os.Getenv("PATH"), "PROGRESSDB_DB_PATH=" + db, "PROGRESSDB_LOG_LEVEL=warn"}
	cases := []struct {
		args   []string
		code   int
		stdout []string // each must appear on stdout
		stderr []string // each must appear on stderr
	}{
		{[]string{"help", "help"}, 0, []string{"usage: progressdb help [COMMAND]"}, nil},
		{[]string{"help", "--help"}, 0, []string{"usage: progressdb help [COMMAND]"}, nil},
		{[]string{"help", "seed"}, 0, []string{"usage: progressdb seed", "--threads int"}, nil},
		{[]string{"help", "retention"}, 0, []string{"retention run", "retention status"}, nil},
		{[]string{"help", "nosuch"}, 2, nil, []string{`progressdb help: unknown command "nosuch"`, "Run 'progressdb help'"}},
		{[]string{"help", "retention", "stauts"}, 2, nil, []string{`unknown command "retention stauts"; did you mean "retention status"?`}},
		{[]string{"--bogus"}, 2, nil, []string{"progressdb: unknown flag --bogus: flags follow a command", "progressdb --help"}},
		{[]string{"stauts"}, 2, nil, []string{`unknown command "stauts"; did you mean "retention status"?`, "progressdb --help"}},
		{[]string{"retention", "stauts"}, 2, nil, []string{`unknown command "stauts"; did you mean "retention status"?`}},
		{[]string{"seed", "--thread", "5"}, 2, nil, []string{"progressdb seed: unknown flag --thread; did you mean --threads?", "progressdb seed --help"}},
		{[]string{"retention", "run", "--dry-rn"}, 2, nil, []string{"progressdb retention run: unknown flag --dry-rn; did you mean --dry-run?", "progressdb retention run --help"}},
		{[]string{"audit", "verify", "--public"}, 2, nil, []string{"did you mean --public-key?"}},
		{[]string{"seed", "--threads", "abc"}, 2, nil, []string{`progressdb seed: invalid value "abc" for --threads: must be a whole number`, "progressdb seed --help"}},
		{[]string{"seed", "--threads", "-5"}, 2, nil, []string{`progressdb seed: invalid value "-5" for --threads: must not be negative`, "progressdb seed --help"}},
		{[]string{"seed", "--messages", "-1"}, 2, nil, []string{"--messages: must not be negative"}},
		{[]string{"seed", "--deleted", "2"}, 2, nil, []string{"--deleted: must be from 0 to 1"}},
		{[]string{"seed", "--deleted-age", "-1h"}, 2, nil, []string{`invalid value "-1h" for --deleted-age`}},
		{[]string{"seed", "--threads"}, 2, nil, []string{"flag needs an argument: --threads"}},
		{[]string{"retention", "policy", "set", "t1", "--max-messages", "-1"}, 2, nil, []string{"--max-messages: must not be negative"}},
		{[]string{"retention", "policy", "set", "t1", "--period", "abc"}, 2, nil, []string{`invalid value "abc" for --period`}},
		{[]string{"retention", "policy", "set", "t1", "--max-age", "-1d"}, 2, nil, []string{`invalid value "-1d" for --max-age`}},
		{[]string{"retention", "status", "extra"}, 2, nil, []string{`unexpected argument "extra"`, "progressdb retention status --help"}},
	}
	for _, c := range cases {
		code, out, errOut := runBinary(t, environ, c.args...)
		ok := code == c.code
		for _, s := range c.stdout {
			ok = ok && strings.Contains(out, s)
		}
		for _, s := range c.stderr {
			ok = ok && strings.Contains(errOut, s)
		}
		if !ok {
			t.Errorf("progressdb %s: exit %d, want %d\nstdout: %s\nstderr: %s", strings.Join(c.args, " "), code, c.code, out, errOut)
		}
	}
	// Refused before doing anything: no database was created.
	if _, err := os.Stat(db); !os.IsNotExist(err) {
		t.Errorf("a usage error left %s (%v)", db, err)
	}
}
