package app

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/progressdb/progressdb/server/internal/api"
	"github.com/progressdb/progressdb/server/internal/backup"
	"github.com/progressdb/progressdb/server/internal/buildinfo"
	"github.com/progressdb/progressdb/server/internal/cluster"
	"github.com/progressdb/progressdb/server/internal/replica/raftnet"
	"github.com/progressdb/progressdb/server/internal/retention"
	"github.com/progressdb/progressdb/server/internal/router"
	"github.com/progressdb/progressdb/server/pkg/attachments"
	"github.com/progressdb/progressdb/server/pkg/config"
	"github.com/progressdb/progressdb/server/pkg/store"
)

// etcdDialTimeout bounds the first connection to etcd at startup.
const etcdDialTimeout = 10 * time.Second

// EtcdClient dials the cluster's etcd with its TLS files.
func EtcdClient(cfg config.Cluster) (*clientv3.Client, error) {
	cc := clientv3.Config{Endpoints: cfg.Endpoints(), DialTimeout: etcdDialTimeout, Logger: zap.NewNop()}
	if cfg.EtcdCA != "" || cfg.EtcdCert != "" {
		t := &tls.Config{MinVersion: tls.VersionTLS12}
		if cfg.EtcdCA != "" {
			pem, err := os.ReadFile(cfg.EtcdCA)
			if err != nil {
				return nil, &StartupError{Var: config.VarClusterEtcdCA, Value: cfg.EtcdCA, Rule: "must be a readable PEM file", Err: err}
			}
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(pem) {
				return nil, &StartupError{Var: config.VarClusterEtcdCA, Value: cfg.EtcdCA, Rule: "must hold PEM certificates",
					Err: errors.New("no certificate found")}
			}
			t.RootCAs = pool
		}
		if cfg.EtcdCert != "" {
			pair, err := tls.LoadX509KeyPair(cfg.EtcdCert, cfg.EtcdKey)
			if err != nil {
				return nil, &StartupError{Var: config.VarClusterEtcdCert, Value: cfg.EtcdCert,
					Rule: "must be a PEM certificate matching " + config.VarClusterEtcdKey, Err: err}
			}
			t.Certificates = []tls.Certificate{pair}
		}
		cc.TLS = t
	}
	c, err := clientv3.New(cc)
	if err != nil {
		return nil, fmt.Errorf("etcd %v: %w", cc.Endpoints, err)
	}
	return c, nil
}

