package api

import (
	"encoding/json"
	"log/slog"
	"net/http"
)

// writeJSON answers v with status. The body is encoded before anything is
// sent, so an encoding failure can still become a clean 500. It returns nil
// so that handlers can end with `return s.writeJSON(...)`.
func (s *server) writeJSON(w http.ResponseWriter, r *http.Request, status int, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		s.log.LogAttrs(r.Context(), slog.LevelError, "http_encode_failed",
			append(requestAttrs(r), slog.Any("err", err))...)
		status = http.StatusInternalServerError
		b = []byte(`{"error":"` + internalErrorMsg + `"}`)
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	// A failed write means the client went away; there is nobody to tell.
	_, _ = w.Write(append(b, '\n'))
	return nil
}

// noContent answers 204.
func noContent(w http.ResponseWriter) error {
	w.WriteHeader(http.StatusNoContent)
	return nil
}
