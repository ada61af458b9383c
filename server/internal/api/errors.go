package api

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"

	"github.com/progressdb/progressdb/server/internal/retention"
	"github.com/progressdb/progressdb/server/pkg/attachments"
	"github.com/progressdb/progressdb/server/pkg/store"
)

// httpError is an error the API itself raises, with the status and code
// it answers.
type httpError struct {
	status int
	code   Code
	msg    string
}

func (e *httpError) Error() string { return e.msg }

func badRequest(code Code, format string, args ...any) error {
	return &httpError{http.StatusBadRequest, code, fmt.Sprintf(format, args...)}
}

// bodyTooLarge names the limit a body went over (spec §7).
func bodyTooLarge(limit int64) error {
	return &httpError{http.StatusRequestEntityTooLarge, CodeBodyTooLarge,
		fmt.Sprintf("request body too large: the limit is %d bytes", limit)}
}

var (
	errRouteNotFound = &httpError{http.StatusNotFound, CodeRouteNotFound, "no such route"}
	errMissingToken  = &httpError{http.StatusUnauthorized, CodeUnauthorized, "missing bearer token"}
	errWrongToken    = &httpError{http.StatusUnauthorized, CodeUnauthorized, "invalid bearer token"}
	errAdminDisabled = &httpError{http.StatusForbidden, CodeAdminDisabled, "admin API disabled: set PROGRESSDB_ADMIN_TOKEN"}
	errNoRetention   = &httpError{http.StatusServiceUnavailable, CodeNotConfigured, "retention not configured"}
	// Pause must hold for every shard at once; a pause per shard would
	// leave some running.
	errPauseNotInCluster = &httpError{http.StatusServiceUnavailable, CodeNotConfigured, "retention pause is not cluster-wide in this version: it is refused on a cluster node"}
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
		return &httpError{http.StatusMethodNotAllowed, CodeMethodNotAllowed, "method " + r.Method + " not allowed; use " + list}
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
	Code   Code                 `json:"code"`
	Holder *retention.LeaseInfo `json:"holder,omitempty"`
	Result *retention.Result    `json:"result,omitempty"`
	Paused bool                 `json:"paused,omitempty"` // a run refused because retention is paused
}

const internalErrorMsg = "internal error"

// internalErrorJSON answers when even an answer cannot be encoded.
const internalErrorJSON = `{"error":"` + internalErrorMsg + `","code":"` + string(CodeInternal) + `"}`

// fail writes err as the response. It is the one place that maps errors to
// statuses and codes. Client errors carry their own text (it names the
// rule or the missing item); server errors answer a generic message and
// are logged with IDs only.
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
	if leaderChanged(err) || errors.Is(err, store.ErrFenced) {
		// Sent again, it finds the shard's next leader or owner.
		w.Header().Set("Retry-After", "1")
	}
	s.writeJSON(w, r, status, body)
}

// leaderChanged reports a write of a replicated shard that met no
// serving leader, or lost it: sent again, it finds the next one (spec
// §15).
func leaderChanged(err error) bool {
	return errors.Is(err, store.ErrNotLeader) || errors.Is(err, store.ErrProposalDropped) || errors.Is(err, store.ErrAmbiguous)
}

func classify(err error) (int, errorBody) {
	var (
		he      *httpError
		held    *retention.LeaseHeldError
		runFail *runFailedError
		se      StatusError
	)
	answer := func(status int, code Code) (int, errorBody) {
		return status, errorBody{Error: err.Error(), Code: code}
	}
	switch {
	case errors.As(err, &se):
		return answer(se.HTTPStatus(), se.ErrorCode())
	case errors.As(err, &he):
		return he.status, errorBody{Error: he.msg, Code: he.code}
	case errors.As(err, &runFail):
		res := runFail.result
		return http.StatusInternalServerError, errorBody{Error: "retention run failed: " + runFail.err.Error(), Code: CodeRunFailed, Result: &res}

	case errors.Is(err, store.ErrNotFound):
		return answer(http.StatusNotFound, CodeNotFound)
	case errors.Is(err, store.ErrInvalidID):
		return answer(http.StatusBadRequest, CodeInvalidID)
	case errors.Is(err, store.ErrInvalidCursor):
		return answer(http.StatusBadRequest, CodeInvalidCursor)
	case errors.Is(err, store.ErrInvalidArgument):
		return answer(http.StatusBadRequest, CodeInvalidField)
	case errors.Is(err, store.ErrExists):
		return answer(http.StatusConflict, CodeAlreadyExists)
	case errors.Is(err, store.ErrPurgeInProgress):
		return answer(http.StatusConflict, CodePurgeInProgress)
	case errors.Is(err, store.ErrUnreadable):
		// Sealed content whose key a purge or an erasure destroyed: its
		// records are on their way out (spec §12).
		return answer(http.StatusConflict, CodePurgeInProgress)
	case errors.Is(err, store.ErrIDUnavailable):
		return answer(http.StatusConflict, CodeIDUnavailable)
	case errors.Is(err, store.ErrLegalHold):
		return answer(http.StatusConflict, CodeLegalHold)
	case errors.Is(err, store.ErrFenced):
		// A newer owner of the shard has written: this node is deposed.
		return answer(http.StatusServiceUnavailable, CodeShardUnavailable)
	case leaderChanged(err):
		return answer(http.StatusServiceUnavailable, CodeShardUnavailable)
	case errors.Is(err, store.ErrMalformed):
		return http.StatusInternalServerError, errorBody{Error: internalErrorMsg, Code: CodeInternal}

	case errors.As(err, &held):
		holder := held.Holder
		return http.StatusConflict, errorBody{Error: err.Error(), Code: CodeLeaseHeld, Holder: &holder}
	case errors.Is(err, retention.ErrPaused):
		return http.StatusConflict, errorBody{Error: err.Error(), Code: CodeRetentionPaused, Paused: true}
	case errors.Is(err, retention.ErrLeaseHeld):
		return answer(http.StatusConflict, CodeLeaseHeld)
	case errors.Is(err, retention.ErrDisabled):
		return answer(http.StatusConflict, CodeRetentionDisabled)
	case errors.Is(err, retention.ErrClosed):
		return http.StatusServiceUnavailable, errorBody{Error: "server shutting down", Code: CodeUnavailable}

	case errors.Is(err, attachments.ErrUnavailable):
		return answer(http.StatusServiceUnavailable, CodeUnavailable)

	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return http.StatusServiceUnavailable, errorBody{Error: "request canceled", Code: CodeUnavailable}
	default:
		return http.StatusInternalServerError, errorBody{Error: internalErrorMsg, Code: CodeInternal}
	}
}