// serveCluster runs a cluster node (spec §11): it opens the shards whose
// data it holds, keeps their ownership, registers itself and serves every
// request, its own shards' from their stores and the others' through their
// owners. Shutdown stops HTTP, the retention runs, then gives up the
// ownerships and the registration before the stores close.
func serveCluster(ctx context.Context, cfg config.Config, logger *slog.Logger, ln net.Listener) error {
	tr, err := loadTransport(cfg)
	if err != nil {
		return err
	}
	client, err := EtcdClient(cfg.Cluster)
	if err != nil {
		return err
	}
	defer client.Close()
	keys := cluster.Keys{Name: cfg.Cluster.ClusterName}
	// An etcd that does not answer stops the start instead of hanging it:
	// each call of the start is bounded by etcdDialTimeout (the waits
	// below are not).
	if err := recordShards(ctx, cfg, client, keys); err != nil {
		return err
	}
	// The view ends with the node; the ownerships and the node's
	// registration are released by owner.Close.
	nodeCtx, stopNode := context.WithCancel(ctx)
	defer stopNode()
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		buildinfo.Read().Collector())
	tr.start(nodeCtx, reg, logger)
	// The cluster metrics count the ownerships' etcd errors too, so they
	// exist before the owner; nothing scrapes them before it is set.
	var owner *cluster.Owner
	cmetrics := router.NewMetrics(reg, func() int { return len(owner.Owned()) })
	ownerOpts := cluster.OwnerOptions{Client: client, Keys: keys, Node: cfg.NodeID,
		URL:   cfg.AdvertiseURL,
		Owner: cfg.NodeID + "/" + hostname() + "/" + strconv.Itoa(os.Getpid()) + "/" + rand.Text()[:8],
		TTL:   cfg.Cluster.OwnerTTL, Logger: logger, OnEtcdError: cmetrics.EtcdError}
	// Registered first: one process per node ID reads and reports its
	// folders. A previous process that just died is waited out.
	registration, err := cluster.Register(ctx, ownerOpts)
	if err != nil {
		if ctx.Err() != nil {
			return nil // stopped while waiting
		}
		return err
	}
	registered := false
	defer func() {
		if !registered {
			_ = registration.Release()
		}
	}()
	reporter, onDisk, err := reportDisk(ctx, cfg, client, keys, logger)
	if err != nil {
		return err
	}
	m, err := awaitMap(ctx, cfg, client, keys, logger, onDisk)
	if err != nil {
		if ctx.Err() != nil {
			return nil // stopped while waiting
		}
		return err
	}
	deleteLeftovers(cfg, m, logger)
	// Each shard replays at start what its trail records after its head.
	warnAuditInsideDB(cfg, logger)
	held := m.HeldBy(cfg.NodeID)
	secrets, err := loadClusterSecrets(ctx, cfg, client, keys, m)
	if err != nil {
		return err
	}
	shards, err := openClusterShards(ctx, cfg, logger, held, secrets)
	if err != nil {
		return err
	}
	defer func() {
		if err := shards.Close(); err != nil {
			logger.Error("store_close_failed", "err", err)
		}
	}()
	reporter.shards = shards
	ownerOpts.Registration = registration
	ownerOpts.OnRegistered = reporter.report
	owner, err = cluster.StartOwner(nodeCtx, ownerOpts)
	if err != nil {
		return err
	}
	registered = true
	defer owner.Close()
	view, err := router.NewView(nodeCtx, client, keys, logger)
	if err != nil {
		return err
	}
	// Groups are served by their leaders: the groups run before any
	// request, and stop when the node is told to (their streams would
	// hold the HTTP shutdown).
	replicas, err := newReplicas(replicaOptions{cfg: cfg, client: client, keys: keys, shards: shards,
		view: view, tls: tr.nodeTLS(), reg: reg, logger: logger, onError: cmetrics.EtcdError, secrets: secrets})
	if err != nil {
		return err
	}
	defer replicas.stop()
	defer context.AfterFunc(ctx, replicas.stop)()

	key, err := SigningKey(cfg)
	if err != nil {
		return err
	}
	smetrics := newShardMetrics(reg, logger)
	// Pause is cluster-wide (spec §11): every shard's runner reads the
	// switch in etcd, and PUT /admin/retention/pause sets it there.
	pause := &cluster.Pause{Client: client, Keys: keys, OnError: cmetrics.EtcdError}
	// Shards come (moved here) and go (moved away) while the node runs.
	services := &shardServices{m: make(map[int]*retention.Manager, len(held))}
	defer services.closeAll()
	// Stopped before the retention services and the stores: a backup
	// being written holds both.
	backups := newShardBackups(nodeCtx, cfg, key, logger)
	defer backups.close()
	per := &shardRuntime{ctx: ctx, cfg: cfg, logger: logger, key: key, shards: shards, owner: owner, pause: pause,
		cmetrics: cmetrics, smetrics: smetrics, services: services, backups: backups, receiptKey: secrets.receipt,
		replicas: replicas}
	if err := per.startShards(nodeCtx, m); err != nil {
		return err
	}
	defer per.lead(nodeCtx)() // replicated shards': stopped before the services and the host
	defer per.startErasures(nodeCtx, client, keys, m.Shards)()
	backups.startSweep()
	defer context.AfterFunc(ctx, services.closeAll)()
	mover, err := cluster.NewNode(cluster.NodeOptions{Node: cfg.NodeID, Owner: owner, Shards: shards,
		Held: func() { reporter.report(nodeCtx) }, Retention: cfg.Retention, KeystorePath: cfg.KeystorePath,
		AttachmentsURL: cfg.AttachmentsURL, SigningKey: key, Version: buildinfo.Read().Version, Logger: logger,
		Holder: per.holder, Detach: per.detach, Attach: per.attach})
	if err != nil {
		return err
	}
	handler, err := per.handler(nodeCtx, tr, view, mover, reg)
	if err != nil {
		return err
	}
	bi := buildinfo.Read()
	logger.Info("server_started", "addr", ln.Addr().String(), "db_path", cfg.DBPath, "node", cfg.NodeID,
		"advertise_url", cfg.AdvertiseURL, "shards", held, "retention_enabled", cfg.Retention.Enabled,
		"tls", tr.tls(), "mutual_tls", tr.cluster != nil, "client_certificates", tr.clientCA != nil,
		"version", bi.Version, "commit", bi.Commit)
	err = api.Serve(ctx, tr.listener(ln), handler, logger)
	logger.Info("server_stopping")
	if errors.Is(err, context.Canceled) {
		err = nil
	}
	return err
}

