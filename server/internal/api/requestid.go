package api

import (
	"context"
	"log/slog"
	"net/http"

	"github.com/progressdb/progressdb/server/pkg/store"
)

// RequestIDHeader carries a request's ID: taken from the client (or a
// proxy in front) when sane, generated otherwise, and always echoed in the
// answer, so that a client's report and the server's log lines meet.
const RequestIDHeader = "X-Request-ID"

// requestIDHeaderKey is RequestIDHeader in canonical form, the answer's header
// map key: set directly, it is not canonicalised again on every answer.
var requestIDHeaderKey = http.CanonicalHeaderKey(RequestIDHeader)

// maxRequestIDLen bounds an accepted incoming ID.
const maxRequestIDLen = 128

type requestIDKey struct{}

// withRequestID gives r its ID and sets the answer's header. A generated
// ID comes from ids, the server's source of message and thread IDs (26
// characters: the time and 80 random bits, unique across processes), which
// costs neither a system call nor a lock-free random read per request.
func withRequestID(w http.ResponseWriter, r *http.Request, ids *store.IDSource) *http.Request {
	id := RequestIDFor(r, ids)
	w.Header()[requestIDHeaderKey] = []string{id}
	return r.WithContext(context.WithValue(r.Context(), requestIDKey{}, id))
}

// RequestIDFor is the ID the answer to r carries: the client's when sane,
// else a new one from ids. Whatever answers before the API (the
// certificate guard) gives its answers one the same way.
func RequestIDFor(r *http.Request, ids *store.IDSource) string {
	if id := r.Header.Get(RequestIDHeader); saneRequestID(id) {
		return id
	}
	return ids.Next()
}

// saneRequestID accepts what request-ID schemes use (UUIDs, hex, base32
// and base64 tokens, ULIDs, trace headers' "Root=1-…") and nothing that
// could forge or break a log line: 1 to 128 bytes of letters, digits and
// ._~:/+=- .
func saneRequestID(id string) bool {
	if id == "" || len(id) > maxRequestIDLen {
		return false
	}
	for i := range len(id) {
		c := id[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case c == '.' || c == '_' || c == '~' || c == ':' || c == '/' || c == '+' || c == '=' || c == '-':
		default:
			return false
		}
	}
	return true
}

// requestID returns the ID of the request ctx belongs to, "" outside one.
func requestID(ctx context.Context) string {
	id, _ := ctx.Value(requestIDKey{}).(string)
	return id
}

// requestIDHandler adds request_id to every line logged with a request's
// context: the access line, errors, and what handlers log on the way.
type requestIDHandler struct{ slog.Handler }

func (h requestIDHandler) Handle(ctx context.Context, rec slog.Record) error {
	if id := requestID(ctx); id != "" {
		rec = rec.Clone()
		rec.AddAttrs(slog.String("request_id", id))
	}
	return h.Handler.Handle(ctx, rec)
}

func (h requestIDHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return requestIDHandler{h.Handler.WithAttrs(attrs)}
}

func (h requestIDHandler) WithGroup(name string) slog.Handler {
	return requestIDHandler{h.Handler.WithGroup(name)}
}
