package api

import (
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/progressdb/progressdb/server/internal/wire"
	"github.com/progressdb/progressdb/server/pkg/attachments"
	"github.com/progressdb/progressdb/server/pkg/store"
)

// Attachments (spec §16, docs/attachments.md): files attached to a
// message, streamed in and out. The bytes go through
// server/pkg/attachments; the metadata is the store's.

// maxFilenameBytes bounds the optional filename parameter.
const maxFilenameBytes = 255

// uploadIdle cuts an upload whose client sends nothing for this long. The
// server's read timeout bounds a whole request, far too short for a large
// file on a slow link; each read of the body extends it instead.
const uploadIdle = 30 * time.Second

var errNoAttachments = &httpError{http.StatusServiceUnavailable, CodeNotConfigured,
	"attachments are not configured on this server (PROGRESSDB_ATTACHMENTS_URL)"}

// The routes whose body or answer is a file, by their pattern: a cluster
// node forwards them streamed (Streamed), and an upload's reads extend
// its read deadline (idleBody).
const (
	uploadPattern   = http.MethodPost + " /v1/threads/{tid}/messages/{mid}/attachments"
	downloadPattern = http.MethodGet + " /v1/threads/{tid}/messages/{mid}/attachments/{aid}"
)

// Streamed reports whether r, as routed, streams a file in or out (an
// attachment's upload or download): a cluster node forwards it without
// holding its body, and bounds the call by silence, not by its length.
func Streamed(r *http.Request) bool {
	return r.Pattern == uploadPattern || r.Pattern == downloadPattern
}

// attachmentMetrics count what uploads stored and refused (spec §16).
type attachmentMetrics struct {
	stored  prometheus.Counter
	bytes   prometheus.Counter
	refused *prometheus.CounterVec
}

func newAttachmentMetrics(reg prometheus.Registerer) (*attachmentMetrics, error) {
	m := &attachmentMetrics{
		stored: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "progressdb_attachments_stored_total",
			Help: "Attachments stored by uploads.",
		}),
		bytes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "progressdb_attachments_stored_bytes_total",
			Help: "Bytes of the attachments stored by uploads (as uploaded, before sealing).",
		}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "progressdb_attachments_refused_total",
			Help: "Uploads refused, by reason (too_large: over PROGRESSDB_ATTACHMENT_MAX_BYTES).",
		}, []string{"reason"}),
	}
	for _, c := range []prometheus.Collector{m.stored, m.bytes, m.refused} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	m.refused.WithLabelValues("too_large") // shown at 0 from the start
	return m, nil
}

// blobs is the attachments store a handler uses: its shard's on a
// cluster node, the server's otherwise; nil when there is none.
func (s *server) blobs(r *http.Request) *attachments.Blobs { return s.shard(r).Blobs }

// attachmentsReady refuses attachment routes where they are not served.
func (s *server) attachmentsReady(r *http.Request) error {
	if s.blobs(r) == nil {
		return errNoAttachments
	}
	return nil
}

// attachmentIDs returns the validated {tid}, {mid} and {aid}.
func attachmentIDs(r *http.Request) (tid, mid, aid string, err error) {
	if tid, mid, err = threadAndMessage(r); err != nil {
		return "", "", "", err
	}
	if aid, err = pathID(r, "aid", "attachment id"); err != nil {
		return "", "", "", err
	}
	return tid, mid, aid, nil
}

func (s *server) uploadAttachment(w http.ResponseWriter, r *http.Request) error {
	tid, mid, err := threadAndMessage(r)
	if err != nil {
		return err
	}
	if err := s.attachmentsReady(r); err != nil {
		return err
	}
	ct, err := uploadContentType(r.Header.Get("Content-Type"))
	if err != nil {
		return err
	}
	name := r.URL.Query().Get("filename")
	if err := checkFilename(name); err != nil {
		return err
	}
	a, err := s.blobs(r).Upload(r.Context(), s.st(r), attachments.Upload{
		Thread: tid, Message: mid, ContentType: ct, Filename: name,
		Body:         r.Body, // an idleBody (guard)
		MaxBytes:     s.attachMax,
		DeclaredSize: r.ContentLength,
	})
	var tooLarge *attachments.TooLargeError
	switch {
	case errors.As(err, &tooLarge):
		s.attachMetrics.refused.WithLabelValues("too_large").Inc()
		return bodyTooLarge(tooLarge.Limit)
	case errors.Is(err, attachments.ErrReadBody):
		return badRequest(CodeInvalidParameter, "upload cut off: %v", err)
	case err != nil:
		return err
	}
	s.attachMetrics.stored.Inc()
	s.attachMetrics.bytes.Add(float64(a.Size))
	w.Header()["Location"] = []string{"/v1/threads/" + tid + "/messages/" + mid + "/attachments/" + a.ID}
	return s.writeJSON(w, r, http.StatusCreated, wire.AttachmentOf(a))
}

