// Package api serves progressdb's HTTP interface (spec §7): the public /v1
// chat API, the /admin routes, /healthz, /metrics and /openapi.yaml. Every
// route is described in api/openapi.yaml; openapi_test.go holds the two in
// step.
package api

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"path"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	apispec "github.com/progressdb/progressdb/api"
	"github.com/progressdb/progressdb/server/internal/retention"
	"github.com/progressdb/progressdb/server/pkg/attachments"
	"github.com/progressdb/progressdb/server/pkg/config"
	"github.com/progressdb/progressdb/server/pkg/store"
)

// DefaultMaxBodyBytes limits request bodies when Options.MaxBodyBytes is 0.
const DefaultMaxBodyBytes = 1 << 20

// DefaultBackupStreamTimeout is Options.BackupStreamTimeout when 0.
const DefaultBackupStreamTimeout = 10 * time.Minute

// Options configure New.
type Options struct {
	// Store is required.
	Store *store.Store
	// Retention serves the admin retention routes; nil makes them answer 503.
	Retention retention.Service
	// Backups serves the admin backup routes; nil makes them answer 503.
	Backups Backups
	// ShardBackups serves them on a cluster node instead, per shard.
	ShardBackups ShardBackups
	// BackupStreamTimeout cuts a streamed backup whose client has taken
	// nothing for this long (PROGRESSDB_BACKUP_STREAM_TIMEOUT; 0: the
	// default of 10 minutes).
	BackupStreamTimeout time.Duration
	// Logger receives request and error events; nothing is logged when nil.
	Logger *slog.Logger
	// APIKey, when set, is the bearer token /v1 requires.
	APIKey string
	// AdminToken is the bearer token /admin requires; unset disables /admin.
	AdminToken string
	// Tokens, when set, is the handler's: New sets it to APIKey and
	// AdminToken, and its Set replaces them while the handler serves.
	Tokens *Tokens
	// Registry receives the HTTP metrics and is served at /metrics; a fresh
	// registry is used when nil.
	Registry *prometheus.Registry
	// MaxBodyBytes limits request bodies (DefaultMaxBodyBytes when 0).
	MaxBodyBytes int64
	// Cluster, on a cluster node, routes each thread to its shard's store
	// and forwards what other nodes own; Store is then unused.
	Cluster Cluster
	// Pause, on a cluster node, is the cluster-wide retention pause switch
	// that PUT /admin/retention/pause sets (spec §11).
	Pause retention.PauseSwitch
	// Erasures serves subject erasure (spec §12); nil when sealing is off,
	// and the erasure routes answer 409 sealing_disabled.
	Erasures retention.Erasures
	// Attachments keeps attachments' bytes (spec §16); nil: the
	// attachment routes answer 503 not_configured. A cluster node's
	// shards each bring their own (Shard.Blobs).
	Attachments *attachments.Blobs
	// AttachmentMaxBytes is the largest attachment stored
	// (PROGRESSDB_ATTACHMENT_MAX_BYTES; 0: its default of 25 MiB).
	AttachmentMaxBytes int64
	// IdempotencyTTL is how long an Idempotency-Key is kept
	// (PROGRESSDB_IDEMPOTENCY_TTL; 0: DefaultIdempotencyTTL).
	IdempotencyTTL time.Duration
	// IdempotencyKeys bounds the keys one caller keeps, the oldest
	// dropped first (0: DefaultIdempotencyKeys).
	IdempotencyKeys int
	// IdempotencyWait bounds how long a request waits for another with
	// its key (0: DefaultIdempotencyWait; negative: not at all).
	IdempotencyWait time.Duration
}

