package api

import (
	"log/slog"
	"net/http"
	"strings"

	"github.com/progressdb/progressdb/server/pkg/store"
)

// routeLabel is the path of the pattern the mux matched. The mux sets
// r.Pattern on the request it was handed, which is this one.
func routeLabel(r *http.Request) string {
	p := r.Pattern
	if _, path, ok := strings.Cut(p, " "); ok {
		p = path
	}
	if p == "" {
		return "unmatched"
	}
	return p
}

// requestAttrs describe a request for logs: method, route and the path IDs
// when they are valid IDs. Never titles, authors or bodies.
func requestAttrs(r *http.Request) []slog.Attr {
	attrs := []slog.Attr{slog.String("method", r.Method), slog.String("route", routeLabel(r))}
	for _, name := range []string{"tid", "mid"} {
		if id := r.PathValue(name); id != "" && store.ValidateID(id) == nil {
			attrs = append(attrs, slog.String(name, id))
		}
	}
	return attrs
}
