package tsclient

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/progressdb/progressdb/internal/testbin"
	"github.com/progressdb/progressdb/internal/testpki"
	"github.com/progressdb/progressdb/server/internal/testtools"
)

// run runs name with args in dir, with PATH, HOME and env only, failing
// the test with its output when it fails or runs past five minutes (its
// process group is then killed: node and the servers it started); it
// returns its standard output.
func run(t *testing.T, dir string, env []string, name string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME"), "npm_config_update_notifier=false"}, env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 10 * time.Second
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s %s: %v (%v)\n%s\n%s", name, strings.Join(args, " "), err, ctx.Err(), out.String(), errb.String())
	}
	return out.String()
}

func TestMain(m *testing.M) { testbin.Main(m) }

// nodeVersion returns node's major and minor version.
func nodeVersion(t *testing.T) (major, minor int, text string) {
	t.Helper()
	out, err := exec.Command("node", "--version").Output()
	if err != nil {
		t.Fatal(err)
	}
	text = strings.TrimSpace(string(out))
	v := strings.Split(strings.TrimPrefix(text, "v"), ".")
	if len(v) >= 2 {
		major, _ = strconv.Atoi(v[0])
		minor, _ = strconv.Atoi(v[1])
	}
	return major, minor, text
}

// The TypeScript client's suite (clients/typescript/test) and
// examples/typescript against real servers started from the binary
// built here, with the certificates of its TLS test.
func TestTypeScriptClient(t *testing.T) {
	if testing.Short() {
		t.Skip("installs packages and builds the binary")
	}
	testtools.Need(t, "node", "Node.js 20.18 or later: Debian package nodejs")
	testtools.Need(t, "npm", "Debian package npm")
	// undici, which carries the TLS options, needs 20.18.1.
	if major, minor, text := nodeVersion(t); major < 20 || major == 20 && minor < 18 {
		testtools.Lack(t, "node "+text+" is older than 20.18", "NodeSource's nodejs 20, or Debian 13's")
	}
	root, err := filepath.Abs(filepath.Join("..", "..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(root, "clients", "typescript")

	// The packages of the committed lock, installed again only when it
	// changed since the last install.
	stamp, errStamp := os.Stat(filepath.Join(dir, "node_modules", ".package-lock.json"))
	lock, err := os.Stat(filepath.Join(dir, "package-lock.json"))
	if err != nil {
		t.Fatal(err)
	}
	if errStamp != nil || stamp.ModTime().Before(lock.ModTime()) {
		run(t, dir, nil, "npm", "ci", "--no-audit", "--no-fund")
	}
	run(t, dir, nil, "npm", "run", "--silent", "build")

	bin := testbin.Path(t, "progressdb")
	pki, err := testpki.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	// Every suite, as npm test runs them (test/run.mjs).
	files, err := filepath.Glob(filepath.Join(dir, "test", "*.test.mjs"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no test/*.test.mjs in %s: %v", dir, err)
	}
	// A test that hangs fails with its name after two minutes.
	out := run(t, dir, []string{"PROGRESSDB_BIN=" + bin, "PROGRESSDB_TEST_PKI=" + pki.Dir, "PROGRESSDB_EXAMPLES=" + filepath.Join(root, "examples", "typescript")},
		"node", append([]string{"--test", "--test-reporter=spec", "--test-timeout=120000"}, files...)...)
	t.Logf("node --test:\n%s", out)
	// Every test ran: none was skipped for a setting missing here.
	for _, want := range []string{"ℹ fail 0", "ℹ skipped 0", "ℹ pass 15"} {
		if !strings.Contains(out, want) {
			t.Fatalf("node --test output lacks %q:\n%s", want, out)
		}
	}
}
