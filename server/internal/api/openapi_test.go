package api

import (
	"bytes"
	"flag"
	"fmt"
	"maps"
	"net/http"
	"os"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.yaml.in/yaml/v3"

	apispec "github.com/progressdb/progressdb/api"
	"github.com/progressdb/progressdb/server/internal/retention"
	"github.com/progressdb/progressdb/server/internal/wire"
)

// The description (api/openapi.yaml) and the server are held in step two
// ways:
//
//   - TestOpenAPIRoutes: every route the server registers is described,
//     and nothing else is;
//   - TestMain: every status code the description lists for an operation
//     was answered by that operation in some test of this package, and no
//     test saw an operation answer a status the description leaves out.
//
// The statuses come from the server's own request counter
// (progressdb_http_requests_total{method,route,code}), read from each
// test server's registry when newEnv cleans up, so every test that goes
// through newEnv counts without doing anything. The check needs the whole
// package: it is skipped when -run, -skip or -list narrows the tests, and
// when a test has failed (its failure says more).

const specFile = "api/openapi.yaml"

// answered collects (method, route, status) across the package's tests;
// package-level because TestMain reads it after every test has run.
var answered = &statusLog{seen: make(map[answer]bool)}

type answer struct {
	method, route, status string
}

type statusLog struct {
	mu   sync.Mutex
	seen map[answer]bool
}

// collect records what a test server's registry counted.
func (l *statusLog) collect(t testing.TB, reg prometheus.Gatherer) {
	mfs, err := reg.Gather()
	if err != nil {
		t.Errorf("gather metrics for the OpenAPI check: %v", err)
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, mf := range mfs {
		if mf.GetName() != "progressdb_http_requests_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			if m.GetCounter().GetValue() == 0 {
				continue
			}
			var a answer
			for _, lp := range m.GetLabel() {
				switch lp.GetName() {
				case "method":
					a.method = lp.GetValue()
				case "route":
					a.route = lp.GetValue()
				case "code":
					a.status = lp.GetValue()
				}
			}
			l.seen[a] = true
		}
	}
}

func TestMain(m *testing.M) {
	code := m.Run()
	if code == 0 && wholePackage() {
		if problems := checkStatuses(answered.seen); len(problems) > 0 {
			fmt.Fprintf(os.Stderr, "FAIL: %s and the tests of this package disagree:\n", specFile)
			for _, p := range problems {
				fmt.Fprintln(os.Stderr, "  - "+p)
			}
			code = 1
		}
	}
	os.Exit(code)
}

// wholePackage reports whether every test of the package ran.
func wholePackage() bool {
	for _, name := range []string{"test.run", "test.skip", "test.list"} {
		if f := flag.Lookup(name); f != nil && f.Value.String() != "" {
			return false
		}
	}
	return true
}

// checkStatuses compares the statuses the tests saw with the description.
func checkStatuses(seen map[answer]bool) []string {
	ops, err := loadOperations()
	if err != nil {
		return []string{err.Error()}
	}
	var problems []string
	for _, op := range ops {
		for _, status := range op.statuses {
			if !seen[answer{op.method, op.path, status}] {
				problems = append(problems, fmt.Sprintf(
					"%s lists %s for %s %s, but no test answered it: add a test in server/internal/api (through newEnv) that makes %s %s answer %s, or remove %q from paths.%s.%s.responses",
					specFile, status, op.method, op.path, op.method, op.path, status, status, op.path, strings.ToLower(op.method)))
			}
		}
	}
	for a := range seen {
		op, ok := ops[a.method+" "+a.route]
		if !ok {
			// 405 from a path's method-less fallback, HEAD, or an
			// unmatched path: not an operation.
			continue
		}
		if !slices.Contains(op.statuses, a.status) {
			problems = append(problems, fmt.Sprintf(
				"a test made %s %s answer %s, which %s does not list: add %q under paths.%s.%s.responses (or fix the handler if the status is wrong)",
				a.method, a.route, a.status, specFile, a.status, a.route, strings.ToLower(a.method)))
		}
	}
	sort.Strings(problems)
	return problems
}

type operation struct {
	method, path string
	statuses     []string // sorted
}

var httpMethods = []string{"get", "put", "post", "delete", "patch", "head", "options", "trace"}

