package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"github.com/progressdb/progressdb/server/internal/app"
	"io"
	"log/slog"
	"net/http"
	"strings"

	"github.com/progressdb/progressdb/server/internal/api"
	"github.com/progressdb/progressdb/server/pkg/config"
	"github.com/progressdb/progressdb/server/pkg/store"
)

// Which database a command acts on is never a guess (spec §10.1), and
// every command that acts on one finds it here (openTarget):
//
//   - with --server URL (or PROGRESSDB_SERVER) it acts through that
//     server's admin API and opens nothing here;
//   - in a cluster node's environment (PROGRESSDB_CLUSTER_ETCD), through
//     the node at PROGRESSDB_ADDR, which serves a thread's request on the
//     node that owns its shard (PROGRESSDB_DB_PATH holds shards there);
//   - otherwise it opens PROGRESSDB_DB_PATH; when a running process holds
//     that folder, it acts through the server at PROGRESSDB_ADDR once that
//     server has said it serves the identity the folder records
//     (store.IdentityFile), and refuses otherwise.
//
// The output names the database acted on (database).

// serverFlag adds --server to a command's flags.
func serverFlag(fs *flag.FlagSet) *string {
	return fs.String("server", "", "act through the admin API of the server at URL (default PROGRESSDB_SERVER), opening no local folder")
}

// errNotTheServer: the folder the command means is held by a process,
// and the server at PROGRESSDB_ADDR could not be asked (no admin token,
// one it refused, no answer) or serves another database.
var errNotTheServer = errors.New("the database is open in a running process that this command cannot act through")

// database names the database a command acted on, in its output.
type database struct {
	ID     string `json:"database_id"`      // "" when unknown (every shard, or no identity yet)
	Path   string `json:"path,omitempty"`   // its folder, as the command or the server names it
	Server string `json:"server,omitempty"` // the admin API the command went through
	Node   bool   `json:"cluster_node,omitempty"`
	Shard  *int   `json:"shard,omitempty"`
}

func (d database) String() string {
	var b strings.Builder
	switch {
	case d.ID != "":
		b.WriteString(d.ID)
	case d.Node && d.Shard == nil:
		b.WriteString("every shard")
	default:
		b.WriteString("(no identity yet: it gets one at its first retention run)")
	}
	if d.Shard != nil {
		fmt.Fprintf(&b, " (shard %d)", *d.Shard)
	}
	if d.Path != "" {
		b.WriteString(" at " + d.Path)
	}
	switch {
	case d.Server != "" && d.Node:
		b.WriteString(", through the cluster node at " + d.Server)
	case d.Server != "":
		b.WriteString(", through the server at " + d.Server)
	}
	return b.String()
}

func printDatabase(w io.Writer, d database) {
	fmt.Fprintf(w, "database:        %s\n", d)
}

// dbTarget is where a command acts: a database opened here (st), or a
// server's admin API (c).
type dbTarget struct {
	db database
	st *store.Store
	c  *adminClient
}

// acted returns the database the command acted on: for a server, the
// one its last answer named when the target did not know it beforehand.
func (t *dbTarget) acted() database {
	d := t.db
	if d.ID == "" && t.c != nil && t.c.named != nil && (!d.Node || d.Shard != nil || *t.c.named != "") {
		d.ID = *t.c.named
	}
	return d
}

// close closes a database opened here.
func (t *dbTarget) close() error {
	if t.st == nil {
		return nil
	}
	return t.st.Close()
}

// serverOf is the server a command was told to act through: --server,
// else PROGRESSDB_SERVER; "" for none. A URL that is not one is a usage
// error naming the flag.
func (e env) serverOf(name, flagValue string, cfg config.Config) (string, bool) {
	if flagValue == "" {
		return cfg.Server, true
	}
	if err := config.ValidateServerURL(flagValue); err != nil {
		fmt.Fprintf(e.stderr, "progressdb %s: --server %q %v\n", name, flagValue, err)
		fmt.Fprintf(e.stderr, "Run 'progressdb %s --help' for its flags and arguments.\n", name)
		return "", false
	}
	return flagValue, true
}

