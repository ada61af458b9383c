package api

import (
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"strconv"
	"strings"

	"github.com/progressdb/progressdb/server/pkg/store"
)

// downloadBuffer is what a download holds besides the opener's segment.
const downloadBuffer = 32 << 10

// getAttachment streams an attachment: whole (200), or one byte range
// (206) when Range asks for one; ETag is its SHA-256, so If-None-Match
// and If-Range work. Only the bytes asked for are read from the blob
// store (a sealed one opens only the segments covering the range).
func (s *server) getAttachment(w http.ResponseWriter, r *http.Request) error {
	a, err := s.visibleAttachment(r)
	if err != nil {
		return err
	}
	if a.Unreadable {
		return fmt.Errorf("attachment %s: %w", a.ID, store.ErrUnreadable)
	}
	etag := `"` + a.SHA256 + `"`
	h := w.Header()
	h.Set("ETag", etag)
	h.Set("Accept-Ranges", "bytes")
	if matchesETag(r.Header.Get("If-None-Match"), etag) {
		w.WriteHeader(http.StatusNotModified)
		return nil
	}
	off, n, partial := int64(0), a.Size, false
	if spec := r.Header.Get("Range"); spec != "" && ifRangeHolds(r.Header.Get("If-Range"), etag) {
		var ok, satisfiable bool
		off, n, ok, satisfiable = parseRange(spec, a.Size)
		switch {
		case !satisfiable:
			h.Set("Content-Range", "bytes */"+strconv.FormatInt(a.Size, 10))
			return &httpError{http.StatusRequestedRangeNotSatisfiable, CodeRangeNotSatisfiable,
				"range " + spec + " is outside the attachment's " + strconv.FormatInt(a.Size, 10) + " bytes"}
		case ok:
			partial = true
		default: // not one range we read: the whole file, as RFC 9110 allows
			off, n = 0, a.Size
		}
	}
	rc, err := s.blobs(r).OpenRange(r.Context(), s.st(r), a, off, n)
	if err != nil {
		return err
	}
	defer rc.Close()
	// The first bytes are read before the status is sent, so that a blob
	// that does not open (altered, missing) answers a clean error.
	buf := make([]byte, min(int64(downloadBuffer), max(n, 1)))
	first, err := io.ReadFull(rc, buf[:min(int64(len(buf)), n)])
	if err != nil {
		return err
	}
	if n == 0 {
		// Nothing to read, but a sealed empty file still proves its end.
		if _, err := rc.Read(buf); err != io.EOF {
			return fmt.Errorf("attachment %s: empty file does not end: %w", a.ID, err)
		}
	}
	h.Set("Content-Type", a.ContentType)
	h.Set("X-Content-Type-Options", "nosniff")
	// Never shown inline: a file uploaded as text/html must not run as a
	// page of this origin.
	disp := "attachment"
	if a.Filename != "" {
		disp = mime.FormatMediaType("attachment", map[string]string{"filename": a.Filename})
	}
	h.Set("Content-Disposition", disp)
	h.Set("Content-Length", strconv.FormatInt(n, 10))
	status := http.StatusOK
	if partial {
		h.Set("Content-Range", "bytes "+strconv.FormatInt(off, 10)+"-"+strconv.FormatInt(off+n-1, 10)+"/"+strconv.FormatInt(a.Size, 10))
		status = http.StatusPartialContent
	}
	w.WriteHeader(status)
	if _, err := w.Write(buf[:first]); err != nil {
		return nil // the client went away
	}
	if _, err := io.CopyBuffer(w, struct{ io.Reader }{rc}, buf); err != nil {
		// Part of the file is out: break the connection so the client
		// cannot take it for the whole (Content-Length says so too).
		s.log.LogAttrs(r.Context(), slog.LevelWarn, "http_stream_aborted",
			append(requestAttrs(r), slog.Any("err", err))...)
		panic(http.ErrAbortHandler)
	}
	return nil
}

// matchesETag reports whether an If-None-Match list names etag (weak
// comparison, as RFC 9110 asks for If-None-Match).
func matchesETag(list, etag string) bool {
	for _, t := range strings.Split(list, ",") {
		t = strings.TrimPrefix(strings.TrimSpace(t), "W/")
		if t == "*" || t == etag {
			return true
		}
	}
	return false
}

// ifRangeHolds reports whether a Range applies under If-Range: no
// If-Range, or one naming the current ETag (a date is never strong
// enough for a file that has no modification time to compare).
func ifRangeHolds(ifRange, etag string) bool {
	return ifRange == "" || ifRange == etag
}

// parseRange reads a Range header for one range of a size-byte file:
// bytes=A-B, bytes=A- or bytes=-N. ok is false for anything else (several
// ranges, another unit, bad syntax): the caller sends the whole file.
// satisfiable is false when the one range lies outside the file.
func parseRange(spec string, size int64) (off, n int64, ok, satisfiable bool) {
	rest, found := strings.CutPrefix(spec, "bytes=")
	if !found || strings.Contains(rest, ",") {
		return 0, 0, false, true
	}
	first, last, found := strings.Cut(strings.TrimSpace(rest), "-")
	if !found {
		return 0, 0, false, true
	}
	if first == "" { // the last N bytes
		suffix, err := strconv.ParseInt(last, 10, 64)
		if err != nil || suffix < 0 {
			return 0, 0, false, true
		}
		if suffix == 0 || size == 0 {
			return 0, 0, false, false
		}
		suffix = min(suffix, size)
		return size - suffix, suffix, true, true
	}
	start, err := strconv.ParseInt(first, 10, 64)
	if err != nil || start < 0 {
		return 0, 0, false, true
	}
	end := size - 1
	if last != "" {
		if end, err = strconv.ParseInt(last, 10, 64); err != nil || end < start {
			return 0, 0, false, true
		}
		end = min(end, size-1)
	}
	if start >= size {
		return 0, 0, false, false
	}
	return start, end - start + 1, true, true
}