// server holds what the handlers share. It is built once by New.
type server struct {
	store      *store.Store
	retention  retention.Service
	backups    Backups
	shardBacks ShardBackups
	// streamTimeout cuts a stalled backup stream.
	streamTimeout time.Duration
	log           *slog.Logger
	tokens        *Tokens // the API key and admin token
	metrics       *httpMetrics
	scrape        http.Handler // /metrics
	openAPI       []byte       // /openapi.yaml
	maxBody       int64
	cluster       Cluster               // nil on a single node
	pause         retention.PauseSwitch // the cluster's pause switch; nil on a single node
	ids           *store.IDSource       // new thread IDs in a cluster
	erasures      retention.Erasures    // nil: sealing is off
	attach        *attachments.Blobs    // nil: attachments not configured
	attachMax     int64
	attachMetrics *attachmentMetrics
	idem          idempotency // Idempotency-Key (idempotency.go)
}

// New builds the HTTP handler.
func New(opts Options) (http.Handler, error) {
	if opts.Store == nil && opts.Cluster == nil {
		return nil, errors.New("api: Options.Store is required")
	}
	if opts.MaxBodyBytes < 0 {
		return nil, fmt.Errorf("api: MaxBodyBytes %d is negative", opts.MaxBodyBytes)
	}
	s := &server{
		store:         opts.Store,
		retention:     opts.Retention,
		backups:       opts.Backups,
		shardBacks:    opts.ShardBackups,
		streamTimeout: opts.BackupStreamTimeout,
		log:           opts.Logger,
		tokens:        opts.Tokens,
		maxBody:       opts.MaxBodyBytes,
		openAPI:       apispec.OpenAPI(),
		cluster:       opts.Cluster,
		pause:         opts.Pause,
		ids:           store.NewIDSource(),
		erasures:      opts.Erasures,
		attach:        opts.Attachments,
		attachMax:     opts.AttachmentMaxBytes,
	}
	if s.attachMax == 0 {
		s.attachMax = config.DefaultAttachmentMaxBytes
	}
	if s.tokens == nil {
		s.tokens = new(Tokens)
	}
	s.tokens.Set(opts.APIKey, opts.AdminToken)
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	s.log = slog.New(requestIDHandler{s.log.Handler()})
	reg := opts.Registry
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	s.scrape = promhttp.HandlerFor(reg, promhttp.HandlerOpts{})
	if s.maxBody == 0 {
		s.maxBody = DefaultMaxBodyBytes
	}
	if s.streamTimeout <= 0 {
		s.streamTimeout = DefaultBackupStreamTimeout
	}
	if opts.IdempotencyTTL < 0 || opts.IdempotencyKeys < 0 {
		return nil, fmt.Errorf("api: IdempotencyTTL %v and IdempotencyKeys %d must not be negative", opts.IdempotencyTTL, opts.IdempotencyKeys)
	}
	s.idem.ttl, s.idem.max, s.idem.wait = opts.IdempotencyTTL, opts.IdempotencyKeys, opts.IdempotencyWait
	if s.idem.ttl == 0 {
		s.idem.ttl = DefaultIdempotencyTTL
	}
	if s.idem.max == 0 {
		s.idem.max = DefaultIdempotencyKeys
	}
	if s.idem.wait == 0 {
		s.idem.wait = DefaultIdempotencyWait
	}
	m, err := newHTTPMetrics(reg)
	if err != nil {
		return nil, fmt.Errorf("api: register metrics: %w", err)
	}
	s.metrics = m
	if s.attachMetrics, err = newAttachmentMetrics(reg); err != nil {
		return nil, fmt.Errorf("api: register metrics: %w", err)
	}

	mux := http.NewServeMux()
	s.register(mux)
	return s.instrument(s.canonicalPaths(mux)), nil
}

// canonicalPaths answers 400 to a path with an empty, "." or ".." segment.
// The mux would redirect such a path to its cleaned form, which names
// another resource: an empty thread ID in /v1/threads//messages would
// become thread "messages".
func (s *server) canonicalPaths(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if p := r.URL.Path; p != "/" && path.Clean(p) != p {
			s.fail(w, r, badRequest(CodeInvalidID, "invalid path %q: empty, \".\" or \"..\" segment; ids must match %s",
				p, "^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$"))
			return
		}
		next.ServeHTTP(w, r)
	})
}

