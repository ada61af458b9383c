package api

import (
	"net/http"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// For the tests of package api_test (cluster_test.go), which run cluster
// nodes through the router package, which imports this one.

// CheckAnswer checks one exchange against api/openapi.yaml (checkAnswer).
func CheckAnswer(t testing.TB, req *http.Request, reqBody []byte, status int, header http.Header, body []byte) {
	t.Helper()
	checkAnswer(t, nil, req, reqBody, response{status: status, header: header, body: body})
}

// CollectAnswered records the statuses a test server's registry counted,
// for the OpenAPI status check (openapi_test.go).
func CollectAnswered(t testing.TB, reg prometheus.Gatherer) { answered.collect(t, reg) }
