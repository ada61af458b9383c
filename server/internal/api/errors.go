package api

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"

	"github.com/progressdb/progressdb/server/internal/retention"
	"github.com/progressdb/progressdb/server/pkg/store"
)

// httpError is an error the API itself raises, with the status it answers.
type httpError struct {
	status int
	msg    string
}

func (e *httpError) Error() string { return e.msg }

func badRequest(format string, args ...any) error {
	return &httpError{http.StatusBadRequest, fmt.Sprintf(format, args...)}
}

var (
	errRouteNotFound = &httpError{http.StatusNotFound, "no such route"}
	errBodyTooLarge  = &httpError{http.StatusRequestEntityTooLarge, "request body too large"}
	errMissingToken  = &httpError{http.StatusUnauthorized, "missing bearer token"}
	errWrongToken    = &httpError{http.StatusUnauthorized, "invalid bearer token"}
	errAdminDisabled = &httpError{http.StatusForbidden, "admin API disabled: set PROGRESSDB_ADMIN_TOKEN"}
	errNoRetention   = &httpError{http.StatusServiceUnavailable, "retention not configured"}
	// Pause must hold for every shard at once; a pause per shard would
	// leave some running.
	errPauseNotInCluster = &httpError{http.StatusServiceUnavailable, "retention pause is not cluster-wide in this version: it is refused on a cluster node"}
)

// threadNotFound and messageNotFound hide soft-deleted items, worded like
// the store's own not-found errors.
func threadNotFound(tid string) error { return fmt.Errorf("thread %s: %w", tid, store.ErrNotFound) }

func messageNotFound(tid, mid string) error {
	return fmt.Errorf("message %s in thread %s: %w", mid, tid, store.ErrNotFound)
}

// methodNotAllowed answers a known path asked with a method it does not serve.
func methodNotAllowed(allowed []string) handlerFunc {
	list := strings.Join(allowed, ", ")
	return func(w http.ResponseWriter, r *http.Request) error {
		w.Header().Set("Allow", list)
		return &httpError{http.StatusMethodNotAllowed, "method " + r.Method + " not allowed; use " + list}
	}
}

// runFailedError is a retention run that started and then failed; the
// response carries its result.
type runFailedError struct {
	err    error
	result retention.Result
}

func (e *runFailedError) Error() string { return e.err.Error() }
func (e *runFailedError) Unwrap() error { return e.err }

// errorBody is the JSON of every error response.
type errorBody struct {
	Error  string               `json:"error"`
	Holder *retention.LeaseInfo `json:"holder,omitempty"`
	Result *retention.Result    `json:"result,omitempty"`
	Paused bool                 `json:"paused,omitempty"` // a run refused because retention is paused
}

const internalErrorMsg = "internal error"

// fail writes err as the response. It is the one place that maps errors to
// statuses. Client errors carry their own text (it names the rule or the
// missing item); server errors answer a generic message and are logged with
// IDs only.
func (s *server) fail(w http.ResponseWriter, r *http.Request, err error) {
	status, body := classify(err)
	if s.cluster != nil {
		s.cluster.Failed(err)
	}
	if status == http.StatusInternalServerError {
		s.log.LogAttrs(r.Context(), slog.LevelError, "http_internal_error",
			append(requestAttrs(r), slog.Int("status", status), slog.Any("err", err))...)
	}
	if status == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Bearer realm="progressdb"`)
	}
	s.writeJSON(w, r, status, body)
}

func classify(err error) (int, errorBody) {
	var (
		he      *httpError
		held    *retention.LeaseHeldError
		runFail *runFailedError
	)
	if status, ok := statusOf(err); ok {
		return status, errorBody{Error: err.Error()}
	}
	switch {
	case errors.As(err, &he):
		return he.status, errorBody{Error: he.msg}
	case errors.As(err, &runFail):
		res := runFail.result
		return http.StatusInternalServerError, errorBody{Error: "retention run failed: " + runFail.err.Error(), Result: &res}

	case errors.Is(err, store.ErrNotFound):
		return http.StatusNotFound, errorBody{Error: err.Error()}
	case errors.Is(err, store.ErrInvalidID), errors.Is(err, store.ErrInvalidArgument):
		return http.StatusBadRequest, errorBody{Error: err.Error()}
	case errors.Is(err, store.ErrExists), errors.Is(err, store.ErrPurgeInProgress),
		errors.Is(err, store.ErrIDUnavailable):
		return http.StatusConflict, errorBody{Error: err.Error()}
	case errors.Is(err, store.ErrFenced):
		// A newer owner of the shard has written: this node is deposed.
		return http.StatusServiceUnavailable, errorBody{Error: err.Error()}
	case errors.Is(err, store.ErrMalformed):
		return http.StatusInternalServerError, errorBody{Error: internalErrorMsg}

	case errors.As(err, &held):
		holder := held.Holder
		return http.StatusConflict, errorBody{Error: err.Error(), Holder: &holder}
	case errors.Is(err, retention.ErrPaused):
		return http.StatusConflict, errorBody{Error: err.Error(), Paused: true}
	case errors.Is(err, retention.ErrLeaseHeld), errors.Is(err, retention.ErrDisabled):
		return http.StatusConflict, errorBody{Error: err.Error()}
	case errors.Is(err, retention.ErrClosed):
		return http.StatusServiceUnavailable, errorBody{Error: "server shutting down"}

	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return http.StatusServiceUnavailable, errorBody{Error: "request canceled"}
	default:
		return http.StatusInternalServerError, errorBody{Error: internalErrorMsg}
	}
}