// handlerFunc is a handler that reports failure by returning an error; the
// error becomes the response in one place (see fail).
type handlerFunc func(w http.ResponseWriter, r *http.Request) error

type route struct {
	method  string
	path    string
	access  access
	handler handlerFunc
}

func (s *server) routes() []route {
	return []route{
		{http.MethodGet, "/healthz", accessOpen, s.healthz},
		{http.MethodGet, "/metrics", accessOpen, s.serveMetrics},
		{http.MethodGet, "/openapi.yaml", accessOpen, s.serveOpenAPI},

		{http.MethodPost, "/v1/threads", accessAPI, s.createThread},
		{http.MethodGet, "/v1/threads", accessAPI, s.listThreads},
		{http.MethodGet, "/v1/threads/{tid}", accessAPI, s.getThread},
		{http.MethodPatch, "/v1/threads/{tid}", accessAPI, s.editThread},
		{http.MethodDelete, "/v1/threads/{tid}", accessAPI, s.deleteThread},
		{http.MethodPost, "/v1/threads/{tid}/restore", accessAPI, s.restoreThread},
		{http.MethodPost, "/v1/threads/{tid}/messages", accessAPI, s.appendMessage},
		{http.MethodGet, "/v1/threads/{tid}/messages", accessAPI, s.listMessages},
		{http.MethodGet, "/v1/threads/{tid}/messages/{mid}", accessAPI, s.getMessage},
		{http.MethodPut, "/v1/threads/{tid}/messages/{mid}", accessAPI, s.editMessage},
		{http.MethodDelete, "/v1/threads/{tid}/messages/{mid}", accessAPI, s.deleteMessage},
		{http.MethodPost, "/v1/threads/{tid}/messages/{mid}/restore", accessAPI, s.restoreMessage},
		{http.MethodGet, "/v1/threads/{tid}/messages/{mid}/versions", accessAPI, s.listVersions},
		{http.MethodPost, "/v1/threads/{tid}/messages/{mid}/attachments", accessAPI, s.uploadAttachment},
		{http.MethodGet, "/v1/threads/{tid}/messages/{mid}/attachments", accessAPI, s.listAttachments},
		{http.MethodGet, "/v1/threads/{tid}/messages/{mid}/attachments/{aid}", accessAPI, s.getAttachment},
		{http.MethodDelete, "/v1/threads/{tid}/messages/{mid}/attachments/{aid}", accessAPI, s.deleteAttachment},
		{http.MethodPost, "/v1/threads/{tid}/messages/{mid}/attachments/{aid}/restore", accessAPI, s.restoreAttachment},

		{http.MethodGet, "/admin/database", accessAdmin, s.database},
		{http.MethodGet, "/admin/retention", accessAdmin, s.retentionStatus},
		{http.MethodPost, "/admin/retention/run", accessAdmin, s.retentionRun},
		{http.MethodPut, "/admin/retention/pause", accessAdmin, s.setRetentionPause},
		{http.MethodGet, "/admin/legal_holds", accessAdmin, s.legalHolds},
		{http.MethodGet, "/admin/threads/{tid}", accessAdmin, s.adminThread},
		{http.MethodPut, "/admin/threads/{tid}/legal_hold", accessAdmin, s.setLegalHold},
		{http.MethodGet, "/admin/threads/{tid}/retention", accessAdmin, s.threadPolicy},
		{http.MethodPut, "/admin/threads/{tid}/retention", accessAdmin, s.setThreadPolicy},
		{http.MethodDelete, "/admin/threads/{tid}/retention", accessAdmin, s.clearThreadPolicy},
		{http.MethodPost, "/admin/backups", accessAdmin, s.createBackup},
		{http.MethodGet, "/admin/backups", accessAdmin, s.listBackups},
		{http.MethodPost, "/admin/backups/stream", accessAdmin, s.streamBackup},
		{http.MethodPost, "/admin/erasures", accessAdmin, s.requestErasure},
		{http.MethodGet, "/admin/erasures/{id}", accessAdmin, s.erasure},
		{http.MethodGet, "/admin/erasures/{id}/receipt", accessAdmin, s.erasureReceipt},
		{http.MethodGet, "/admin/cluster", accessAdmin, s.clusterStatus},
		{http.MethodPost, "/admin/cluster/shards/{n}/move", accessAdmin, s.moveShard},
	}
}

