package cli

import (
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/progressdb/progressdb/server/internal/api"
	"github.com/progressdb/progressdb/server/internal/app"
	"github.com/progressdb/progressdb/server/internal/retention"
	"github.com/progressdb/progressdb/server/pkg/config"
	"github.com/progressdb/progressdb/server/pkg/store"
)

func TestRetentionPauseOnTheDatabase(t *testing.T) {
	h := newHarness(t)
	h.seedDue()

	var st retention.PauseState
	if err := json.Unmarshal([]byte(h.mustRun("retention", "pause", "--reason", "legal review", "--json")), &st); err != nil {
		t.Fatal(err)
	}
	if !st.Paused || st.Reason != "legal review" || st.PausedAt.IsZero() {
		t.Fatalf("pause %+v", st)
	}
	if out := h.mustRun("retention", "status"); !strings.Contains(out, "paused:          yes since") || !strings.Contains(out, "legal review") {
		t.Fatalf("status:\n%s", out)
	}
	code, _, errOut := h.run("retention", "run")
	if code != exitFailed || !strings.Contains(errOut, "retention is paused") {
		t.Fatalf("run while paused: exit %d, stderr %q", code, errOut)
	}
	var dry retention.Result
	if err := json.Unmarshal([]byte(h.mustRun("retention", "run", "--dry-run", "--json")), &dry); err != nil || dry.Eligible == 0 {
		t.Fatalf("dry run while paused: %+v %v", dry, err)
	}

	if out := h.mustRun("retention", "resume"); !strings.Contains(out, "paused:          no") {
		t.Fatalf("resume: %s", out)
	}
	var res retention.Result
	if err := json.Unmarshal([]byte(h.mustRun("retention", "run", "--json")), &res); err != nil || res.Purged != dry.Eligible {
		t.Fatalf("run after resume: %+v %v", res, err)
	}
	if code, _, _ := h.run("retention", "resume", "--reason", "x"); code != exitUsage {
		t.Fatalf("resume --reason: exit %d", code)
	}
}

func TestRetentionPauseThroughTheServer(t *testing.T) {
	h := newHarness(t, "PROGRESSDB_ADMIN_TOKEN=adm")
	cfg, err := config.Load(h.environ)
	if err != nil {
		t.Fatal(err)
	}
	// The "server" holds the database, so the command must ask it.
	st, err := store.Open(h.dbPath, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	reg := prometheus.NewRegistry()
	svc, err := app.NewRetention(withBlobs(t, cfg, st), cfg.Retention, nil, reg, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Close()
	handler, err := api.New(api.Options{Store: st, Retention: svc, AdminToken: "adm", Registry: reg})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(handler)
	defer srv.Close()
	h.environ = append(h.environ, "PROGRESSDB_ADDR="+strings.TrimPrefix(srv.URL, "http://"))

	h.mustRun("retention", "pause", "--reason", "from the shell")
	p, err := svc.Pause(t.Context())
	if err != nil || !p.Paused || p.Reason != "from the shell" {
		t.Fatalf("server's pause %+v %v", p, err)
	}
	if out := h.mustRun("retention", "status"); !strings.Contains(out, "from the shell") {
		t.Fatalf("status:\n%s", out)
	}
	h.mustRun("retention", "resume")
	if p, _ := svc.Pause(t.Context()); p.Paused {
		t.Fatal("resume did not reach the server")
	}

	// Policies go through the server too.
	if _, err := st.CreateThread(t.Context(), store.Thread{ID: "t1", Title: "x", Author: "y"}); err != nil {
		t.Fatal(err)
	}
	h.mustRun("retention", "policy", "set", "t1", "--max-messages", "5")
	if p, err := svc.ThreadPolicy(t.Context(), "t1"); err != nil || p.Effective.MaxMessages != 5 {
		t.Fatalf("server's policy %+v %v", p, err)
	}
	if out := h.mustRun("retention", "policy", "get", "t1"); !strings.Contains(out, "max messages:    5 (override)") {
		t.Fatalf("policy get:\n%s", out)
	}
	code, _, errOut := h.run("retention", "policy", "set", "t1", "--period", "1m")
	if code != exitFailed || !strings.Contains(errOut, "400") || !strings.Contains(errOut, "PROGRESSDB_RETENTION_MIN_PERIOD") {
		t.Fatalf("short period through the server: exit %d, stderr %q", code, errOut)
	}
	if out := h.mustRun("retention", "policy", "clear", "t1"); !strings.Contains(out, "max messages:    0 (inherited)") {
		t.Fatalf("policy clear:\n%s", out)
	}

	// Without the token the command says what is missing.
	h.environ = append(h.environ, "PROGRESSDB_ADMIN_TOKEN=")
	code, _, errOut = h.run("retention", "pause")
	if code != exitFailed || !strings.Contains(errOut, "PROGRESSDB_ADMIN_TOKEN") {
		t.Fatalf("no token: exit %d, stderr %q", code, errOut)
	}
}