// loadOperations parses the embedded description into its operations,
// keyed "METHOD /path".
func loadOperations() (map[string]operation, error) {
	var doc struct {
		OpenAPI string                          `yaml:"openapi"`
		Paths   map[string]map[string]yaml.Node `yaml:"paths"`
	}
	if err := yaml.Unmarshal(apispec.OpenAPI(), &doc); err != nil {
		return nil, fmt.Errorf("%s: %w", specFile, err)
	}
	if !strings.HasPrefix(doc.OpenAPI, "3.1.") {
		return nil, fmt.Errorf("%s: openapi is %q, want 3.1.x", specFile, doc.OpenAPI)
	}
	ops := make(map[string]operation)
	for path, item := range doc.Paths {
		for key, node := range item {
			if !slices.Contains(httpMethods, key) {
				continue // parameters, summary, ...
			}
			var o struct {
				Responses map[string]yaml.Node `yaml:"responses"`
			}
			if err := node.Decode(&o); err != nil {
				return nil, fmt.Errorf("%s: paths.%s.%s: %w", specFile, path, key, err)
			}
			op := operation{method: strings.ToUpper(key), path: path}
			for status := range o.Responses {
				op.statuses = append(op.statuses, status)
			}
			sort.Strings(op.statuses)
			ops[op.method+" "+path] = op
		}
	}
	return ops, nil
}

// TestOpenAPIRoutes checks that the description and the registered routes
// name the same operations.
func TestOpenAPIRoutes(t *testing.T) {
	ops, err := loadOperations()
	if err != nil {
		t.Fatal(err)
	}
	registered := make(map[string]bool)
	for _, rt := range (&server{}).routes() {
		key := rt.method + " " + rt.path
		registered[key] = true
		op, ok := ops[key]
		if !ok {
			t.Errorf("%s %s is registered but %s does not describe it: add paths.%s.%s with an operationId, its parameters and one entry under responses for each status it answers (each must be answered by a test in this package)",
				rt.method, rt.path, specFile, rt.path, strings.ToLower(rt.method))
			continue
		}
		if len(op.statuses) == 0 {
			t.Errorf("%s: %s %s lists no responses", specFile, rt.method, rt.path)
		}
		for _, s := range op.statuses {
			if n, err := strconv.Atoi(s); err != nil || n < 100 || n > 599 {
				t.Errorf("%s: %s %s: response %q is not a status code", specFile, rt.method, rt.path, s)
			}
		}
	}
	for key := range ops {
		if !registered[key] {
			t.Errorf("%s describes %s, which the server does not register (routes in server.go): remove it or register the route", specFile, key)
		}
	}
}

// TestOpenAPIDocument checks what a client generator relies on: every
// $ref resolves, operationIds are unique, and every {param} of a path is
// declared as a path parameter.
func TestOpenAPIDocument(t *testing.T) {
	doc := description(t)
	for _, field := range []string{"openapi", "info", "paths", "components"} {
		if doc[field] == nil {
			t.Errorf("%s: no %s", specFile, field)
		}
	}

	eachObject("", doc, func(where string, v map[string]any) {
		if ref, ok := v["$ref"].(string); ok {
			if _, err := resolve(doc, ref); err != nil {
				t.Errorf("%s: %s: %v", specFile, where, err)
			}
		}
	})

	ids := make(map[string]string)
	paths, _ := doc["paths"].(map[string]any)
	param := regexp.MustCompile(`\{([^}]+)\}`)
	for path, item := range paths {
		item, _ := item.(map[string]any)
		shared := pathParams(t, doc, item["parameters"])
		for _, m := range httpMethods {
			op, ok := item[m].(map[string]any)
			if !ok {
				continue
			}
			where := strings.ToUpper(m) + " " + path
			id, _ := op["operationId"].(string)
			if id == "" {
				t.Errorf("%s: %s has no operationId", specFile, where)
			} else if other, dup := ids[id]; dup {
				t.Errorf("%s: operationId %s is used by %s and %s", specFile, id, other, where)
			}
			ids[id] = where
			declared := pathParams(t, doc, op["parameters"])
			for _, p := range param.FindAllStringSubmatch(path, -1) {
				if !shared[p[1]] && !declared[p[1]] {
					t.Errorf("%s: %s does not declare path parameter %s", specFile, where, p[1])
				}
			}
		}
	}
}

// pathParams returns the names of the in: path parameters of a list.
func pathParams(t *testing.T, doc map[string]any, list any) map[string]bool {
	names := make(map[string]bool)
	items, _ := list.([]any)
	for _, p := range items {
		pm, _ := p.(map[string]any)
		if ref, ok := pm["$ref"].(string); ok {
			r, err := resolve(doc, ref)
			if err != nil {
				continue // reported by the $ref walk
			}
			pm, _ = r.(map[string]any)
		}
		if pm["in"] == "path" {
			if pm["required"] != true {
				t.Errorf("%s: path parameter %v must be required", specFile, pm["name"])
			}
			name, _ := pm["name"].(string)
			names[name] = true
		}
	}
	return names
}

