package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"reflect"
	"strconv"
	"unicode/utf8"

	"github.com/progressdb/progressdb/server/internal/wire"
	"github.com/progressdb/progressdb/server/pkg/store"
)

// Limits of their own for titles and authors (bytes of UTF-8): they are
// repeated in every listing, so the body limit alone is far too loose.
const (
	maxTitleBytes  = 1024
	maxAuthorBytes = 256
)

// textField checks a required short text field against its limit.
func textField(name, v string, limit int) error {
	switch {
	case v == "":
		return badRequest(CodeInvalidField, "%s is required", name)
	case len(v) > limit:
		return badRequest(CodeInvalidField, "%s is %d bytes, more than the limit of %d", name, len(v), limit)
	}
	return nil
}

// decodeBody reads exactly one JSON value into dst: bodies that are not
// valid UTF-8, unknown fields, trailing values and bodies over the size
// limit are refused. An empty body is refused unless allowEmpty, in which
// case dst keeps its zero value.
func (s *server) decodeBody(w http.ResponseWriter, r *http.Request, dst any, allowEmpty bool) error {
	data, err := s.readBody(w, r)
	if err != nil {
		return err
	}
	return decodeJSON(data, dst, allowEmpty)
}

// readBody reads a request body within the size limit and refuses one
// that is not valid UTF-8.
func (s *server) readBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	data, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.maxBody))
	if err != nil {
		return nil, bodyError(err)
	}
	// Go's decoder would keep invalid bytes in a raw message body (and
	// silently replace them in strings); stored, they break every listing
	// of the thread for strict JSON clients.
	if !utf8.Valid(data) {
		return nil, badRequest(CodeInvalidJSON, "invalid JSON: request body is not valid UTF-8")
	}
	return data, nil
}

// decodeJSON decodes data, one JSON value, into dst as decodeBody does.
func decodeJSON(data []byte, dst any, allowEmpty bool) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(dst); err != nil {
		if errors.Is(err, io.EOF) {
			if allowEmpty {
				return nil
			}
			return badRequest(CodeInvalidJSON, "request body is required")
		}
		return bodyError(err)
	}
	switch _, err := dec.Token(); {
	case errors.Is(err, io.EOF):
		return nil
	case err == nil:
		return badRequest(CodeInvalidJSON, "request body must hold a single JSON value")
	default:
		return bodyError(err)
	}
}

// bodyError turns a decoding failure into a client error.
func bodyError(err error) error {
	var (
		tooLarge *http.MaxBytesError
		typeErr  *json.UnmarshalTypeError
	)
	switch {
	case errors.As(err, &tooLarge):
		return bodyTooLarge(tooLarge.Limit)
	case errors.As(err, &typeErr):
		if typeErr.Field == "" {
			return badRequest(CodeInvalidJSON, "invalid JSON: the body must be an object, not %s", typeErr.Value)
		}
		return badRequest(CodeInvalidJSON, "invalid JSON: field %q must be %s, not %s", typeErr.Field, kindName(typeErr.Type), typeErr.Value)
	case errors.Is(err, io.ErrUnexpectedEOF):
		return badRequest(CodeInvalidJSON, "invalid JSON: unexpected end of body")
	default:
		// Syntax errors and unknown fields; the text names the problem.
		return badRequest(CodeInvalidJSON, "invalid JSON: %v", err)
	}
}

// integerField reads a JSON integer field. Any number without a fraction
// is one, 5.0 and 5e2 included, as the description's JSON Schema counts
// integers. One beyond int's range comes back just beyond the bounds the
// field's rule checks (-1 or 2^53), so that the rule names it.
func integerField(name string, raw json.RawMessage) (int, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return 0, bodyError(err)
	}
	n, ok := v.(json.Number)
	if !ok {
		return 0, badRequest(CodeInvalidJSON, "invalid JSON: field %q must be an integer, not %s", name, raw)
	}
	if i, err := n.Int64(); err == nil {
		return int(i), nil
	}
	f, err := n.Float64()
	if (err != nil && !math.IsInf(f, 0)) || f != math.Trunc(f) {
		return 0, badRequest(CodeInvalidJSON, "invalid JSON: field %q must be an integer, not number %s", name, n)
	}
	return int(max(min(f, wire.MaxInt+1), -1)), nil
}

// kindName names a Go type the way a JSON client thinks of it.
func kindName(t reflect.Type) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Struct, reflect.Map:
		return "an object"
	case reflect.Slice, reflect.Array:
		return "an array"
	case reflect.Bool:
		return "a boolean"
	case reflect.String:
		return "a string"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer"
	default:
		return "a number"
	}
}

// pathID returns a validated ID from the path. The store's error names the
// rule an ID must follow.
func pathID(r *http.Request, name, what string) (string, error) {
	id := r.PathValue(name)
	if err := store.ValidateID(id); err != nil {
		return "", fmt.Errorf("%s: %w", what, err)
	}
	return id, nil
}

// bodyID validates an optional client-chosen ID ("" lets the store pick).
func bodyID(id, what string) error {
	if id == "" {
		return nil
	}
	if err := store.ValidateID(id); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}

// boolParam reads a boolean query parameter; absent or empty means def.
func boolParam(r *http.Request, name string, def bool) (bool, error) {
	v := r.URL.Query().Get(name)
	if v == "" {
		return def, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, badRequest(CodeInvalidParameter, "%s must be true or false", name)
	}
	return b, nil
}

// listOptions reads ?limit=, ?cursor= and ?include_deleted=.
func listOptions(r *http.Request) (store.ListOptions, error) {
	var o store.ListOptions
	q := r.URL.Query()
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		// Digits only: Atoi also takes a sign, which the description's
		// integer does not.
		if err != nil || v[0] == '+' || n < 1 || n > store.MaxListLimit {
			return o, badRequest(CodeInvalidParameter, "limit must be an integer from 1 to %d", store.MaxListLimit)
		}
		o.Limit = n
	}
	o.Cursor = q.Get("cursor")
	inc, err := boolParam(r, "include_deleted", false)
	if err != nil {
		return o, err
	}
	o.IncludeDeleted = inc
	return o, nil
}
