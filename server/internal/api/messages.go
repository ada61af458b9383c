package api

import (
	"bufio"
	"encoding/json"
	"log/slog"
	"net/http"

	"github.com/progressdb/progressdb/server/internal/wire"
	"github.com/progressdb/progressdb/server/pkg/store"
)

type versionList struct {
	Versions   []wire.Message `json:"versions"`
	NextCursor string         `json:"next_cursor"`
}

// threadAndMessage returns the validated {tid} and {mid} path IDs.
func threadAndMessage(r *http.Request) (tid, mid string, err error) {
	if tid, err = pathID(r, "tid", "thread id"); err != nil {
		return "", "", err
	}
	if mid, err = pathID(r, "mid", "message id"); err != nil {
		return "", "", err
	}
	return tid, mid, nil
}

// checkBody refuses a missing message body and one that is not I-JSON:
// every reader of the thread gets the body back, and the answers must be
// I-JSON (spec §2).
func checkBody(body json.RawMessage) error {
	if len(body) == 0 {
		return badRequest(CodeInvalidField, "body is required")
	}
	if err := wire.CheckIJSON(body); err != nil {
		return badRequest(CodeInvalidField, "body: %v", err)
	}
	return nil
}

func (s *server) appendMessage(w http.ResponseWriter, r *http.Request) error {
	tid, err := pathID(r, "tid", "thread id")
	if err != nil {
		return err
	}
	var req appendRequest
	if err := s.decodeAppend(w, r, &req); err != nil {
		return err
	}
	if err := bodyID(req.ID, "message id"); err != nil {
		return err
	}
	if err := textField("author", req.Author, maxAuthorBytes); err != nil {
		return err
	}
	if err := checkBody(req.Body); err != nil {
		return err
	}
	m, err := s.st(r).AppendMessage(r.Context(), tid, store.Message{ID: req.ID, Author: req.Author, Body: req.Body})
	if err != nil {
		return err
	}
	w.Header()["Location"] = []string{"/v1/threads/" + tid + "/messages/" + m.ID} // canonical key
	return s.writeMessage(w, r, http.StatusCreated, m)
}

func (s *server) listMessages(w http.ResponseWriter, r *http.Request) error {
	tid, err := pathID(r, "tid", "thread id")
	if err != nil {
		return err
	}
	o, err := listOptions(r)
	if err != nil {
		return err
	}
	if _, err := s.visibleThread(r, tid, o.IncludeDeleted); err != nil {
		return err
	}
	msgs, next, err := s.st(r).ListMessages(r.Context(), tid, o)
	if err != nil {
		return err
	}
	// {"messages":[...],"next_cursor":"..."}, encoded by hand (wire.AppendMessages).
	b := make([]byte, 0, 64+len(msgs)*256)
	b = append(b, `{"messages":`...)
	b, err = wire.AppendMessages(b, msgs)
	if err == nil {
		b = append(b, `,"next_cursor":`...)
		b = append(wire.AppendString(b, next), '}')
	}
	return s.writeEncoded(w, r, http.StatusOK, b, err)
}

// messageRead reads the IDs and include_deleted of a request for one
// message and checks that its thread may be seen.
func (s *server) messageRead(r *http.Request) (tid, mid string, inc bool, err error) {
	if tid, mid, err = threadAndMessage(r); err != nil {
		return "", "", false, err
	}
	if inc, err = boolParam(r, "include_deleted", false); err != nil {
		return "", "", false, err
	}
	if _, err = s.visibleThread(r, tid, inc); err != nil {
		return "", "", false, err
	}
	return tid, mid, inc, nil
}

func (s *server) getMessage(w http.ResponseWriter, r *http.Request) error {
	tid, mid, inc, err := s.messageRead(r)
	if err != nil {
		return err
	}
	m, err := s.st(r).GetMessage(r.Context(), tid, mid)
	if err != nil {
		return err
	}
	if m.Deleted && !inc {
		return messageNotFound(tid, mid)
	}
	return s.writeMessage(w, r, http.StatusOK, m)
}

func (s *server) editMessage(w http.ResponseWriter, r *http.Request) error {
	tid, mid, err := threadAndMessage(r)
	if err != nil {
		return err
	}
	var req struct {
		Body json.RawMessage `json:"body"`
	}
	if err := s.decodeBody(w, r, &req, false); err != nil {
		return err
	}
	if err := checkBody(req.Body); err != nil {
		return err
	}
	// Like appending, editing needs a live thread.
	if _, err := s.visibleThread(r, tid, false); err != nil {
		return err
	}
	m, err := s.st(r).EditMessage(r.Context(), tid, mid, req.Body)
	if err != nil {
		return err
	}
	return s.writeMessage(w, r, http.StatusOK, m)
}

func (s *server) deleteMessage(w http.ResponseWriter, r *http.Request) error {
	tid, mid, err := threadAndMessage(r)
	if err != nil {
		return err
	}
	if _, err := s.st(r).DeleteMessage(r.Context(), tid, mid); err != nil {
		return err
	}
	return noContent(w)
}

func (s *server) restoreMessage(w http.ResponseWriter, r *http.Request) error {
	tid, mid, err := threadAndMessage(r)
	if err != nil {
		return err
	}
	m, err := s.st(r).RestoreMessage(r.Context(), tid, mid)
	if err != nil {
		return err
	}
	return s.writeMessage(w, r, http.StatusOK, m)
}

// listVersions answers GET .../versions?limit=&cursor=, a page of the
// message's versions, oldest first: {versions, next_cursor}. The page is
// streamed one version at a time, so a request holds about one version in
// memory however large the page: the whole list built at once took a
// server with a few large, often edited messages to gigabytes.
func (s *server) listVersions(w http.ResponseWriter, r *http.Request) error {
	tid, mid, _, err := s.messageRead(r)
	if err != nil {
		return err
	}
	o, err := listOptions(r)
	if err != nil {
		return err
	}
	var (
		out *bufio.Writer
		b   []byte
	)
	next, err := s.st(r).ScanVersions(r.Context(), tid, mid, o, func(m store.Message) error {
		var err error
		if b, err = wire.AppendMessage(b[:0], m); err != nil {
			return err
		}
		if out == nil {
			setJSONHeaders(w.Header())
			w.WriteHeader(http.StatusOK)
			out = bufio.NewWriterSize(w, 32<<10)
			_, _ = out.WriteString(`{"versions":[`)
		} else {
			_ = out.WriteByte(',')
		}
		_, err = out.Write(b)
		return err // the client went away: stop reading
	})
	switch {
	case err != nil && out == nil:
		return err // nothing sent yet: a clean error answer
	case err != nil:
		// Part of the page is out: break the connection so the client
		// cannot take it for a complete answer.
		s.log.LogAttrs(r.Context(), slog.LevelWarn, "http_stream_aborted",
			append(requestAttrs(r), slog.Any("err", err))...)
		panic(http.ErrAbortHandler)
	case out == nil:
		// A page after the last version (an old cursor): empty, not 404,
		// since the message has versions (ScanVersions checked).
		return s.writeJSON(w, r, http.StatusOK, versionList{Versions: []wire.Message{}})
	}
	tail, _ := json.Marshal(next)
	_, _ = out.WriteString(`],"next_cursor":`)
	_, _ = out.Write(tail)
	_, _ = out.WriteString("}\n")
	_ = out.Flush() // a failed write means the client went away
	return nil
}
