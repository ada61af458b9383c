package api

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/progressdb/progressdb/server/pkg/store"
)

func TestHTTPMetrics(t *testing.T) {
	e := newEnv(t, Options{})
	e.createThread(t, "t1")
	e.expect(t, "GET", "/v1/threads/t1", "", http.StatusOK)
	e.expect(t, "GET", "/v1/threads/raw-path-id", "", http.StatusNotFound)
	e.expect(t, "GET", "/no/such/route", "", http.StatusNotFound)
	e.expect(t, "BREW", "/v1/threads", "", http.StatusMethodNotAllowed)

	text := string(e.expect(t, "GET", "/metrics", "", http.StatusOK).body)
	for _, want := range []string{
		`progressdb_http_requests_total{code="201",method="POST",route="/v1/threads"} 1`,
		`progressdb_http_requests_total{code="200",method="GET",route="/v1/threads/{tid}"} 1`,
		`progressdb_http_requests_total{code="404",method="GET",route="/v1/threads/{tid}"} 1`,
		`progressdb_http_requests_total{code="404",method="GET",route="/"} 1`,
		`progressdb_http_requests_total{code="405",method="other",route="/v1/threads"} 1`,
		`progressdb_http_request_duration_seconds_count{method="GET",route="/v1/threads/{tid}"} 2`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	for _, leak := range []string{"raw-path-id", "/no/such/route", "BREW"} {
		if strings.Contains(text, leak) {
			t.Errorf("metrics carry the raw request value %q", leak)
		}
	}
}

func TestNewRefusesDuplicateMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	if _, err := newHTTPMetrics(reg); err != nil {
		t.Fatal(err)
	}
	if _, err := newHTTPMetrics(reg); err == nil {
		t.Fatal("registering the HTTP metrics twice on one registry succeeded")
	}
}

func TestPanicBecomes500(t *testing.T) {
	var logs syncBuffer
	reg := prometheus.NewRegistry()
	m, err := newHTTPMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	s := &server{log: slog.New(slog.NewJSONHandler(&logs, nil)), metrics: m, ids: store.NewIDSource()}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /boom/{tid}", func(http.ResponseWriter, *http.Request) { panic("handler bug") })
	mux.HandleFunc("GET /half", func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte("partial"))
		if err := http.NewResponseController(w).Flush(); err != nil {
			t.Errorf("flush through the recorder: %v", err)
		}
		panic("late bug")
	})
	srv := httptest.NewServer(s.instrument(mux))
	defer srv.Close()

	res, err := srv.Client().Get(srv.URL + "/boom/t1")
	if err != nil {
		t.Fatal(err)
	}
	r := response{status: res.StatusCode, header: res.Header}
	r.body = readAll(t, res)
	if r.status != http.StatusInternalServerError || r.errorText(t) != "internal error" {
		t.Fatalf("status %d body %s", r.status, r.body)
	}
	if got := counterValue(t, reg, "progressdb_http_requests_total", map[string]string{"method": "GET", "route": "/boom/{tid}", "code": "500"}); got != 1 {
		t.Errorf("500 counted %v times", got)
	}
	// A panic after part of the response went out breaks the connection
	// instead of passing the truncated body off as complete.
	res, err = srv.Client().Get(srv.URL + "/half")
	if err == nil {
		_, err = io.ReadAll(res.Body)
		res.Body.Close()
	}
	if err == nil {
		t.Error("truncated response read without error")
	}

	out := logs.String()
	if !strings.Contains(out, `"msg":"http_panic"`) || !strings.Contains(out, "handler bug") || !strings.Contains(out, `"tid":"t1"`) {
		t.Errorf("panic not logged with its route and IDs: %s", out)
	}
}

// counterValue reads one counter from the registry (0 when absent).
func counterValue(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
	metrics:
		for _, m := range f.GetMetric() {
			if len(m.GetLabel()) != len(labels) {
				continue
			}
			for _, l := range m.GetLabel() {
				if labels[l.GetName()] != l.GetValue() {
					continue metrics
				}
			}
			return m.GetCounter().GetValue()
		}
	}
	return 0
}
