package api

import (
	"log/slog"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/progressdb/progressdb/server/internal/retention"
	"github.com/progressdb/progressdb/server/pkg/config"
)

// lateService forwards to a service built after the env's store opens.
type lateService struct{ retention.Service }

// retentionEnv serves the API over a real retention service on the env's store.
func retentionEnv(t *testing.T, enabled bool) *testEnv {
	t.Helper()
	return retentionEnvWith(t, enabled, Options{AdminToken: "adm"})
}

// retentionEnvWith is retentionEnv with opts (Retention is set here).
func retentionEnvWith(t *testing.T, enabled bool, opts Options) *testEnv {
	t.Helper()
	late := &lateService{}
	opts.Retention = late
	e := newEnv(t, opts)
	r, err := retention.NewRunner(retention.RunnerOptions{
		Store: e.store,
		Config: config.Retention{Enabled: enabled, Period: 30 * 24 * time.Hour, MinPeriod: time.Hour,
			MaxAge: 90 * 24 * time.Hour, AuditPath: filepath.Join(t.TempDir(), "audit")},
		Metrics: retention.NewMetrics(e.reg),
		Logger:  slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	svc, err := retention.NewService(retention.ServiceOptions{Runner: r})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(svc.Close)
	late.Service = svc
	e.bearer = "adm"
	return e
}

// metricLine fails unless the /metrics text has the line want.
func (e *testEnv) metricLine(t *testing.T, want string) {
	t.Helper()
	text := string(e.expect(t, "GET", "/metrics", "", http.StatusOK).body)
	for _, line := range strings.Split(text, "\n") {
		if line == want {
			return
		}
	}
	t.Fatalf("metrics lack %q", want)
}

func TestRetentionPause(t *testing.T) {
	e := retentionEnv(t, true)

	var st retention.PauseState
	e.expect(t, "PUT", "/admin/retention/pause", `{"paused":true,"reason":"incident 42"}`, http.StatusOK).decode(t, &st)
	if !st.Paused || st.Reason != "incident 42" || st.PausedAt.IsZero() {
		t.Fatalf("pause answer %+v", st)
	}
	var status struct {
		Paused       bool   `json:"paused"`
		PausedReason string `json:"paused_reason"`
		PausedAt     string `json:"paused_at"`
	}
	e.expect(t, "GET", "/admin/retention", "", http.StatusOK).decode(t, &status)
	if !status.Paused || status.PausedReason != "incident 42" || status.PausedAt == "" {
		t.Fatalf("status %+v", status)
	}
	e.metricLine(t, "progressdb_retention_paused 1")

	var refused struct {
		Error  string `json:"error"`
		Paused bool   `json:"paused"`
	}
	for _, q := range []string{"", "?wait=false"} {
		e.expect(t, "POST", "/admin/retention/run"+q, "", http.StatusConflict).decode(t, &refused)
		if !refused.Paused || refused.Error != "retention is paused" {
			t.Fatalf("refusal %+v", refused)
		}
	}
	e.metricLine(t, `progressdb_retention_runs_total{result="paused"} 2`)
	// Dry runs still work.
	var res retention.Result
	e.expect(t, "POST", "/admin/retention/run", `{"dry_run":true}`, http.StatusOK).decode(t, &res)
	if res.Status != "completed" || !res.DryRun {
		t.Fatalf("dry run %+v", res)
	}

	e.expect(t, "PUT", "/admin/retention/pause", `{"paused":false}`, http.StatusOK).decode(t, &st)
	if st.Paused || !st.PausedAt.IsZero() {
		t.Fatalf("resume answer %+v", st)
	}
	e.expect(t, "POST", "/admin/retention/run", "", http.StatusOK)

	for _, body := range []string{``, `{}`, `{"paused":"yes"}`, `{"paused":false,"reason":"x"}`, `{"paused":true,"why":"x"}`} {
		e.expect(t, "PUT", "/admin/retention/pause", body, http.StatusBadRequest)
	}
	e.expect(t, "GET", "/admin/retention/pause", "", http.StatusMethodNotAllowed)
	e.bearer = "wrong"
	e.expect(t, "PUT", "/admin/retention/pause", `{"paused":true}`, http.StatusUnauthorized)
}