// awaitMap waits for the cluster's shard map, then checks the node's
// folders and settings against it: never an empty database for a shard
// another node holds (onDisk: the shards this node's disk holds).
func awaitMap(ctx context.Context, cfg config.Config, client *clientv3.Client, keys cluster.Keys, logger *slog.Logger,
	onDisk []int) (cluster.Map, error) {
	m, err := cluster.WaitMap(ctx, client, keys, func() {
		logger.Warn("cluster_not_created", "cluster", keys.Name, "held", onDisk,
			"hint", "run progressdb cluster create --nodes ID,ID,... once every node has started")
	})
	if err != nil {
		return m, fmt.Errorf("cluster %q: %w", keys.Name, err)
	}
	// The folders are checked (and made) once the cluster is known.
	if err := Validate(cfg); err != nil {
		return m, err
	}
	checkCtx, cancel := context.WithTimeout(ctx, etcdDialTimeout)
	defer cancel()
	return m, cluster.CheckHomes(checkCtx, client, keys, m, cfg.NodeID, onDisk)
}

// recordShards records the cluster's shard count in etcd, or checks it
// against the one recorded: a node never starts with another count.
func recordShards(ctx context.Context, cfg config.Config, client *clientv3.Client, keys cluster.Keys) error {
	startCtx, cancel := context.WithTimeout(ctx, etcdDialTimeout)
	defer cancel()
	err := cluster.RecordShards(startCtx, client, keys, cfg.Cluster.Shards)
	var sc *cluster.ShardCountError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &sc):
		return &StartupError{Var: config.VarClusterShards, Value: strconv.Itoa(cfg.Cluster.Shards),
			Rule: "must be the number the cluster was created with", Err: err}
	case errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil:
		return fmt.Errorf("etcd at %s did not answer within %s: %w", cfg.Cluster.Etcd, etcdDialTimeout, err)
	}
	return err
}

// reportDisk reports to etcd the shards this node holds on disk, whatever
// the map says (how `cluster create` rebuilds the map after etcd's data is
// lost, spec §10.1), and returns the reporter that keeps it current and
// the shards found.
func reportDisk(ctx context.Context, cfg config.Config, client *clientv3.Client, keys cluster.Keys, logger *slog.Logger) (*heldReporter, []int, error) {
	disk, err := cluster.DiskShards(ctx, cfg.DBPath)
	if err != nil {
		return nil, nil, err
	}
	reporter := &heldReporter{client: client, keys: keys, node: cfg.NodeID, dbPath: cfg.DBPath, ids: map[int]string{},
		logger: logger}
	onDisk := make([]int, 0, len(disk))
	for _, s := range disk {
		reporter.ids[s.Shard] = s.DatabaseID
		onDisk = append(onDisk, s.Shard)
	}
	reportCtx, cancel := context.WithTimeout(ctx, etcdDialTimeout)
	defer cancel()
	if err := cluster.ReportHeld(reportCtx, client, keys, cfg.NodeID, disk); err != nil {
		return nil, nil, err
	}
	return reporter, onDisk, nil
}

// shardRuntime starts and stops what runs for each shard a node holds:
// its retention service, its backups and its metrics. Shards held at
// start begin with start; those moved here or away while the node runs
// come and go with attach and detach.
type shardRuntime struct {
	ctx      context.Context
	cfg      config.Config
	logger   *slog.Logger
	key      ed25519.PrivateKey
	shards   *cluster.Shards
	owner    *cluster.Owner
	pause    retention.PauseSwitch
	cmetrics *router.Metrics
	smetrics *shardMetrics
	services *shardServices
	backups  *shardBackups
	// receiptKey is the cluster's (ClusterReceiptKey), nil unsealed:
	// every shard's key store uses it, and an erasure recorded in etcd
	// seals its author under it.
	receiptKey []byte
	// erasures records the cluster's subject erasures; nil unsealed.
	erasures *cluster.Erasures
	// replicas runs the node's replicas, once the map is replicated.
	replicas *replicaRuntime
}

// ReceiptKey is the cluster's receipt key (spec §11.1); nil when the
// node runs without PROGRESSDB_KEK.
func (p *shardRuntime) ReceiptKey() []byte { return p.receiptKey }

// startShards starts what runs for the shards m names this node the
// owner of, and its replicas (at once, or once the map asks for them).
func (p *shardRuntime) startShards(nodeCtx context.Context, m cluster.Map) error {
	for _, n := range m.OwnedBy(p.cfg.NodeID) {
		if err := p.start(n); err != nil {
			return err
		}
	}
	return p.replicas.watch(nodeCtx, m, p)
}

