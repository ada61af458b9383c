package client_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// run runs cmd with env added to PATH only, failing the test with its
// output when it fails; it returns its standard output.
func run(t *testing.T, cmd *exec.Cmd, env ...string) string {
	t.Helper()
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME")}, env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s: %v\n%s\n%s", strings.Join(cmd.Args, " "), err, out.String(), errb.String())
	}
	return out.String()
}

// exampleOutput is what examples/go prints against a fresh server (the
// thread's ID and time vary); clients/typescript/test checks that
// examples/typescript prints the same.
var exampleOutput = regexp.MustCompile(`^thread (\S+) "Plans" created at (\S+)
message \S+-m1 is at version 2
  \S+-m0 v1 \S.*
  \S+-m1 v2 \S.*lunch at one\?.*
  \S+-m2 v1 \S.*
attached menu.txt \(11 bytes\): soup, bread
no-such-thread: not found, as expected
legal hold true; renaming it answers legal_hold
$`)

func checkExampleOutput(t *testing.T, out string) {
	t.Helper()
	m := exampleOutput.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("example printed:\n%s", out)
	}
	if _, err := time.Parse(time.RFC3339Nano, m[2]); err != nil {
		t.Fatalf("creation time %q: %v", m[2], err)
	}
}

// examples/go runs against a real server and prints what it says.
func TestGoExample(t *testing.T) {
	base := serve(t)
	bin := filepath.Join(t.TempDir(), "example")
	run(t, exec.Command("go", "build", "-o", bin, "github.com/progressdb/progressdb/examples/go"), "GOCACHE="+goEnv(t, "GOCACHE"), "GOPATH="+goEnv(t, "GOPATH"))
	out := run(t, exec.Command(bin), "PROGRESSDB_URL="+base, "PROGRESSDB_API_KEY="+apiKey, "PROGRESSDB_ADMIN_TOKEN="+adminToken)
	checkExampleOutput(t, out)
}

func goEnv(t *testing.T, name string) string {
	t.Helper()
	out, err := exec.Command("go", "env", name).Output()
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(out))
}
