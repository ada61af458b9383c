package api

import (
	"encoding/json"
	"log/slog"
	"net/http"

	"github.com/progressdb/progressdb/server/internal/wire"
	"github.com/progressdb/progressdb/server/pkg/store"
)

// writeJSON answers v with status. The body is encoded before anything is
// sent, so an encoding failure can still become a clean 500. It returns nil
// so that handlers can end with `return s.writeJSON(...)`.
func (s *server) writeJSON(w http.ResponseWriter, r *http.Request, status int, v any) error {
	b, err := json.Marshal(v)
	return s.writeEncoded(w, r, status, b, err)
}

// writeMessage answers one message version, encoded by hand (wire.AppendMessage).
func (s *server) writeMessage(w http.ResponseWriter, r *http.Request, status int, m store.Message) error {
	b, err := wire.AppendMessage(make([]byte, 0, 256+len(m.Body)), m)
	return s.writeEncoded(w, r, status, b, err)
}

// writeEncoded answers b, the JSON encoding of an answer, with status;
// err, the encoding's failure, makes it a 500 instead.
func (s *server) writeEncoded(w http.ResponseWriter, r *http.Request, status int, b []byte, err error) error {
	if err != nil {
		s.log.LogAttrs(r.Context(), slog.LevelError, "http_encode_failed",
			append(requestAttrs(r), slog.Any("err", err))...)
		status = http.StatusInternalServerError
		b = []byte(internalErrorJSON)
	}
	setJSONHeaders(w.Header())
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

// The values of every JSON answer's headers, shared: net/http only reads
// them, and Header.Set's canonicalising and one slice per value were a
// tenth of a write's allocations.
var (
	jsonContentType = []string{"application/json"}
	noSniff         = []string{"nosniff"}
)

// setJSONHeaders sets a JSON answer's Content-Type and
// X-Content-Type-Options (keys in canonical form).
func setJSONHeaders(h http.Header) {
	h["Content-Type"] = jsonContentType
	h["X-Content-Type-Options"] = noSniff
}
