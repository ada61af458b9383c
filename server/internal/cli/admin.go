package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"

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
}

// adminError is a non-2xx answer of the admin API, with what a refused or
// failed retention run carries besides the message.
type adminError struct {
	Status int
	Msg    string
	Holder *retention.LeaseInfo // 409: the lease is held elsewhere
	Paused bool                 // 409: retention is paused
	Result *retention.Result    // 500: the failed run
}

func (e *adminError) Error() string { return fmt.Sprintf("server answered %d: %s", e.Status, e.Msg) }

func newAdminClient(cfg config.Config) (*adminClient, error) {
	if cfg.AdminToken == "" {
		return nil, fmt.Errorf("set %s to reach its admin API", config.VarAdminToken)
	}
	host, port, err := net.SplitHostPort(cfg.Addr)
	if err != nil {
		return nil, fmt.Errorf("%s=%q: %w", config.VarAddr, cfg.Addr, err)
	}
	// A server listening on every address is reached on loopback.
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		host = "127.0.0.1"
	}
	return &adminClient{
		base:  "http://" + net.JoinHostPort(host, port),
		token: cfg.AdminToken,
		hc:    &http.Client{Timeout: adminTimeout},
	}, nil
}

// untimed is the client for calls that last as long as their work (a
// retention run); ctx still ends them.
func (c *adminClient) untimed() *adminClient {
	u := *c
	u.hc = &http.Client{}
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
		return fmt.Errorf("reach the server at %s: %w", c.base, err)
	}
	defer res.Body.Close()
	data, err := io.ReadAll(io.LimitReader(res.Body, 4<<20))
	if err != nil {
		return fmt.Errorf("read the server's answer: %w", err)
	}
	if res.StatusCode/100 != 2 {
		var e struct {
			Error  string               `json:"error"`
			Holder *retention.LeaseInfo `json:"holder"`
			Paused bool                 `json:"paused"`
			Result *retention.Result    `json:"result"`
		}
		if json.Unmarshal(data, &e) != nil || e.Error == "" {
			e.Error = http.StatusText(res.StatusCode)
		}
		return &adminError{Status: res.StatusCode, Msg: e.Error, Holder: e.Holder, Paused: e.Paused, Result: e.Result}
	}
	if out == nil || len(data) == 0 {
		return nil
	}
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("decode the server's answer: %w", err)
	}
	return nil
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
		return nil, fmt.Errorf("reach the server at %s: %w", c.base, err)
	}
	if res.StatusCode/100 != 2 {
		defer res.Body.Close()
		data, _ := io.ReadAll(io.LimitReader(res.Body, 1<<20))
		var e struct {
			Error string `json:"error"`
		}
		if json.Unmarshal(data, &e) != nil || e.Error == "" {
			e.Error = http.StatusText(res.StatusCode)
		}
		return nil, &adminError{Status: res.StatusCode, Msg: e.Error}
	}
	return res.Body, nil
}

// onRetention runs local on the retention service over the database when
// no server holds it, and remote through the server's admin API when one
// does (spec §9).
func (e env) onRetention(cfg config.Config, logger *slog.Logger, name string,
	local func(m *retention.Manager) error, remote func(c *adminClient) error) int {
	return e.onDatabase(cfg, name, func(st *store.Store) error {
		return onLocalRetention(st, cfg, logger, local)
	}, remote)
}

// onDatabase runs local on the database when no server holds it, and
// remote through the server's admin API when one does, so that a running
// server's view stays the truth.
func (e env) onDatabase(cfg config.Config, name string, local func(st *store.Store) error, remote func(c *adminClient) error) int {
	st, err := openStore(cfg, nil, mustExist)
	switch {
	case errors.Is(err, store.ErrDatabaseLocked):
		c, cerr := newAdminClient(cfg)
		if cerr != nil {
			fmt.Fprintf(e.stderr, "progressdb %s: the database at %s is open in a running server; %v\n", name, cfg.DBPath, cerr)
			return exitFailed
		}
		err = remote(c)
	case err != nil:
	default:
		err = errors.Join(local(st), st.Close())
	}
	if err != nil {
		fmt.Fprintf(e.stderr, "progressdb %s: %v\n", name, err)
		return exitFailed
	}
	return exitOK
}

// onLocalRetention builds the retention service over an open store and
// runs fn on it. These commands write no audit file: no signing key is
// needed.
func onLocalRetention(st *store.Store, cfg config.Config, logger *slog.Logger, fn func(m *retention.Manager) error) error {
	m, err := app.NewRetention(st, cfg.Retention, logger, prometheus.NewRegistry(), false, nil)
	if err != nil {
		return err
	}
	defer m.Close()
	return fn(m)
}