// register installs every route behind its access guard. The mux answers
// unknown paths and wrong methods in plain text, so each path also gets a
// method-less fallback (less specific than the method patterns) and "/"
// catches the rest: every error the API returns is JSON.
func (s *server) register(mux *http.ServeMux) {
	routes := s.routes()
	methods := make(map[string][]string)
	for _, rt := range routes {
		mux.Handle(rt.method+" "+rt.path, s.guard(rt.access, rt.handler))
		methods[rt.path] = append(methods[rt.path], rt.method)
	}
	for _, rt := range routes {
		allowed, ok := methods[rt.path]
		if !ok {
			continue // fallback already registered
		}
		delete(methods, rt.path)
		mux.Handle(rt.path, s.guard(rt.access, methodNotAllowed(allowed)))
	}
	mux.Handle("/", s.guard(accessOpen, func(http.ResponseWriter, *http.Request) error {
		return errRouteNotFound
	}))
}

// healthz answers 200 only when the store can commit (store.Check), 503
// otherwise, so that a supervisor replaces a process on a failed disk.
func (s *server) healthz(w http.ResponseWriter, r *http.Request) error {
	check := s.checkStores
	if s.cluster != nil {
		check = s.cluster.Check
	}
	if err := check(r.Context()); err != nil {
		s.log.LogAttrs(r.Context(), slog.LevelError, "healthz_failed", slog.Any("err", err))
		return s.writeJSON(w, r, http.StatusServiceUnavailable, map[string]string{"status": "unavailable", "error": err.Error(), "code": string(CodeUnavailable)})
	}
	return s.writeJSON(w, r, http.StatusOK, map[string]string{"status": "ok"})
}

func (s *server) checkStores(ctx context.Context) error { return s.store.Check(ctx) }

func (s *server) serveMetrics(w http.ResponseWriter, r *http.Request) error {
	s.scrape.ServeHTTP(w, r)
	return nil
}

// serveOpenAPI answers the embedded OpenAPI description (api/openapi.yaml).
func (s *server) serveOpenAPI(w http.ResponseWriter, r *http.Request) error {
	h := w.Header()
	h.Set("Content-Type", "application/yaml")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(s.openAPI) // a failed write means the client went away
	return nil
}

// Server timeouts. There is no write timeout: a waited-for retention run can
// legitimately take minutes; bodies are small, so reads are bounded.
const (
	readHeaderTimeout = 10 * time.Second
	readTimeout       = 30 * time.Second
	idleTimeout       = 2 * time.Minute
	maxHeaderBytes    = 64 << 10
	shutdownTimeout   = 15 * time.Second
)

// Serve serves h on ln until ctx ends, then shuts down gracefully: it stops
// accepting, lets in-flight requests finish for up to shutdownTimeout, and
// then closes what is left. It returns nil after a clean shutdown.
func Serve(ctx context.Context, ln net.Listener, h http.Handler, logger *slog.Logger) error {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: readHeaderTimeout,
		ReadTimeout:       readTimeout,
		IdleTimeout:       idleTimeout,
		MaxHeaderBytes:    maxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()

	select {
	case err := <-served:
		return fmt.Errorf("http serve: %w", err)
	case <-ctx.Done():
	}

	logger.Info("http_shutdown_started", "timeout", shutdownTimeout)
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), shutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		closeErr := srv.Close()
		<-served
		return errors.Join(fmt.Errorf("http shutdown: %w", err), closeErr)
	}
	if err := <-served; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("http serve: %w", err)
	}
	logger.Info("http_shutdown_completed")
	return nil
}