// resolve follows a local JSON pointer ("#/components/schemas/Thread").
func resolve(doc map[string]any, ref string) (any, error) {
	rest, ok := strings.CutPrefix(ref, "#/")
	if !ok {
		return nil, fmt.Errorf("$ref %q is not local", ref)
	}
	var cur any = doc
	for _, part := range strings.Split(rest, "/") {
		part = strings.NewReplacer("~1", "/", "~0", "~").Replace(part)
		m, ok := cur.(map[string]any)
		if !ok || m[part] == nil {
			return nil, fmt.Errorf("$ref %q does not resolve", ref)
		}
		cur = m[part]
	}
	return cur, nil
}

func TestOpenAPIServed(t *testing.T) {
	e := newEnv(t, Options{APIKey: "k", AdminToken: "a"})
	r := e.expect(t, "GET", "/openapi.yaml", "", http.StatusOK) // open, like /healthz
	if ct := r.header.Get("Content-Type"); ct != "application/yaml" {
		t.Errorf("Content-Type %q, want application/yaml", ct)
	}
	if !bytes.Equal(r.body, apispec.OpenAPI()) {
		t.Errorf("served %d bytes that differ from the embedded description (%d bytes)", len(r.body), len(apispec.OpenAPI()))
	}
}

// TestEveryRouteIsGuarded sends every registered route without
// credentials: /v1 answers 401 when an API key is set, /admin 401 with a
// token set and 403 without one; the open routes answer.
func TestEveryRouteIsGuarded(t *testing.T) {
	locked := newEnv(t, Options{APIKey: "k", AdminToken: "a", Retention: &fakeRetention{}})
	noAdmin := newEnv(t, Options{Retention: &fakeRetention{}})
	ids := strings.NewReplacer("{tid}", "t1", "{mid}", "m1")
	for _, rt := range (&server{}).routes() {
		path := ids.Replace(rt.path)
		switch rt.access {
		case accessOpen:
			if r := locked.send(t, rt.method, path, "", ""); r.status != http.StatusOK {
				t.Errorf("%s %s without credentials: %d, want 200", rt.method, rt.path, r.status)
			}
		case accessAPI:
			if r := locked.send(t, rt.method, path, "", ""); r.status != http.StatusUnauthorized {
				t.Errorf("%s %s without the API key: %d, want 401", rt.method, rt.path, r.status)
			}
		case accessAdmin:
			if r := locked.send(t, rt.method, path, "", "Bearer k"); r.status != http.StatusUnauthorized {
				t.Errorf("%s %s with the API key instead of the admin token: %d, want 401", rt.method, rt.path, r.status)
			}
			if r := noAdmin.send(t, rt.method, path, "", "Bearer a"); r.status != http.StatusForbidden {
				t.Errorf("%s %s with no admin token configured: %d, want 403", rt.method, rt.path, r.status)
			}
		default:
			t.Errorf("%s %s: unknown access %d", rt.method, rt.path, rt.access)
		}
	}
}

// TestOpenAPISchemasMatchTheTypes compares each described schema with the
// Go type the server encodes: the same JSON fields, and a field listed as
// required exactly when the type always sends it (no omitempty).
func TestOpenAPISchemasMatchTheTypes(t *testing.T) {
	var doc struct {
		Components struct {
			Schemas map[string]struct {
				Required   []string             `yaml:"required"`
				Properties map[string]yaml.Node `yaml:"properties"`
			} `yaml:"schemas"`
		} `yaml:"components"`
	}
	if err := yaml.Unmarshal(apispec.OpenAPI(), &doc); err != nil {
		t.Fatalf("%s: %v", specFile, err)
	}
	for name, typ := range map[string]reflect.Type{
		"Thread":          reflect.TypeFor[wire.Thread](),
		"Message":         reflect.TypeFor[wire.Message](),
		"Error":           reflect.TypeFor[errorBody](),
		"LeaseInfo":       reflect.TypeFor[retention.LeaseInfo](),
		"RunResult":       reflect.TypeFor[retention.Result](),
		"RetentionStatus": reflect.TypeFor[retention.Status](),
		"PauseState":      reflect.TypeFor[retention.PauseState](),
		"Policy":          reflect.TypeFor[retention.Policy](),
		"PolicyOverride":  reflect.TypeFor[retention.PolicyOverride](),
		"ThreadPolicy":    reflect.TypeFor[retention.ThreadPolicy](),
		"ErasureStatus":   reflect.TypeFor[retention.ErasureStatus](),
		"ErasureAccepted": reflect.TypeFor[retention.ErasureAccepted](),
	} {
		schema, ok := doc.Components.Schemas[name]
		if !ok {
			t.Errorf("%s has no components.schemas.%s (the JSON of %s)", specFile, name, typ)
			continue
		}
		for _, f := range rawTimes(typ, typ.Name()) {
			t.Errorf("%s is a time.Time, which encodes in its own zone: make it a wire.Time, which every answer's times go through (spec §2)", f)
		}
		fields := jsonFields(typ)
		for field, always := range fields {
			if _, ok := schema.Properties[field]; !ok {
				t.Errorf("%s: components.schemas.%s lacks property %q, which %s sends: add it", specFile, name, field, typ)
			}
			if always != slices.Contains(schema.Required, field) {
				t.Errorf("%s: components.schemas.%s: %q must %sbe in required (%s %s)", specFile, name, field,
					map[bool]string{true: "", false: "not "}[always], typ,
					map[bool]string{true: "always sends it", false: "omits it when empty"}[always])
			}
		}
		for field := range schema.Properties {
			if _, ok := fields[field]; !ok {
				t.Errorf("%s: components.schemas.%s describes %q, which %s does not send: remove it", specFile, name, field, typ)
			}
		}
	}
}

