package api

import (
	"net/http"
	"path/filepath"

	"github.com/progressdb/progressdb/server/pkg/store"
)

// HeaderDatabaseID names, on an admin answer served from one database, the
// identity (database_id) of that database: the server's on a single node,
// the thread's shard's in a cluster (set by the shard's owner, relayed by
// the node that forwarded). Commands name with it the database they acted
// on (spec §10.1).
const HeaderDatabaseID = "X-Progressdb-Database-Id"

// Database is the answer of GET /admin/database.
type Database struct {
	DatabaseID string `json:"database_id"`
	Path       string `json:"path"` // the folder, absolute
	// Format is the database's format (docs/upgrading.md), Sealed whether
	// it is sealed (spec §12).
	Format int  `json:"format"`
	Sealed bool `json:"sealed"`
	// OriginID is, for a restored copy, the database it was restored
	// from (spec §10.1).
	OriginID string `json:"origin_id,omitempty"`
	// Threads, asked for with ?threads=true, counts the threads by whether
	// their record is sealed (spec §12): its cost follows the number of
	// threads, which the identity check every command makes must not pay.
	Threads *store.ThreadCounts `json:"threads,omitempty"`
}

var errDatabasePerShard = &httpError{http.StatusNotFound, CodeClusterNode,
	"a cluster node serves one database per shard, not one: GET /admin/cluster lists them; " +
		"a thread's admin answers name its shard's database in " + HeaderDatabaseID}

// database answers GET /admin/database: the identity and folder of the
// database this server serves, so that a command that found the folder it
// means held by a running process can tell whether this server is that
// process before acting through it.
func (s *server) database(w http.ResponseWriter, r *http.Request) error {
	if s.cluster != nil {
		return errDatabasePerShard
	}
	id, err := s.store.DatabaseID(r.Context(), false)
	if err != nil {
		return err
	}
	path, err := filepath.Abs(s.store.Path())
	if err != nil {
		path = s.store.Path()
	}
	d := Database{DatabaseID: id, Path: path}
	f, err := s.store.Format(r.Context())
	if err != nil {
		return err
	}
	seal, err := s.store.SealInfo(r.Context())
	if err != nil {
		return err
	}
	d.Format, d.Sealed = int(f), seal.Sealed
	l, copied, err := s.store.Lineage(r.Context())
	if err != nil {
		return err
	}
	if copied {
		d.OriginID = l.OriginID
	}
	count, err := boolParam(r, "threads", false)
	if err != nil {
		return err
	}
	if count {
		c, err := s.store.CountThreads(r.Context(), "")
		if err != nil {
			return err
		}
		d.Threads = &c
	}
	return s.writeJSON(w, r, http.StatusOK, d)
}

// nameDatabase sets HeaderDatabaseID on an admin answer served from one
// database. An identity that cannot be read leaves the header out: the
// answer itself is what was asked for.
func (s *server) nameDatabase(w http.ResponseWriter, r *http.Request) {
	st := s.st(r)
	if st == nil {
		return // a cluster route over every shard
	}
	if id, err := st.DatabaseID(r.Context(), false); err == nil && id != "" {
		w.Header().Set(HeaderDatabaseID, id)
	}
}