// start starts shard n's retention service and backups.
func (p *shardRuntime) start(n int) error {
	st, _ := p.shards.Store(n)
	blobs, _ := p.shards.Blobs(n)
	svc, err := p.retention(p.ctx, n, st, blobs, p.owner.Coordinator(n), true)
	if err != nil {
		return err
	}
	p.services.add(n, svc)
	return p.backups.add(n, st, blobs, svc, p.smetrics.backups(n))
}

// attach starts a shard moved here, once it is owned; a failure is
// logged (the move is done).
func (p *shardRuntime) attach(n int) {
	st, ok := p.shards.Store(n)
	if !ok {
		return
	}
	blobs, _ := p.shards.Blobs(n)
	svc, err := p.retention(p.ctx, n, st, blobs, p.owner.Coordinator(n), true)
	if err != nil {
		p.logger.Error("retention_start_failed", "shard", n, "err", err)
		return
	}
	p.services.add(n, svc)
	if err := p.backups.add(n, st, blobs, svc, p.smetrics.backups(n)); err != nil {
		p.logger.Error("backup_start_failed", "shard", n, "err", err)
	}
}

// detach stops a shard moved away, before its store closes.
func (p *shardRuntime) detach(n int) {
	p.backups.remove(n)
	if svc := p.services.remove(n); svc != nil {
		svc.Close()
	}
	p.smetrics.remove(n)
}

// handler is what the node serves: the API over the router of its shards
// and, beside it, the nodes' move steps, behind the guard of spec §14.
func (p *shardRuntime) handler(nodeCtx context.Context, tr *transport, view *router.View, mover *cluster.Node,
	reg *prometheus.Registry) (http.Handler, error) {
	// Every node reports the shards without an owner, so the alert fires
	// while their home node is down, when it reports nothing itself.
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "progressdb_cluster_shards_unowned",
		Help: "Shards that no node owns, as etcd shows them to this node: their requests answer 503.",
	}, func() float64 { return float64(view.Unowned()) }))
	// And the replicated shards with fewer healthy replicas than asked
	// for, so that the alert fires while a replica's node is down.
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "progressdb_cluster_under_replicated_shards",
		Help: "Replicated shards with fewer healthy replicas (node running, heard from by the leader as a voter) than the cluster asks for, as etcd shows them to this node; 0 with one replica per shard.",
	}, func() float64 { return float64(view.UnderReplicated()) }))
	o := router.Options{Node: p.cfg.NodeID, Secret: p.cfg.Cluster.Secret, View: view, Shards: p.shards,
		Owner: p.owner, Retention: p.services.service, Erasures: p.erasures, Mover: mover, Logger: p.logger,
		Metrics: p.cmetrics, TLS: tr.nodeTLS()}
	o.Replicas = p.replicas
	rt, err := router.New(o)
	if err != nil {
		return nil, err
	}
	tokens := new(api.Tokens)
	h, err := api.New(api.Options{Cluster: rt, Pause: p.pause, ShardBackups: p.backups, AttachmentMaxBytes: p.cfg.AttachmentMaxBytes,
		BackupStreamTimeout: p.cfg.Backup.StreamTimeout, IdempotencyTTL: p.cfg.IdempotencyTTL, Logger: p.logger, APIKey: p.cfg.APIKey, AdminToken: p.cfg.AdminToken,
		Tokens: tokens, Registry: reg})
	if err != nil {
		return nil, err
	}
	tokenFiles{cfg: p.cfg, tokens: tokens, logger: p.logger}.start(nodeCtx)
	// The nodes' own move steps are served beside the API, not in it.
	mux := http.NewServeMux()
	mux.Handle(router.MoveStepsPath, rt.MoveSteps())
	mux.Handle(raftnet.Path, p.replicas.net.Handler())
	mux.Handle(raftnet.SnapshotPath, p.replicas.net.SnapshotHandler())
	mux.Handle("/", h)
	// Node calls are checked against the cluster CA, and admin calls
	// against the client CA, before any handler (spec §14).
	guard := tr.guard(p.logger)
	guard.NodeCall, guard.CallerHost = rt.NodeCall, rt.CallerHost
	return tr.wrap(mux, guard), nil
}

// holder is shard n's retention service as the hold of a move.
func (p *shardRuntime) holder(n int) (backup.Holder, bool) {
	svc := p.services.get(n)
	return svc, svc != nil
}

