package api

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strings"

	"github.com/progressdb/progressdb/server/internal/wire"
	"github.com/progressdb/progressdb/server/pkg/store"
)

type threadList struct {
	Threads    []wire.Thread `json:"threads"`
	NextCursor string        `json:"next_cursor"`
}

func (s *server) createThread(w http.ResponseWriter, r *http.Request) error {
	var req struct {
		ID     string `json:"id"`
		Title  string `json:"title"`
		Author string `json:"author"`
	}
	if err := s.decodeBody(w, r, &req, false); err != nil {
		return err
	}
	if err := bodyID(req.ID, "thread id"); err != nil {
		return err
	}
	if err := textField("title", req.Title, maxTitleBytes); err != nil {
		return err
	}
	if err := textField("author", req.Author, maxAuthorBytes); err != nil {
		return err
	}
	if s.cluster != nil {
		// The ID decides the shard: pick it here, then serve or forward.
		// A keyed request's ID comes from its key, so that a retry
		// reaches the same shard with the same body.
		if req.ID == "" {
			req.ID = s.ids.Next()
			if k, ok := r.Header["Idempotency-Key"]; ok {
				req.ID = "k" + digest("thread", callerScope(r), strings.Join(k, ","))[:31]
			}
		}
		body, err := json.Marshal(req)
		if err != nil {
			return err
		}
		r.Body, r.ContentLength = io.NopCloser(bytes.NewReader(body)), int64(len(body))
		routed, sh, answered, err := s.cluster.Thread(w, r, req.ID)
		if err != nil || answered {
			return err
		}
		r = withShard(routed, sh)
		if st := s.keyedStore(r); st != nil {
			return s.serveKeyed(w, r, st, func(w http.ResponseWriter, r *http.Request) error {
				return s.storeThread(w, r, req.ID, req.Title, req.Author)
			})
		}
	}
	return s.storeThread(w, r, req.ID, req.Title, req.Author)
}

// storeThread creates the thread a request asked for and answers it.
func (s *server) storeThread(w http.ResponseWriter, r *http.Request, id, title, author string) error {
	t, err := s.st(r).CreateThread(r.Context(), store.Thread{ID: id, Title: title, Author: author})
	if err != nil {
		return err
	}
	w.Header().Set("Location", "/v1/threads/"+t.ID)
	return s.writeJSON(w, r, http.StatusCreated, wire.ThreadOf(t))
}

// threadTitle is the body of PATCH /v1/threads/{tid}.
type threadTitle struct {
	Title string `json:"title"`
}

// editThread answers PATCH /v1/threads/{tid} {title}: a live thread's new
// title, checked as at creation.
func (s *server) editThread(w http.ResponseWriter, r *http.Request) error {
	tid, err := pathID(r, "tid", "thread id")
	if err != nil {
		return err
	}
	var req threadTitle
	if err := s.decodeBody(w, r, &req, false); err != nil {
		return err
	}
	if err := textField("title", req.Title, maxTitleBytes); err != nil {
		return err
	}
	t, err := s.st(r).SetTitle(r.Context(), tid, req.Title)
	if err != nil {
		return err
	}
	return s.writeJSON(w, r, http.StatusOK, wire.ThreadOf(t))
}

func (s *server) listThreads(w http.ResponseWriter, r *http.Request) error {
	o, err := listOptions(r)
	if err != nil {
		return err
	}
	list := func(r *http.Request, o store.ListOptions) ([]wire.Thread, string, error) {
		ts, next, err := s.store.ListThreads(r.Context(), o)
		return wire.Threads(ts), next, err
	}
	if s.cluster != nil {
		list = s.cluster.ListThreads
	}
	threads, next, err := list(r, o)
	if err != nil {
		return err
	}
	return s.writeJSON(w, r, http.StatusOK, threadList{Threads: threads, NextCursor: next})
}

func (s *server) getThread(w http.ResponseWriter, r *http.Request) error {
	tid, err := pathID(r, "tid", "thread id")
	if err != nil {
		return err
	}
	inc, err := boolParam(r, "include_deleted", false)
	if err != nil {
		return err
	}
	t, err := s.visibleThread(r, tid, inc)
	if err != nil {
		return err
	}
	return s.writeJSON(w, r, http.StatusOK, wire.ThreadOf(t))
}

func (s *server) deleteThread(w http.ResponseWriter, r *http.Request) error {
	tid, err := pathID(r, "tid", "thread id")
	if err != nil {
		return err
	}
	if _, err := s.st(r).DeleteThread(r.Context(), tid); err != nil {
		return err
	}
	return noContent(w)
}

func (s *server) restoreThread(w http.ResponseWriter, r *http.Request) error {
	tid, err := pathID(r, "tid", "thread id")
	if err != nil {
		return err
	}
	t, err := s.st(r).RestoreThread(r.Context(), tid)
	if err != nil {
		return err
	}
	return s.writeJSON(w, r, http.StatusOK, wire.ThreadOf(t))
}

// visibleThread returns the thread unless it is absent or soft-deleted; a
// soft-deleted thread, and everything in it, shows only with
// include_deleted.
func (s *server) visibleThread(r *http.Request, tid string, includeDeleted bool) (store.Thread, error) {
	t, err := s.st(r).GetThread(r.Context(), tid)
	if err != nil {
		return store.Thread{}, err
	}
	if t.Deleted && !includeDeleted {
		return store.Thread{}, threadNotFound(tid)
	}
	return t, nil
}
