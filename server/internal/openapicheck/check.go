// Package openapicheck checks exchanges with a progressdb server against
// its description, api/openapi.yaml, with an outside validator
// (kin-openapi's openapi3filter), so that the description and the server
// cannot drift. Tests use it on every answer they get: the API's own
// tests on an in-process server, the fault suite on the built binary.
package openapicheck

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strings"
	"sync"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"

	apispec "github.com/progressdb/progressdb/api"
	"github.com/progressdb/progressdb/server/internal/wire"
)

// File names the description in messages.
const File = "api/openapi.yaml"

// router is the loaded description's, shared by every check of a process.
var router = sync.OnceValues(func() (routers.Router, error) {
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromData(apispec.OpenAPI())
	if err != nil {
		return nil, fmt.Errorf("%s: load: %w", File, err)
	}
	if err := doc.Validate(loader.Context); err != nil {
		return nil, fmt.Errorf("%s is not a valid description: %w", File, err)
	}
	// Requests go to a test server's address, not the documented one.
	doc.Servers = nil
	if err := anyValue(doc); err != nil {
		return nil, err
	}
	return gorillamux.NewRouter(doc)
})

// everyType is what the empty schema allows: every JSON value.
var everyType = openapi3.Types{"null", "boolean", "object", "array", "number", "string"}

// anyValue spells every empty schema of doc (a message body's: any JSON,
// null included) as the list of every type. The validator's fallback for
// 3.1 schemas with references refuses null under an empty schema, which
// JSON Schema 2020-12 allows; the list means the same and it takes null.
func anyValue(doc *openapi3.T) error {
	return doc.WalkSchemas(func(_ string, ref *openapi3.SchemaRef) error {
		if ref.Value.IsEmpty() {
			ref.Value.Type = &everyType
		}
		return nil
	})
}

// Answer is what a server answered.
type Answer struct {
	Status int
	Header http.Header
	Body   []byte
}

// Check validates one exchange: req (whose body was reqBody) and its
// answer. It returns the operation ("METHOD /path" as described; "" when
// the request names none: an unknown path, a method the path lacks) and
// every way the exchange breaks the description:
//
//   - the answer's status is not listed for its operation, or its headers
//     or body do not match the schema listed for that status;
//   - a JSON answer is not I-JSON (spec §2: no number beyond ±(2^53−1),
//     no repeated name);
//   - the server accepted (2xx) a request the description refuses, or
//     answered one anything but 4xx;
//   - the server refused a body's shape (a field unknown or of the wrong
//     type) that the description allows.
func Check(req *http.Request, reqBody []byte, ans Answer) (op string, problems []string) {
	rt, err := router()
	if err != nil {
		return "", []string{err.Error()}
	}
	// The validator reads the body; the request that was sent has
	// already been consumed.
	vreq := req.Clone(context.Background())
	vreq.Body = io.NopCloser(bytes.NewReader(reqBody))
	route, params, err := rt.FindRoute(vreq)
	if err != nil {
		return "", nil // not an operation
	}
	if len(reqBody) > 0 {
		// The server reads every body as JSON whatever its type (the
		// description says so), except a file's (an attachment's
		// upload), which is bytes whatever its type.
		vreq.Header.Set("Content-Type", bodyType(route.Operation))
	}
	op = req.Method + " " + route.Path
	what := fmt.Sprintf("%s %s (operation %s) answered %d", req.Method, req.URL.RequestURI(), op, ans.Status)
	add := func(format string, args ...any) {
		problems = append(problems, what+fmt.Sprintf(format, args...))
	}

	in := &openapi3filter.RequestValidationInput{
		Request: vreq, PathParams: params, Route: route,
		Options: &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc, MultiError: true},
	}
	reqErr := openapi3filter.ValidateRequest(context.Background(), in)
	switch {
	case reqErr != nil && ans.Status/100 == 2:
		add(" to a request %s refuses: fix the handler or the description.\n  request body: %s\n  %v", File, Clip(reqBody), reqErr)
	case reqErr != nil && ans.Status/100 != 4:
		add(" to a request %s refuses, want a 4xx answer.\n  %v", File, reqErr)
	case reqErr == nil && ans.Status == http.StatusBadRequest && shapeRefused(ans.Body):
		add(" (%s) to a body %s allows: describe the rule in the request body's schema.\n  request body: %s",
			Clip(ans.Body), File, Clip(reqBody))
	}

	rin := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: in,
		Status:                 ans.Status,
		Header:                 ans.Header,
		Options:                &openapi3filter.Options{IncludeResponseStatus: true, MultiError: true},
	}
	rin.SetBodyBytes(ans.Body)
	if err := openapi3filter.ValidateResponse(context.Background(), rin); err != nil {
		add(", which %s does not describe: fix the handler or paths.%s.%s.responses.\n  answer: %s\n  %v",
			File, route.Path, strings.ToLower(req.Method), Clip(ans.Body), err)
	}
	if mt, _, _ := mime.ParseMediaType(ans.Header.Get("Content-Type")); mt == "application/json" {
		if err := wire.CheckIJSON(ans.Body); err != nil {
			add(" with an answer that is not I-JSON (spec §2): %v\n  answer: %s", err, Clip(ans.Body))
		}
	}
	return op, problems
}

// bodyType is the media type a request body of op is read as: JSON,
// unless op takes a body of another type only.
func bodyType(op *openapi3.Operation) string {
	if op == nil || op.RequestBody == nil || op.RequestBody.Value == nil {
		return "application/json"
	}
	c := op.RequestBody.Value.Content
	if c.Get("application/json") != nil || len(c) == 0 {
		return "application/json"
	}
	for mt := range c {
		return mt
	}
	return "application/json"
}

// shapeRefused reports whether an error answer refuses a body's shape: a
// field unknown or of the wrong type.
func shapeRefused(body []byte) bool {
	return bytes.Contains(body, []byte(`"invalid JSON: json: unknown field`)) ||
		bytes.Contains(body, []byte(`"invalid JSON: field `)) ||
		bytes.Contains(body, []byte(`"invalid JSON: the body must be an object`))
}

// Clip shortens a body for a message.
func Clip(b []byte) string {
	if len(b) > 600 {
		return string(b[:600]) + "…"
	}
	return string(b)
}
