package client

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
)

// Client is a progressdb client: the generated operations (Raw) behind a
// thin layer that adds the API key and admin token, retries on 503 and
// 421, pagination as iterators and errors as *APIError. It is safe for
// concurrent use.
type Client struct {
	raw        *ClientWithResponses
	apiKey     string
	adminToken string
}

type settings struct {
	apiKey, adminToken string
	httpClient         *http.Client
	tlsConfig          *tls.Config
	tlsFiles           *TLSFiles
	retry              Retry
}

// Option configures New.
type Option func(*settings) error

// WithAPIKey sends key as the bearer token of /v1 requests
// (PROGRESSDB_API_KEY).
func WithAPIKey(key string) Option {
	return func(s *settings) error { s.apiKey = key; return nil }
}

// WithAdminToken sends token as the bearer token of /admin requests
// (PROGRESSDB_ADMIN_TOKEN).
func WithAdminToken(token string) Option {
	return func(s *settings) error { s.adminToken = token; return nil }
}

// WithHTTP sends requests through hc (timeouts, proxies, tracing). With
// a TLS option, hc's Transport must be an *http.Transport, which is
// cloned, never changed.
func WithHTTP(hc *http.Client) Option {
	return func(s *settings) error {
		if hc == nil {
			return errors.New("progressdb: WithHTTP: nil client")
		}
		s.httpClient = hc
		return nil
	}
}

// WithRetry replaces DefaultRetry; Retry{Attempts: 1} turns retries off.
func WithRetry(r Retry) Option {
	return func(s *settings) error {
		if r.Attempts < 1 || r.Base < 0 || r.Max < r.Base {
			return fmt.Errorf("progressdb: WithRetry: want Attempts >= 1 and 0 <= Base <= Max, got %+v", r)
		}
		s.retry = r
		return nil
	}
}

// WithTLSConfig uses cfg for https:// servers: its RootCAs to verify the
// server, its Certificates as the client certificate (spec §14: admin
// routes may require one).
func WithTLSConfig(cfg *tls.Config) Option {
	return func(s *settings) error {
		if cfg == nil {
			return errors.New("progressdb: WithTLSConfig: nil config")
		}
		s.tlsConfig = cfg
		return nil
	}
}

// TLSFiles names PEM files: CAFile verifies the server (instead of the
// system's roots), CertFile and KeyFile (both or neither) are the client
// certificate.
type TLSFiles struct {
	CAFile, CertFile, KeyFile string
}

// WithTLSFiles is WithTLSConfig from files, read once by New.
func WithTLSFiles(f TLSFiles) Option {
	return func(s *settings) error { s.tlsFiles = &f; return nil }
}

// LoadTLSConfig reads f into a tls.Config; errors name the file.
func LoadTLSConfig(f TLSFiles) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if f.CAFile != "" {
		pem, err := os.ReadFile(f.CAFile)
		if err != nil {
			return nil, fmt.Errorf("progressdb: CA file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("progressdb: CA file %s: no PEM certificate in it", f.CAFile)
		}
		cfg.RootCAs = pool
	}
	if (f.CertFile == "") != (f.KeyFile == "") {
		return nil, errors.New("progressdb: client certificate: set both CertFile and KeyFile, or neither")
	}
	if f.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(f.CertFile, f.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("progressdb: client certificate %s, %s: %w", f.CertFile, f.KeyFile, err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg, nil
}

// New returns a client of the server at baseURL (e.g.
// "http://127.0.0.1:8080", or https:// with a TLS option).
func New(baseURL string, opts ...Option) (*Client, error) {
	if !strings.HasPrefix(baseURL, "http://") && !strings.HasPrefix(baseURL, "https://") {
		return nil, fmt.Errorf("progressdb: server URL %q: want http:// or https://", baseURL)
	}
	s := settings{retry: DefaultRetry}
	for _, o := range opts {
		if err := o(&s); err != nil {
			return nil, err
		}
	}
	if s.tlsFiles != nil {
		if s.tlsConfig != nil {
			return nil, errors.New("progressdb: WithTLSConfig and WithTLSFiles: use one")
		}
		cfg, err := LoadTLSConfig(*s.tlsFiles)
		if err != nil {
			return nil, err
		}
		s.tlsConfig = cfg
	}
	hc := s.httpClient
	if hc == nil {
		hc = &http.Client{}
	}
	if s.tlsConfig != nil {
		base := http.DefaultTransport
		if hc.Transport != nil {
			base = hc.Transport
		}
		t, ok := base.(*http.Transport)
		if !ok {
			return nil, fmt.Errorf("progressdb: TLS options need an *http.Transport, the HTTP client has %T", base)
		}
		t = t.Clone()
		t.TLSClientConfig = s.tlsConfig.Clone()
		c := *hc
		c.Transport = t
		hc = &c
	}
	raw, err := NewClientWithResponses(baseURL, WithHTTPClient(retryDoer{next: hc, retry: s.retry}))
	if err != nil {
		return nil, err
	}
	return &Client{raw: raw, apiKey: s.apiKey, adminToken: s.adminToken}, nil
}

// Raw returns the generated client underneath (every operation of
// api/openapi.yaml, with the retries of this client but without its
// credentials: pass them as a RequestEditorFn, e.g. c.APIAuth()).
func (c *Client) Raw() *ClientWithResponses { return c.raw }

// APIAuth adds the API key to a Raw request.
func (c *Client) APIAuth() RequestEditorFn { return bearer(c.apiKey) }

// AdminAuth adds the admin token to a Raw request.
func (c *Client) AdminAuth() RequestEditorFn { return bearer(c.adminToken) }

func bearer(token string) RequestEditorFn {
	return func(_ context.Context, req *http.Request) error {
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		return nil
	}
}