// idleBody extends the connection's read deadline before each read of an
// upload, so that an upload is cut only when its client stops sending,
// whether this node stores it or forwards it to its shard's owner.
type idleBody struct {
	io.ReadCloser
	rc *http.ResponseController
}

func (b *idleBody) Read(p []byte) (int, error) {
	_ = b.rc.SetReadDeadline(time.Now().Add(uploadIdle)) // unsupported: the server's timeout stays
	return b.ReadCloser.Read(p)
}

// withIdleBody gives an upload's request an idleBody, before it is
// stored here or forwarded.
func withIdleBody(w http.ResponseWriter, r *http.Request) {
	if r.Pattern == uploadPattern {
		r.Body = &idleBody{ReadCloser: r.Body, rc: http.NewResponseController(w)}
	}
}

// uploadContentType checks the Content-Type of an upload, the type the
// file is served back with; none is application/octet-stream.
func uploadContentType(v string) (string, error) {
	if v == "" {
		return "application/octet-stream", nil
	}
	mt, params, err := mime.ParseMediaType(v)
	if err != nil || len(v) > 255 {
		return "", badRequest(CodeInvalidParameter, "Content-Type %q is not a media type such as image/png (at most 255 bytes)", v)
	}
	return mime.FormatMediaType(mt, params), nil
}

// checkFilename refuses a filename that is too long, not UTF-8, or that
// holds a path separator or a control character: it is served back in
// Content-Disposition and shown to people.
func checkFilename(name string) error {
	switch {
	case len(name) > maxFilenameBytes:
		return badRequest(CodeInvalidParameter, "filename is %d bytes, more than the limit of %d", len(name), maxFilenameBytes)
	case !utf8.ValidString(name):
		return badRequest(CodeInvalidParameter, "filename is not valid UTF-8")
	case strings.ContainsAny(name, `/\`) || strings.IndexFunc(name, unicode.IsControl) >= 0:
		return badRequest(CodeInvalidParameter, "filename must not hold / or \\ or control characters")
	}
	return nil
}

// attachmentMessage checks that a message's attachments may be seen:
// its thread and the message are visible (deleted ones with
// include_deleted).
func (s *server) attachmentMessage(r *http.Request) (tid, mid string, inc bool, err error) {
	if tid, mid, inc, err = s.messageRead(r); err != nil {
		return "", "", false, err
	}
	m, err := s.st(r).GetMessage(r.Context(), tid, mid)
	if err != nil {
		return "", "", false, err
	}
	if m.Deleted && !inc {
		return "", "", false, messageNotFound(tid, mid)
	}
	return tid, mid, inc, nil
}

func (s *server) listAttachments(w http.ResponseWriter, r *http.Request) error {
	if _, _, err := threadAndMessage(r); err != nil {
		return err
	}
	if err := s.attachmentsReady(r); err != nil {
		return err
	}
	tid, mid, inc, err := s.attachmentMessage(r)
	if err != nil {
		return err
	}
	list, err := s.st(r).ListAttachments(r.Context(), tid, mid, inc)
	if err != nil {
		return err
	}
	return s.writeJSON(w, r, http.StatusOK, struct {
		Attachments []wire.Attachment `json:"attachments"`
	}{wire.Attachments(list)})
}

func (s *server) deleteAttachment(w http.ResponseWriter, r *http.Request) error {
	tid, mid, aid, err := attachmentIDs(r)
	if err != nil {
		return err
	}
	if err := s.attachmentsReady(r); err != nil {
		return err
	}
	if _, err := s.st(r).DeleteAttachment(r.Context(), tid, mid, aid); err != nil {
		return err
	}
	return noContent(w)
}

func (s *server) restoreAttachment(w http.ResponseWriter, r *http.Request) error {
	tid, mid, aid, err := attachmentIDs(r)
	if err != nil {
		return err
	}
	if err := s.attachmentsReady(r); err != nil {
		return err
	}
	a, err := s.st(r).RestoreAttachment(r.Context(), tid, mid, aid)
	if err != nil {
		return err
	}
	return s.writeJSON(w, r, http.StatusOK, wire.AttachmentOf(a))
}

// visibleAttachment returns attachment {aid} when it may be seen: its
// thread, message and itself visible (deleted ones with include_deleted).
func (s *server) visibleAttachment(r *http.Request) (store.Attachment, error) {
	if _, _, _, err := attachmentIDs(r); err != nil {
		return store.Attachment{}, err
	}
	if err := s.attachmentsReady(r); err != nil {
		return store.Attachment{}, err
	}
	tid, mid, inc, err := s.attachmentMessage(r)
	if err != nil {
		return store.Attachment{}, err
	}
	aid := r.PathValue("aid")
	a, err := s.st(r).GetAttachment(r.Context(), tid, mid, aid)
	if err != nil {
		return store.Attachment{}, err
	}
	if a.Deleted && !inc {
		return store.Attachment{}, attachmentNotFound(mid, aid)
	}
	return a, nil
}

func attachmentNotFound(mid, aid string) error {
	return fmt.Errorf("attachment %s of message %s: %w", aid, mid, store.ErrNotFound)
}
