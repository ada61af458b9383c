package faults

import (
	"bytes"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/progressdb/progressdb/server/internal/openapicheck"
)

// adminToken is the admin token of the servers the suite starts.
const adminToken = "fault-suite-admin-token-6c1d"

// server is a running `progressdb serve`.
type server struct {
	*proc
	url string // http://127.0.0.1:<port>, https:// for a cluster node
}

// startServer starts `progressdb serve` on a free loopback port and waits
// until it answers /healthz.
func startServer(t testing.TB, env envVars) *server {
	t.Helper()
	addr := freeAddr(t)
	s := &server{proc: start(t, env.with("PROGRESSDB_ADDR", addr), "serve"), url: "http://" + addr}
	waitFor(t, time.Minute, "the server to answer /healthz", func() bool {
		if s.exited() {
			t.Fatalf("server exited with status %d\n%s", s.code, s.output())
		}
		resp, err := httpClient.Get(s.url + "/healthz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	return s
}

// freeAddr returns a loopback address with a port nobody listens on.
func freeAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	defer ln.Close()
	return "127.0.0.1:" + strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
}

// call sends a request with an optional bearer token and returns the status
// and body. body is sent as is when it is []byte or string, as JSON
// otherwise (nil: no body). The answer is checked against api/openapi.yaml
// (openapicheck.Check): the built server answers as described.
func (s *server) call(t testing.TB, method, path string, body any, token string) (int, []byte) {
	t.Helper()
	var raw []byte
	switch b := body.(type) {
	case nil:
	case []byte:
		raw = b
	case string:
		raw = []byte(b)
	default:
		data, err := json.Marshal(b)
		if err != nil {
			t.Fatalf("encode request: %v", err)
		}
		raw = data
	}
	var r io.Reader
	if body != nil {
		r = bytes.NewReader(raw)
	}
	req, err := http.NewRequest(method, s.url+path, r)
	if err != nil {
		t.Fatalf("request %s %s: %v", method, path, err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := httpClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: read body: %v", method, path, err)
	}
	_, problems := openapicheck.Check(req, raw, openapicheck.Answer{Status: resp.StatusCode, Header: resp.Header, Body: data})
	for _, p := range problems {
		t.Error(p)
	}
	return resp.StatusCode, data
}

// mustCall is call that fails the test unless the status is want, and
// decodes the JSON answer into out (when not nil).
func (s *server) mustCall(t testing.TB, method, path string, body any, token string, want int, out any) {
	t.Helper()
	status, data := s.call(t, method, path, body, token)
	if status != want {
		t.Fatalf("%s %s: status %d, want %d: %s", method, path, status, want, data)
	}
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			t.Fatalf("%s %s: decode %s: %v", method, path, data, err)
		}
	}
}
