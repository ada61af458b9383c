// Package api holds the OpenAPI 3.1 description of progressdb's HTTP
// interface (openapi.yaml), embedded so that the server can serve it at
// GET /openapi.yaml and tests can check it against the routes.
package api

import (
	"bytes"
	_ "embed"
)

//go:embed openapi.yaml
var openAPI []byte

// OpenAPI returns the description as YAML (a copy: callers may keep it).
func OpenAPI() []byte { return bytes.Clone(openAPI) }
