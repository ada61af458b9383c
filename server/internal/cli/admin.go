package cli

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/progressdb/progressdb/server/internal/api"
	"github.com/progressdb/progressdb/server/internal/app"
	"github.com/progressdb/progressdb/server/internal/retention"
	"github.com/progressdb/progressdb/server/pkg/config"
	"github.com/progressdb/progressdb/server/pkg/store"
)

// adminTimeout bounds one admin API call from the command line.
const adminTimeout = 30 * time.Second

// adminClient calls a running server's admin API: PROGRESSDB_ADDR with
// PROGRESSDB_ADMIN_TOKEN. Commands that change server state go through it
// while a server holds the database, so the server's own view stays true.
type adminClient struct {
	base  string
	token string
	hc    *http.Client
	// named is the database the server's last answer named
	// (api.HeaderDatabaseID), shared by the client's copies.
	named *string
	// caVar names what verifies the server's certificate, for the
	// message of a failed verification.
	caVar string
}

// adminError is a non-2xx answer of the admin API, with what a refused or
// failed retention run carries besides the message.
type adminError struct {
	Status int
	Code   api.Code // the answer's code (spec §7), "" from a server without codes
	Msg    string
	Holder *retention.LeaseInfo // 409: the lease is held elsewhere
	Paused bool                 // 409: retention is paused
	Result *retention.Result    // 500: the failed run
}

func (e *adminError) Error() string { return fmt.Sprintf("server answered %d: %s", e.Status, e.Msg) }

// errNoAdminToken: PROGRESSDB_ADMIN_TOKEN is unset, so no admin API can
// be asked.
var errNoAdminToken = fmt.Errorf("set %s to reach its admin API", config.VarAdminToken)

func newAdminClient(cfg config.Config) (*adminClient, error) {
	host, port, err := net.SplitHostPort(cfg.Addr)
	if err != nil {
		return nil, fmt.Errorf("%s=%q: %w", config.VarAddr, cfg.Addr, err)
	}
	// A server listening on every address is reached on loopback.
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		host = "127.0.0.1"
	}
	scheme := "http"
	if cfg.ServesTLS() {
		scheme = "https" // the listener serves HTTPS only (spec §14)
		// A node's certificate names its advertise host, which may not
		// be the loopback address: the node is asked there.
		if cfg.Cluster.Enabled() && cfg.AdvertiseURL != "" {
			return serverClient(cfg.AdvertiseURL, cfg)
		}
	}
	return serverClient(scheme+"://"+net.JoinHostPort(host, port), cfg)
}

// serverClient calls the admin API of the server at base (--server,
// PROGRESSDB_SERVER, or PROGRESSDB_ADDR's) with PROGRESSDB_ADMIN_TOKEN,
// over TLS as cfg says (serverTLS).
func serverClient(base string, cfg config.Config) (*adminClient, error) {
	if cfg.AdminToken == "" {
		return nil, errNoAdminToken
	}
	tc, err := serverTLS(cfg)
	if err != nil {
		return nil, err
	}
	return &adminClient{
		base:  strings.TrimRight(base, "/"),
		token: cfg.AdminToken,
		hc: &http.Client{Timeout: adminTimeout, Transport: &http.Transport{Proxy: http.ProxyFromEnvironment,
			TLSClientConfig: tc, ForceAttemptHTTP2: true, TLSHandshakeTimeout: 10 * time.Second}},
		named: new(string),
		caVar: caSetting(cfg),
	}, nil
}

// noteDatabase keeps the database an answer names.
func (c *adminClient) noteDatabase(res *http.Response) {
	if id := res.Header.Get(api.HeaderDatabaseID); id != "" && c.named != nil {
		*c.named = id
	}
}

// untimed is the client for calls that last as long as their work (a
// retention run); ctx still ends them.
func (c *adminClient) untimed() *adminClient {
	u := *c
	hc := *c.hc
	hc.Timeout = 0
	u.hc = &hc
	return &u
}

