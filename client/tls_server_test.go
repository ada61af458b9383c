package client_test

import (
	"context"
	"crypto/tls"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/progressdb/progressdb/client"
)

// The client's TLS options against the server's own TLS listener (spec
// §14): the CA verifies the server, the client certificate opens the
// admin routes, /v1 needs only the API key, and a client that does not
// trust the CA, or speaks plain HTTP, gets no data.
func TestTLSServer(t *testing.T) {
	p := newPKI(t)
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: p.Pool}}}
	base := start(t, "https", hc, []string{
		"PROGRESSDB_TLS_CERT_FILE=" + p.ServerCert,
		"PROGRESSDB_TLS_KEY_FILE=" + p.ServerKey,
		"PROGRESSDB_TLS_CLIENT_CA_FILE=" + p.CAFile,
	})
	ctx := context.Background()

	admin := newClient(t, base, client.WithTLSFiles(client.TLSFiles{CAFile: p.CAFile, CertFile: p.ClientCert, KeyFile: p.ClientKey}))
	th := check(admin.CreateThread(ctx, client.NewThread{Title: "Over TLS", Author: "ann"})).must(t)
	check(admin.SetLegalHold(ctx, th.Id, true)).must(t)
	if holds := check(admin.LegalHolds(ctx)).must(t); len(holds) != 1 || holds[0].Id != th.Id {
		t.Fatalf("holds %+v", holds)
	}

	cfg := &tls.Config{RootCAs: p.Pool}
	app := newClient(t, base, client.WithTLSConfig(cfg))
	if got := check(app.GetThread(ctx, th.Id, false)).must(t); got.Title != "Over TLS" {
		t.Fatalf("got %+v", got)
	}
	// The certificate guard answers before the request gets its ID, so
	// this one error is checked without wantCode's X-Request-ID.
	var e *client.APIError
	if _, err := app.LegalHolds(ctx); !errors.As(err, &e) || e.Status != 401 || e.Code != client.ErrorCodeUnauthorized {
		t.Fatalf("admin route without a client certificate: %v", err)
	}

	_, err := newClient(t, base).GetThread(ctx, th.Id, false)
	if err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("a client without the CA: %v", err)
	}
	_, err = newClient(t, "http"+strings.TrimPrefix(base, "https")).GetThread(ctx, th.Id, false)
	if err == nil {
		t.Fatal("plain HTTP to the TLS listener answered")
	}
}
