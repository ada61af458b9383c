package api

import (
	"fmt"
	"log/slog"
	"net/http"
	"runtime/debug"
	"time"

	"github.com/progressdb/progressdb/server/pkg/store"
)

// recorder remembers the status a handler wrote.
type recorder struct {
	http.ResponseWriter
	status int
}

func (rec *recorder) WriteHeader(code int) {
	if rec.status == 0 {
		rec.status = code
	}
	rec.ResponseWriter.WriteHeader(code)
}

func (rec *recorder) Write(b []byte) (int, error) {
	if rec.status == 0 {
		rec.status = http.StatusOK
	}
	return rec.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the underlying writer.
func (rec *recorder) Unwrap() http.ResponseWriter { return rec.ResponseWriter }

// instrument wraps the mux: it gives every request its ID (requestid.go),
// turns a handler panic into a 500, counts and times every request, and
// logs one debug line per request. A panic raised
// inside Pebble is never recovered: it stops the process (store.Fatal).
func (s *server) instrument(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		r = withRequestID(w, r, s.ids) // before the deferred access line reads r
		rec := &recorder{ResponseWriter: w}
		defer func() {
			p := recover()
			if p != nil && p != http.ErrAbortHandler {
				stack := debug.Stack()
				s.log.LogAttrs(r.Context(), slog.LevelError, "http_panic",
					append(requestAttrs(r), slog.Any("panic", p), slog.String("stack", string(stack)))...)
				if st := s.st(r); st != nil && store.IsStoragePanic(stack) {
					st.Fatal(fmt.Sprintf("panic in storage: %v", p))
				}
				if rec.status == 0 {
					s.writeJSON(rec, r, http.StatusInternalServerError, errorBody{Error: internalErrorMsg, Code: CodeInternal})
					p = nil
				} else {
					// Part of a response is out: break the connection so the
					// client cannot take it for a complete one.
					p = http.ErrAbortHandler
				}
			}
			status := rec.status
			if status == 0 {
				status = http.StatusOK // nothing written: net/http sends 200
			}
			elapsed := time.Since(start)
			method, route := methodLabel(r.Method), routeLabel(r)
			s.metrics.observe(method, route, status, elapsed)
			// Checked first: building the attributes costs allocations and ID
			// checks on every request, and the line is off unless debugging.
			if s.log.Enabled(r.Context(), slog.LevelDebug) {
				s.log.LogAttrs(r.Context(), slog.LevelDebug, "http_request",
					append(requestAttrs(r), slog.Int("status", status), slog.Duration("duration", elapsed))...)
			}
			if p != nil {
				panic(p) // http.ErrAbortHandler: net/http aborts the response quietly
			}
		}()
		next.ServeHTTP(rec, r)
	})
}