// do sends in (when not nil) as JSON and decodes the answer into out (when
// not nil).
func (c *adminClient) do(ctx context.Context, method, path string, in, out any) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, body)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	res, err := c.hc.Do(req)
	if err != nil {
		return c.reachError(err)
	}
	defer res.Body.Close()
	c.noteDatabase(res)
	data, err := io.ReadAll(io.LimitReader(res.Body, 4<<20))
	if err != nil {
		return fmt.Errorf("read the server's answer: %w", err)
	}
	if res.StatusCode/100 != 2 {
		var e struct {
			Error  string               `json:"error"`
			Code   api.Code             `json:"code"`
			Holder *retention.LeaseInfo `json:"holder"`
			Paused bool                 `json:"paused"`
			Result *retention.Result    `json:"result"`
		}
		if json.Unmarshal(data, &e) != nil || e.Error == "" {
			e.Error = http.StatusText(res.StatusCode)
		}
		return &adminError{Status: res.StatusCode, Code: e.Code, Msg: c.withHint(res.StatusCode, e.Error, data),
			Holder: e.Holder, Paused: e.Paused, Result: e.Result}
	}
	if out == nil || len(data) == 0 {
		return nil
	}
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("decode the server's answer: %w", err)
	}
	return nil
}

// plainToTLS is what Go's HTTPS listener answers (400) a plain-HTTP
// request with.
const plainToTLS = "Client sent an HTTP request to an HTTPS server"

// withHint adds to an error answer's message what the command line's
// caller can do about it: the settings of this side that the answer is
// about.
func (c *adminClient) withHint(status int, msg string, body []byte) string {
	switch {
	case status == http.StatusBadRequest && bytes.Contains(body, []byte(plainToTLS)):
		return fmt.Sprintf("%s: the server at %s serves HTTPS only: ask it at https:// (--server https://HOST:PORT or %s; through %s, this shell's %s makes the command use https)",
			plainToTLS, c.base, config.VarServer, config.VarAddr, config.VarTLSCert)
	case status == http.StatusUnauthorized && strings.Contains(msg, "client certificate"):
		return fmt.Sprintf("%s: the command line presents the certificate of %s and %s, signed by the CA the server's %s names",
			msg, config.VarTLSClientCert, config.VarTLSClientKey, config.VarTLSClientCA)
	case status == http.StatusUnauthorized:
		return fmt.Sprintf("%s: %s is not the admin token of the server at %s; set it to that server's", msg, config.VarAdminToken, c.base)
	}
	return msg
}

// stream sends a request without a body and returns the answer's body,
// for answers too long for the client's timeout (a backup): ctx bounds
// it instead. A non-2xx answer is an *adminError.
func (c *adminClient) stream(ctx context.Context, method, path string) (io.ReadCloser, error) {
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	hc := *c.hc
	hc.Timeout = 0
	res, err := hc.Do(req)
	if err != nil {
		return nil, c.reachError(err)
	}
	c.noteDatabase(res)
	if res.StatusCode/100 != 2 {
		defer res.Body.Close()
		data, _ := io.ReadAll(io.LimitReader(res.Body, 1<<20))
		var e struct {
			Error string `json:"error"`
		}
		if json.Unmarshal(data, &e) != nil || e.Error == "" {
			e.Error = http.StatusText(res.StatusCode)
		}
		return nil, &adminError{Status: res.StatusCode, Msg: c.withHint(res.StatusCode, e.Error, data)}
	}
	return res.Body, nil
}

// onRetention is onDatabase with the retention service over a database
// opened here.
func (e env) onRetention(ctx context.Context, cfg config.Config, logger *slog.Logger, name, server string,
	local func(m *retention.Manager) error, remote func(c *adminClient) error) (database, int) {
	return e.onDatabase(ctx, cfg, logger, name, server, func(st *store.Store) error {
		return onLocalRetention(ctx, st, cfg, logger, local)
	}, remote)
}

// onLocalRetention builds the retention service over an open store and
// runs fn on it. These commands write no audit file: no signing key is
// needed.
func onLocalRetention(ctx context.Context, st *store.Store, cfg config.Config, logger *slog.Logger, fn func(m *retention.Manager) error) error {
	return withRetention(ctx, st, cfg, logger, nil, fn)
}

// withRetention builds the retention service over st, opened here, and its
// blob store (app.WithBlobs: a run deletes the blobs its purges owe), runs
// fn on it and closes what it opened (st is the caller's).
func withRetention(ctx context.Context, st *store.Store, cfg config.Config, logger *slog.Logger, key ed25519.PrivateKey,
	fn func(m *retention.Manager) error) error {
	sts, err := app.WithBlobs(ctx, cfg, st)
	if err != nil {
		return err
	}
	defer sts.Blobs.Close()
	m, err := app.NewRetention(sts, cfg.Retention, logger, prometheus.NewRegistry(), false, key)
	if err != nil {
		return err
	}
	defer m.Close()
	return fn(m)
}
