package api

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/progressdb/progressdb/server/internal/retention"
)

var (
	// errSealingDisabled: subject erasure destroys keys; without sealing
	// there are none, and finding an author's writing would read the
	// whole database (spec §12).
	errSealingDisabled = &httpError{http.StatusConflict, CodeSealingDisabled,
		"subject erasure needs sealing: set PROGRESSDB_KEK and PROGRESSDB_KEYSTORE_PATH"}
)

// erasureService picks the erasure service of request r, or the error
// that says why there is none. On a cluster node it is the cluster's
// (spec §11.1).
func (s *server) erasureService(r *http.Request) (retention.Erasures, error) {
	switch {
	case s.cluster != nil:
		es, err := s.cluster.Erasures(r)
		if err == nil && es == nil {
			err = errSealingDisabled
		}
		return es, err
	case s.retention == nil:
		return nil, errNoRetention
	case s.erasures == nil:
		return nil, errSealingDisabled
	}
	return s.erasures, nil
}

// erasureOf is the erasure service and the erasure ID of a request to
// /admin/erasures/{id}…
func (s *server) erasureOf(r *http.Request) (retention.Erasures, string, error) {
	id, err := pathID(r, "id", "erasure id")
	if err != nil {
		return nil, "", err
	}
	es, err := s.erasureService(r)
	return es, id, err
}

// requestErasure answers POST /admin/erasures {author}: 202 once the
// erasure's run has started.
func (s *server) requestErasure(w http.ResponseWriter, r *http.Request) error {
	es, err := s.erasureService(r)
	if err != nil {
		return err
	}
	var req struct {
		Author string `json:"author"`
	}
	if err := s.decodeBody(w, r, &req, false); err != nil {
		return err
	}
	if err := textField("author", req.Author, maxAuthorBytes); err != nil {
		return err
	}
	acc, err := es.Request(r.Context(), req.Author)
	if err != nil {
		return err
	}
	// The author is never logged: the erasure's ID is what names it.
	s.log.InfoContext(r.Context(), "erasure_requested", "erasure_id", acc.ErasureID, "run_id", acc.RunID)
	return s.writeJSON(w, r, http.StatusAccepted, acc)
}

// erasure answers GET /admin/erasures/{id}.
func (s *server) erasure(w http.ResponseWriter, r *http.Request) error {
	es, id, err := s.erasureOf(r)
	if err != nil {
		return err
	}
	st, err := es.Erasure(r.Context(), id)
	if err != nil {
		return err
	}
	return s.writeJSON(w, r, http.StatusOK, st)
}

// erasureReceipt answers GET /admin/erasures/{id}/receipt.
func (s *server) erasureReceipt(w http.ResponseWriter, r *http.Request) error {
	es, id, err := s.erasureOf(r)
	if err != nil {
		return err
	}
	rc, err := es.Receipt(r.Context(), id)
	if errors.Is(err, retention.ErrErasureIncomplete) {
		return &httpError{http.StatusConflict, CodeErasureIncomplete, fmt.Sprintf("erasure %s: %v", id, err)}
	}
	if errors.Is(err, retention.ErrReceiptUnsigned) {
		return &httpError{http.StatusConflict, CodeReceiptUnsigned, err.Error()}
	}
	if err != nil {
		return err
	}
	return s.writeJSON(w, r, http.StatusOK, rc)
}
