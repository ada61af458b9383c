package cli

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestConfigCheckWarnsAboutUnknownVariables(t *testing.T) {
	h := newHarness(t, "PROGRESSDB_RETENTION_PERIODE=7d", "PROGRESSDB_LOG_LEVEL=DEBUG")
	code, out, errOut := h.run("config", "check")
	if code != exitOK {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	want := "warning: PROGRESSDB_RETENTION_PERIODE is not a progressdb setting and is ignored; did you mean PROGRESSDB_RETENTION_PERIOD?"
	if !strings.Contains(errOut, want) {
		t.Fatalf("stderr %q, want %q", errOut, want)
	}
	// The typo left the default in force, and the level was taken in
	// upper case.
	if !strings.Contains(out, "PROGRESSDB_RETENTION_PERIOD=30d\n") || !strings.Contains(out, "PROGRESSDB_LOG_LEVEL=debug\n") {
		t.Fatalf("stdout:\n%s", out)
	}
}

func TestConfigCheckRefusesZeroIntervals(t *testing.T) {
	for _, tt := range []struct {
		env, names string
	}{
		{"PROGRESSDB_RETENTION_CRON=@every 0s", "PROGRESSDB_RETENTION_CRON"},
		{"PROGRESSDB_RETENTION_MIN_PERIOD=0", "PROGRESSDB_RETENTION_ALLOW_SHORT_PERIOD"},
	} {
		h := newHarness(t, tt.env)
		code, _, errOut := h.run("config", "check")
		if code != exitUsage || !strings.Contains(errOut, tt.names) {
			t.Errorf("%s: exit %d, stderr %q", tt.env, code, errOut)
		}
	}
	h := newHarness(t, "PROGRESSDB_RETENTION_MIN_PERIOD=0", "PROGRESSDB_RETENTION_ALLOW_SHORT_PERIOD=true")
	h.mustRun("config", "check")
}

// config check creates nothing: not the database folder, not the audit
// folder, not the log file; serve would, and check says whether it could.
func TestConfigCheckCreatesNothing(t *testing.T) {
	root := t.TempDir()
	h := newHarness(t,
		"PROGRESSDB_DB_PATH="+filepath.Join(root, "srv", "data"),
		"PROGRESSDB_LOG_SINK=file:"+filepath.Join(root, "logs", "progressdb.log"),
	)
	h.mustRun("config", "check")
	if entries, err := os.ReadDir(root); err != nil || len(entries) != 0 {
		t.Fatalf("config check left %v (%v) in an empty folder", entries, err)
	}

	// A path serve could not create is refused, naming the variable.
	notDir := filepath.Join(root, "file")
	if err := os.WriteFile(notDir, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, env := range []string{
		"PROGRESSDB_DB_PATH=" + filepath.Join(notDir, "data"),
		"PROGRESSDB_RETENTION_AUDIT_PATH=" + notDir,
		"PROGRESSDB_LOG_SINK=file:" + filepath.Join(notDir, "x.log"),
	} {
		h := newHarness(t, env)
		name, _, _ := strings.Cut(env, "=")
		code, _, errOut := h.run("config", "check")
		if code != exitUsage || !strings.HasPrefix(errOut, "progressdb: invalid configuration: "+name) {
			t.Errorf("%s: exit %d, stderr %q", env, code, errOut)
		}
	}
}

// serve logs unknown variables once at startup and runs all the same.
func TestServeWarnsAboutUnknownVariables(t *testing.T) {
	h := newHarness(t, "PROGRESSDB_ADRR=127.0.0.1:9")
	logs := startServerLogs(t, h.environ)
	if !strings.Contains(logs(), `"msg":"config_unknown_variable","var":"PROGRESSDB_ADRR","did_you_mean":"PROGRESSDB_ADDR"`) {
		t.Fatalf("logs:\n%s", logs())
	}
}

// A cluster node's settings are checked like every other: a missing or bad
// one stops with exit 2 and one line naming the variable; a single node
// (no PROGRESSDB_CLUSTER_ETCD) is not asked for any.
func TestConfigCheckClusterSettings(t *testing.T) {
	node := []string{"PROGRESSDB_CLUSTER_ETCD=http://127.0.0.1:2379", "PROGRESSDB_NODE_ID=node-1",
		"PROGRESSDB_ADVERTISE_URL=http://127.0.0.1:8080", "PROGRESSDB_CLUSTER_SECRET=0123456789abcdef"}
	for _, tt := range []struct{ env, names string }{
		{"PROGRESSDB_NODE_ID=", "PROGRESSDB_NODE_ID"},
		{"PROGRESSDB_ADVERTISE_URL=", "PROGRESSDB_ADVERTISE_URL"},
		{"PROGRESSDB_CLUSTER_SECRET=", "PROGRESSDB_CLUSTER_SECRET"},
		{"PROGRESSDB_CLUSTER_SHARDS=0", "PROGRESSDB_CLUSTER_SHARDS"},
		{"PROGRESSDB_CLUSTER_LEASE_TTL=1s", "PROGRESSDB_CLUSTER_LEASE_TTL"},
	} {
		h := newHarness(t, append(append([]string{}, node...), tt.env)...)
		code, _, errOut := h.run("config", "check")
		lines := strings.Split(strings.TrimSpace(errOut), "\n")
		if code != exitUsage || len(lines) != 1 || !strings.Contains(errOut, tt.names) {
			t.Errorf("%s: exit %d, stderr %q", tt.env, code, errOut)
		}
	}
	h := newHarness(t, node...)
	if out := h.mustRun("config", "check"); !strings.Contains(out, "PROGRESSDB_CLUSTER_SECRET=<redacted>\n") {
		t.Fatalf("stdout:\n%s", out)
	}
	newHarness(t, "PROGRESSDB_NODE_ID=").mustRun("config", "check")
}

// A node whose etcd does not answer stops (exit 1, naming etcd) instead of
// waiting for it, and writes nothing before it has read the shard map.
func TestServeStopsWithoutEtcd(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := "http://" + ln.Addr().String()
	ln.Close() // nothing listens there now
	h := newHarness(t, "PROGRESSDB_CLUSTER_ETCD="+dead, "PROGRESSDB_NODE_ID=node-1",
		"PROGRESSDB_ADVERTISE_URL=http://127.0.0.1:8080", "PROGRESSDB_CLUSTER_SECRET=0123456789abcdef",
		"PROGRESSDB_DB_PATH="+filepath.Join(root, "data"), "PROGRESSDB_ADDR=127.0.0.1:0")
	code, _, errOut := h.run("serve")
	if code != exitFailed || !strings.Contains(errOut, "etcd at "+dead+" did not answer") {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	if entries, _ := os.ReadDir(root); len(entries) != 0 {
		t.Fatalf("serve left %v behind", entries)
	}
}