// rawTimes lists the fields of t, nested ones included, that are a
// time.Time rather than a wire.Time.
func rawTimes(t reflect.Type, where string) []string {
	for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice || t.Kind() == reflect.Map {
		t = t.Elem()
	}
	if t == reflect.TypeFor[time.Time]() {
		return []string{where}
	}
	if t.Kind() != reflect.Struct || t == reflect.TypeFor[wire.Time]() {
		return nil
	}
	var out []string
	for i := range t.NumField() {
		f := t.Field(i)
		if f.IsExported() && f.Tag.Get("json") != "-" {
			out = append(out, rawTimes(f.Type, where+"."+f.Name)...)
		}
	}
	return out
}

// jsonFields lists the JSON object keys encoding/json writes for struct
// type t, each with whether it is always written (no omitempty).
// Embedded structs without a tag are flattened, as encoding/json does.
func jsonFields(t reflect.Type) map[string]bool {
	fields := map[string]bool{}
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		if f.Anonymous && name == "" && f.Type.Kind() == reflect.Struct {
			maps.Copy(fields, jsonFields(f.Type))
			continue
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		o := strings.Split(opts, ",")
		fields[name] = !slices.Contains(o, "omitempty") && !slices.Contains(o, "omitzero")
	}
	return fields
}

// TestOpenAPIIntegersAreBounded: every integer the description lists has a
// maximum of at most 2^53−1, the largest every JSON client reads exactly
// (spec §2), so that a client generated from it never expects more.
func TestOpenAPIIntegersAreBounded(t *testing.T) {
	eachObject("", description(t), func(where string, v map[string]any) {
		if isInteger(v["type"]) {
			max, ok := v["maximum"].(int)
			if !ok || max > wire.MaxInt {
				t.Errorf("%s: %s is an integer without a maximum of at most 9007199254740991 (2^53−1): use $ref: \"#/components/schemas/Count\" or set one", specFile, where)
			}
		}
	})
}

func isInteger(typ any) bool {
	switch typ := typ.(type) {
	case string:
		return typ == "integer"
	case []any:
		return slices.Contains(typ, any("integer"))
	}
	return false
}

// TestOpenAPITimesAreTimestamps: every property that names a time is a
// Timestamp (or OptionalTimestamp): an RFC 3339 UTC string (spec §2).
func TestOpenAPITimesAreTimestamps(t *testing.T) {
	isTime := func(k string) bool {
		switch k {
		case "ts", "time", "expires", "next_run", "cutoff":
			return true
		}
		return strings.HasSuffix(k, "_ts") || strings.HasSuffix(k, "_at")
	}
	eachObject("", description(t), func(where string, v map[string]any) {
		props, _ := v["properties"].(map[string]any)
		for k, p := range props {
			ref, _ := p.(map[string]any)["$ref"].(string)
			if isTime(k) && ref != "#/components/schemas/Timestamp" && ref != "#/components/schemas/OptionalTimestamp" {
				t.Errorf("%s: %s.properties.%s names a time: make it $ref: \"#/components/schemas/Timestamp\" (or OptionalTimestamp when it can be null)", specFile, where, k)
			}
		}
	})
}

// description parses the embedded description into plain YAML values.
func description(t *testing.T) map[string]any {
	t.Helper()
	var doc map[string]any
	if err := yaml.Unmarshal(apispec.OpenAPI(), &doc); err != nil {
		t.Fatalf("%s: %v", specFile, err)
	}
	return doc
}

// eachObject calls visit on v and every object (mapping) nested in it,
// with where the object's path in the description.
func eachObject(where string, v any, visit func(where string, obj map[string]any)) {
	switch v := v.(type) {
	case map[string]any:
		visit(where, v)
		for k, c := range v {
			eachObject(where+"."+k, c, visit)
		}
	case []any:
		for i, c := range v {
			eachObject(where+"["+strconv.Itoa(i)+"]", c, visit)
		}
	}
}