// openTarget finds the database a command acts on (see the top of this
// file); the caller closes it. Errors: store.ErrNoDatabase and the
// store's other open errors; errNotTheServer when the folder is held by
// a process the command cannot act through.
func (e env) openTarget(ctx context.Context, cfg config.Config, logger *slog.Logger, server string) (*dbTarget, error) {
	if server != "" {
		c, err := serverClient(server, cfg)
		if err != nil {
			return nil, fmt.Errorf("the server at %s: %w", server, err)
		}
		return remoteTarget(ctx, c, database{Server: c.base})
	}
	if cfg.Cluster.Enabled() {
		c, err := newAdminClient(cfg)
		if err != nil {
			return nil, fmt.Errorf("a cluster's databases are its shards, reached through a node's admin API: %w", err)
		}
		return &dbTarget{db: database{Server: c.base, Node: true}, c: c}, nil
	}
	st, err := openStore(cfg, logger, mustExist, app.KeepPlain)
	switch {
	case errors.Is(err, store.ErrNoDatabase):
		return nil, fmt.Errorf("%w (to act through a server instead, name it with --server URL or %s)", err, config.VarServer)
	case errors.Is(err, store.ErrDatabaseLocked):
		return heldTarget(ctx, cfg)
	case err != nil:
		return nil, err
	}
	id, err := st.DatabaseID(ctx, false)
	if err != nil {
		return nil, errors.Join(err, st.Close())
	}
	return &dbTarget{db: database{ID: id, Path: cfg.DBPath}, st: st}, nil
}

// remoteTarget asks the server at c which database it serves: one (its
// identity and folder), or one per shard (a cluster node).
func remoteTarget(ctx context.Context, c *adminClient, d database) (*dbTarget, error) {
	var served api.Database
	err := c.do(ctx, http.MethodGet, "/admin/database", nil, &served)
	var ae *adminError
	switch {
	case errors.As(err, &ae) && ae.Code == api.CodeClusterNode:
		d.Node = true
	case err != nil:
		return nil, fmt.Errorf("ask the server at %s which database it serves: %w", c.base, err)
	default:
		d.ID, d.Path = served.DatabaseID, served.Path
	}
	return &dbTarget{db: d, c: c}, nil
}

// heldTarget is the database at PROGRESSDB_DB_PATH, which a running
// process holds: the server at PROGRESSDB_ADDR when it says it serves the
// identity the folder records.
func heldTarget(ctx context.Context, cfg config.Config) (*dbTarget, error) {
	held := fmt.Sprintf("the database at %s is open in a running process", cfg.DBPath)
	hint := fmt.Sprintf("name the server holding it with --server URL (or %s)", config.VarServer)
	c, err := newAdminClient(cfg)
	if err != nil {
		return nil, fmt.Errorf("%w: %s; %w to act through the server at %s, or %s", errNotTheServer, held, err, config.VarAddr, hint)
	}
	folder, err := store.FolderDatabaseID(cfg.DBPath)
	if err != nil {
		return nil, err
	}
	t, err := remoteTarget(ctx, c, database{Path: cfg.DBPath, Server: c.base})
	var ae *adminError
	if errors.As(err, &ae) {
		// The server answered, refusing: which database it serves is
		// not known, and the answer says what to set.
		return nil, fmt.Errorf("%w (%s): the server at %s (%s), asked which database it serves, answered %d: %s",
			errNotTheServer, cfg.DBPath, c.base, config.VarAddr, ae.Status, ae.Msg)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %s; %v; %s", errNotTheServer, held, err, hint)
	}
	switch {
	case folder == "":
		return nil, fmt.Errorf("%w: %s, and the folder does not record its identity, so the server at %s (%s) cannot be told to be that process; %s",
			errNotTheServer, held, c.base, config.VarAddr, hint)
	case t.db.Node || t.db.ID != folder:
		served := "one database per shard (a cluster node)"
		if !t.db.Node {
			served = fmt.Sprintf("database %s at %s", t.db.ID, t.db.Path)
		}
		return nil, fmt.Errorf("%w: %s (database_id %s), but the server at %s (%s) serves %s: set %s to the address of the server holding %s, or %s",
			errNotTheServer, held, folder, c.base, config.VarAddr, served, config.VarAddr, cfg.DBPath, hint)
	}
	t.db.Path = cfg.DBPath
	return t, nil
}

// onDatabase runs local on the database when the command opened it, and
// remote through the server's admin API otherwise (openTarget), and
// returns the database it acted on. Errors are printed, naming the
// command.
func (e env) onDatabase(ctx context.Context, cfg config.Config, logger *slog.Logger, name, server string,
	local func(st *store.Store) error, remote func(c *adminClient) error) (database, int) {
	t, err := e.openTarget(ctx, cfg, logger, server)
	if err == nil {
		if t.st != nil {
			err = local(t.st)
		} else {
			err = remote(t.c)
		}
		err = errors.Join(err, t.close())
	}
	if err != nil {
		fmt.Fprintf(e.stderr, "progressdb %s: %v\n", name, err)
		return database{}, openExit(err)
	}
	return t.acted(), exitOK
}