// retention builds shard n's retention service over st: its runs hold
// coord's lease and, when fenced, write under its epoch (an ownership's;
// a replicated shard's writes carry their term instead), with the
// shard's own audit folder and attachments store.
func (p *shardRuntime) retention(ctx context.Context, n int, st *store.Store, blobs *attachments.Blobs,
	coord retention.Coordinator, fenced bool) (*retention.Manager, error) {
	rc := p.cfg.Retention
	rc.AuditPath = cluster.ShardAuditPath(p.cfg.Retention.AuditPath, n)
	shard := n
	logger := p.logger
	svc, err := newRetention(retention.RunnerOptions{Store: st, Config: rc, Logger: logger.With("shard", n),
		Metrics: p.smetrics.add(n, st), SigningKey: p.key, Coordinator: coord, Fenced: fenced, Shard: &shard, Pause: p.pause,
		Keys:     KeyStore(st),                      // a sealed shard's runs shred, and run its part of the cluster's erasures
		Blobs:    cluster.RetentionBlobs(blobs, st), // and delete the blobs their purges owe
		OnFenced: p.cmetrics.Fenced}, true)
	if err != nil {
		return nil, fmt.Errorf("shard %d: %w", n, err)
	}
	if _, err := svc.Recover(ctx); err != nil {
		logger.Error("retention_recover_failed", "shard", n, "err", err)
	}
	if err := catchUpShard(ctx, svc, n, logger); err != nil {
		svc.Close()
		return nil, err
	}
	if _, err := svc.RestoreLastSuccess(); err != nil {
		logger.Warn("retention_last_success_unknown", "shard", n, "err", err)
	}
	svc.StartScheduler(ctx)
	return svc, nil
}

// shardServices are the retention services of the shards a node holds,
// which a move adds and removes while requests read them.
type shardServices struct {
	mu     sync.Mutex
	m      map[int]*retention.Manager
	closed bool
}

func (s *shardServices) add(n int, svc *retention.Manager) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		svc.Close()
		return
	}
	s.m[n] = svc
}

func (s *shardServices) get(n int) *retention.Manager {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.m[n]
}

// service is get for the router: no service is a nil interface.
func (s *shardServices) service(n int) retention.Service {
	if svc := s.get(n); svc != nil {
		return svc
	}
	return nil
}

func (s *shardServices) remove(n int) *retention.Manager {
	s.mu.Lock()
	defer s.mu.Unlock()
	svc := s.m[n]
	delete(s.m, n)
	return svc
}

// closeAll stops every service (closing one twice does nothing).
func (s *shardServices) closeAll() {
	s.mu.Lock()
	svcs := make([]*retention.Manager, 0, len(s.m))
	for _, svc := range s.m {
		svcs = append(svcs, svc)
	}
	s.closed = true
	s.mu.Unlock()
	for _, svc := range svcs {
		svc.Close()
	}
}

// catchUpShard replays the purges shard n's audit trail records after its
// database's head, before the node answers a request (spec §10, per shard
// by §11): a shard's folder copied back by hand must not serve what was
// purged since. The replay is a retention run under the shard's ownership,
// whose epoch fences its purges: it waits until the node holds it.
func catchUpShard(ctx context.Context, svc *retention.Manager, n int, logger *slog.Logger) error {
	res, err := svc.CatchUp(ctx, true)
	if err != nil {
		return fmt.Errorf("replay the purges shard %d lacks (docs/backup.md): %w", n, err)
	}
	if res != nil {
		logger.Warn("retention_replayed_at_start", "shard", n, "run_id", res.RunID, "purged", res.Purged,
			"absent", res.Skipped, "audit_file", res.AuditFile)
	}
	return nil
}

// heldReporter reports what a running node holds on disk (ReportHeld): its
// open shards with their identities, and any other shard folder with the
// identity read at start, if any.
type heldReporter struct {
	client *clientv3.Client
	keys   cluster.Keys
	node   string
	dbPath string
	ids    map[int]string // read at start, before the shards opened
	shards *cluster.Shards
	logger *slog.Logger
	mu     sync.Mutex // one report at a time, so the last written is the newest
}

func (r *heldReporter) report(ctx context.Context) {
	r.mu.Lock()
	defer r.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, etcdDialTimeout)
	defer cancel()
	ns, err := cluster.ShardFolders(r.dbPath)
	if err != nil {
		r.logger.Error("cluster_held_report_failed", "err", err)
		return
	}
	held := make([]cluster.HeldShard, 0, len(ns))
	for _, n := range ns {
		s := cluster.HeldShard{Shard: n, DatabaseID: r.ids[n]}
		if st, ok := r.shards.Store(n); ok {
			if id, err := st.DatabaseID(ctx, false); err == nil {
				s.DatabaseID = id
			}
		}
		held = append(held, s)
	}
	if err := cluster.ReportHeld(ctx, r.client, r.keys, r.node, held); err != nil {
		r.logger.Error("cluster_held_report_failed", "err", err)
	}
}
