package api

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/progressdb/progressdb/server/internal/wire"
	"github.com/progressdb/progressdb/server/pkg/attachments"
	"github.com/progressdb/progressdb/server/pkg/keystore"
	"github.com/progressdb/progressdb/server/pkg/sealstream"
	"github.com/progressdb/progressdb/server/pkg/store"
)

// attachEnv is a server with attachments in a file:// folder, over a
// sealed store (with its key store) when sealed.
type attachEnv struct {
	*testEnv
	dir  string // the blob folder
	keys *keystore.KeyStore
}

func newAttachEnv(t *testing.T, sealed bool, max int64) *attachEnv {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "files")
	ae := attachEnvOn(t, "file://"+filepath.ToSlash(dir), sealed, max)
	ae.dir = dir
	return ae
}

// attachEnvOn serves attachments kept at url (a blob store URL), over a
// sealed store when sealed, with a thread t1 and its message m1.
func attachEnvOn(t *testing.T, url string, sealed bool, max int64) *attachEnv {
	t.Helper()
	blobs, err := attachments.Open(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = blobs.Close() })
	ae := &attachEnv{}
	opts := Options{Attachments: blobs, AttachmentMaxBytes: max}
	if sealed {
		opts.Store, ae.keys = openSealedStore(t, t.TempDir())
	}
	ae.testEnv = newEnv(t, opts)
	ae.expect(t, "POST", "/v1/threads", `{"id":"t1","title":"Plans","author":"ann"}`, 201)
	ae.expect(t, "POST", "/v1/threads/t1/messages", `{"id":"m1","author":"bob","body":"see attached"}`, 201)
	return ae
}

// do sends body with headers and checks the answer against the
// description, as send does.
func (e *testEnv) do(t *testing.T, method, path string, body []byte, hdr http.Header) response {
	t.Helper()
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequest(method, e.srv.URL+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header[k] = v
	}
	res, err := e.srv.Client().Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatalf("%s %s: read body: %v", method, path, err)
	}
	r := response{status: res.StatusCode, header: res.Header, body: b}
	checkAnswer(t, e.seen, req, body, r)
	return r
}

func (e *testEnv) upload(t *testing.T, mid string, data []byte, query string, want int) wire.Attachment {
	t.Helper()
	r := e.do(t, "POST", "/v1/threads/t1/messages/"+mid+"/attachments"+query, data, http.Header{"Content-Type": {"image/png"}})
	if r.status != want {
		t.Fatalf("upload of %d bytes: %d, want %d; %s", len(data), r.status, want, clip(r.body))
	}
	var a wire.Attachment
	if want == http.StatusCreated {
		r.decode(t, &a)
	}
	return a
}

func attachmentPath(a wire.Attachment) string {
	return "/v1/threads/" + a.Thread + "/messages/" + a.Message + "/attachments/" + a.AttachmentID
}

// marked is n bytes of a repeated marker text, so that a copy in clear
// is found by searching for the marker.
func marked(n int) []byte {
	return bytes.Repeat([]byte("attachment-marker-7Qz "), n/22+1)[:n]
}

// TestAttachmentRoundTrips uploads files at segment boundaries and reads
// them back whole and by ranges, byte for byte, plain and sealed; sealed,
// no file of the blob folder holds their bytes in clear.
func TestAttachmentRoundTrips(t *testing.T) {
	for _, sealed := range []bool{true, false} {
		t.Run(map[bool]string{false: "plain", true: "sealed"}[sealed], func(t *testing.T) {
			e := newAttachEnv(t, sealed, 1<<20)
			S := sealstream.SegmentSize
			for _, size := range []int{0, 1, S - 1, S, S + 1, 3*S + 7} {
				data := marked(size)
				a := e.upload(t, "m1", data, "?filename="+url.QueryEscape("plan é.png"), 201)
				sum := sha256.Sum256(data)
				if a.Size != int64(size) || a.SHA256 == nil || *a.SHA256 != hex.EncodeToString(sum[:]) ||
					a.ContentType == nil || *a.ContentType != "image/png" || a.Filename == nil || *a.Filename != "plan é.png" {
					t.Fatalf("upload of %d bytes answered %+v", size, a)
				}
				full := e.do(t, "GET", attachmentPath(a), nil, nil)
				if full.status != 200 || !bytes.Equal(full.body, data) || full.header.Get("ETag") != `"`+*a.SHA256+`"` ||
					full.header.Get("Content-Type") != "image/png" || !strings.HasPrefix(full.header.Get("Content-Disposition"), "attachment") {
					t.Fatalf("download of %d bytes: %d, %d bytes, headers %v", size, full.status, len(full.body), full.header)
				}
				if size == 0 {
					continue
				}
				for _, rg := range []struct {
					spec     string
					off, end int // end exclusive
				}{
					{"bytes=0-0", 0, 1},
					{fmt.Sprintf("bytes=%d-", size/2), size / 2, size},
					{"bytes=-1", size - 1, size},
					{fmt.Sprintf("bytes=%d-%d", max(0, S-2), min(size-1, S+1)), max(0, S-2), min(size, S+2)},
					{fmt.Sprintf("bytes=1-%d", size+100), min(1, size), size},
				} {
					if rg.off >= size {
						continue
					}
					r := e.do(t, "GET", attachmentPath(a), nil, http.Header{"Range": {rg.spec}})
					want := fmt.Sprintf("bytes %d-%d/%d", rg.off, rg.end-1, size)
					if r.status != 206 || !bytes.Equal(r.body, data[rg.off:rg.end]) || r.header.Get("Content-Range") != want {
						t.Fatalf("%d bytes, %s: %d, %d bytes, Content-Range %q want %q", size, rg.spec, r.status, len(r.body), r.header.Get("Content-Range"), want)
					}
				}
				if r := e.do(t, "GET", attachmentPath(a), nil, http.Header{"Range": {fmt.Sprintf("bytes=%d-", size)}}); r.status != 416 ||
					r.header.Get("Content-Range") != fmt.Sprintf("bytes */%d", size) || r.errorCode(t) != CodeRangeNotSatisfiable {
					t.Fatalf("range past the end: %d %v %s", r.status, r.header, r.body)
				}
				// Several ranges, or an If-Range naming another version:
				// the whole file.
				if r := e.do(t, "GET", attachmentPath(a), nil, http.Header{"Range": {"bytes=0-0,2-3"}}); r.status != 200 || !bytes.Equal(r.body, data) {
					t.Fatalf("several ranges: %d, %d bytes", r.status, len(r.body))
				}
				if r := e.do(t, "GET", attachmentPath(a), nil, http.Header{"Range": {"bytes=0-0"}, "If-Range": {`"other"`}}); r.status != 200 || !bytes.Equal(r.body, data) {
					t.Fatalf("If-Range of another ETag: %d, %d bytes", r.status, len(r.body))
				}
				if r := e.do(t, "GET", attachmentPath(a), nil, http.Header{"If-None-Match": {`"` + *a.SHA256 + `"`}}); r.status != 304 || len(r.body) != 0 {
					t.Fatalf("If-None-Match: %d", r.status)
				}
			}
			var list struct {
				Attachments []wire.Attachment `json:"attachments"`
			}
			e.expect(t, "GET", "/v1/threads/t1/messages/m1/attachments", "", 200).decode(t, &list)
			if len(list.Attachments) != 6 {
				t.Fatalf("listing has %d attachments, want 6", len(list.Attachments))
			}
			if sealed {
				if hits := filesHolding(t, e.dir, []byte("attachment-marker-7Qz")); len(hits) > 0 {
					t.Fatalf("attachment bytes in clear in %v", hits)
				}
			} else if hits := filesHolding(t, e.dir, []byte("attachment-marker-7Qz")); len(hits) == 0 {
				t.Fatal("plain attachments: no blob holds their bytes (the scan finds nothing)")
			}
		})
	}
}

// filesHolding lists the files under dir that hold needle.
func filesHolding(t *testing.T, dir string, needle []byte) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if bytes.Contains(b, needle) {
			out = append(out, p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// countFiles counts the files under dir (blobs and temporary files).
func countFiles(t *testing.T, dir string) int {
	t.Helper()
	n := 0
	err := filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			n++
		}
		if os.IsNotExist(err) {
			return nil
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestAttachmentSizeLimit: over the limit is 413 naming it, whether the
// client declared its length or not, and nothing is stored.
func TestAttachmentSizeLimit(t *testing.T) {
	e := newAttachEnv(t, false, 1000)
	e.upload(t, "m1", marked(1000), "", 201)
	before := countFiles(t, e.dir)
	r := e.do(t, "POST", "/v1/threads/t1/messages/m1/attachments", marked(1001), nil)
	if r.status != 413 || r.errorCode(t) != CodeBodyTooLarge || !strings.Contains(r.errorText(t), "1000 bytes") {
		t.Fatalf("declared 1001 bytes: %d %s", r.status, r.body)
	}
	// Chunked: the length is known only once the limit is passed.
	req, err := http.NewRequest("POST", e.srv.URL+"/v1/threads/t1/messages/m1/attachments", io.MultiReader(bytes.NewReader(marked(600)), bytes.NewReader(marked(600))))
	if err != nil {
		t.Fatal(err)
	}
	req.ContentLength = -1
	res, err := e.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != 413 || !strings.Contains(string(body), "1000 bytes") {
		t.Fatalf("chunked 1200 bytes: %d %s", res.StatusCode, body)
	}
	var list struct {
		Attachments []wire.Attachment `json:"attachments"`
	}
	e.expect(t, "GET", "/v1/threads/t1/messages/m1/attachments", "", 200).decode(t, &list)
	if len(list.Attachments) != 1 || countFiles(t, e.dir) != before {
		t.Fatalf("after refused uploads: %d listed, %d files (was %d)", len(list.Attachments), countFiles(t, e.dir), before)
	}
	if got := counterValue(t, e.reg, "progressdb_attachments_refused_total", map[string]string{"reason": "too_large"}); got != 2 {
		t.Errorf("refused_total = %v, want 2", got)
	}
	if got := counterValue(t, e.reg, "progressdb_attachments_stored_bytes_total", nil); got != 1000 {
		t.Errorf("stored_bytes_total = %v, want 1000", got)
	}
}

// counterSum sums every series of a counter in reg.
func counterSum(t *testing.T, reg prometheus.Gatherer, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var v float64
	for _, mf := range mfs {
		if mf.GetName() == name {
			for _, m := range mf.GetMetric() {
				v += m.GetCounter().GetValue()
			}
		}
	}
	return v
}

// TestAttachmentCutOffUpload: a client that closes its connection part
// way through the body leaves nothing a listing shows, and no file.
func TestAttachmentCutOffUpload(t *testing.T) {
	for _, sealed := range []bool{false, true} {
		t.Run(map[bool]string{false: "plain", true: "sealed"}[sealed], func(t *testing.T) {
			e := newAttachEnv(t, sealed, 1<<20)
			cutOff(t, e.testEnv, 500000, 200000)
			var list struct {
				Attachments []wire.Attachment `json:"attachments"`
			}
			e.expect(t, "GET", "/v1/threads/t1/messages/m1/attachments", "", 200).decode(t, &list)
			if len(list.Attachments) != 0 {
				t.Fatalf("a cut-off upload is listed: %+v", list.Attachments)
			}
			if n := countFiles(t, e.dir); n != 0 {
				t.Fatalf("a cut-off upload left %d files in the blob folder", n)
			}
		})
	}
}

// TestAttachmentDeleteRestoreAndRefusals: soft delete and restore like a
// message's; what is hidden, refused and unreadable.
func TestAttachmentDeleteRestoreAndRefusals(t *testing.T) {
	e := newAttachEnv(t, true, 1<<20)
	a := e.upload(t, "m1", marked(100), "", 201)
	p := attachmentPath(a)
	e.expect(t, "DELETE", p, "", 204)
	e.expect(t, "DELETE", p, "", 204)
	e.expect(t, "GET", p, "", 404)
	e.expect(t, "GET", p+"?include_deleted=true", "", 200)
	var list struct {
		Attachments []wire.Attachment `json:"attachments"`
	}
	e.expect(t, "GET", "/v1/threads/t1/messages/m1/attachments", "", 200).decode(t, &list)
	if len(list.Attachments) != 0 {
		t.Fatalf("a deleted attachment is listed: %+v", list)
	}
	e.expect(t, "GET", "/v1/threads/t1/messages/m1/attachments?include_deleted=true", "", 200).decode(t, &list)
	if len(list.Attachments) != 1 || !list.Attachments[0].Deleted || list.Attachments[0].DeletedTS.IsZero() {
		t.Fatalf("listing with deleted: %+v", list)
	}
	var back wire.Attachment
	e.expect(t, "POST", p+"/restore", "", 200).decode(t, &back)
	if back.Deleted || !back.DeletedTS.IsZero() || back.Filename != nil || *back.ContentType != "image/png" {
		t.Fatalf("restored: %+v", back)
	}

	// Bad IDs, unknown items.
	e.expect(t, "GET", "/v1/threads/t1/messages/m1/attachments/bad:id", "", 400)
	e.expect(t, "DELETE", "/v1/threads/t1/messages/m1/attachments/bad:id", "", 400)
	e.expect(t, "POST", "/v1/threads/t1/messages/m1/attachments/bad:id/restore", "", 400)
	e.expect(t, "GET", "/v1/threads/t1/messages/bad:id/attachments", "", 400)
	e.expect(t, "GET", "/v1/threads/t1/messages/m1/attachments/nope", "", 404)
	e.expect(t, "DELETE", "/v1/threads/t1/messages/m1/attachments/nope", "", 404)
	e.expect(t, "POST", "/v1/threads/t1/messages/m1/attachments/nope/restore", "", 404)
	e.expect(t, "GET", "/v1/threads/t1/messages/nope/attachments", "", 404)
	e.upload(t, "nope", marked(3), "", 404)
	e.upload(t, "m1", marked(3), "?filename=a%2Fb", 400)
	if r := e.do(t, "POST", "/v1/threads/t1/messages/m1/attachments", nil, http.Header{"Content-Type": {"not a type"}}); r.status != 400 {
		t.Fatalf("bad Content-Type: %d", r.status)
	}
	// A deleted message takes no attachment and hides its own.
	e.expect(t, "DELETE", "/v1/threads/t1/messages/m1", "", 204)
	e.upload(t, "m1", marked(3), "", 404)
	e.expect(t, "GET", p, "", 404)
	e.expect(t, "GET", p+"?include_deleted=true", "", 200)
	e.expect(t, "POST", "/v1/threads/t1/messages/m1/restore", "", 200)

	// Once the thread's purge began, no delete or restore.
	th, err := e.store.DeleteThread(context.Background(), "t1")
	if err != nil {
		t.Fatal(err)
	}
	if err := e.store.BeginPurge(context.Background(), store.PurgeMarker{Kind: store.KindThread, ID: "t1", ThreadID: "t1", DeletedTS: th.DeletedTS, RunID: "r"}); err != nil {
		t.Fatal(err)
	}
	wantCodeOf(t, e.expect(t, "DELETE", p, "", 409), CodePurgeInProgress)
	e.expect(t, "GET", p+"?include_deleted=true", "", 200)
	if _, err := e.store.DeleteAttachment(context.Background(), "t1", "m1", a.AttachmentID); err == nil {
		t.Fatal("store deleted an attachment during its thread's purge")
	}

	// The thread's keys destroyed: nothing opens, the metadata reads null.
	if _, err := e.keys.DestroyThread(context.Background(), "t1"); err != nil {
		t.Fatal(err)
	}
	wantCodeOf(t, e.expect(t, "GET", p+"?include_deleted=true", "", 409), CodePurgeInProgress)
	e.expect(t, "GET", "/v1/threads/t1/messages/m1/attachments?include_deleted=true", "", 200).decode(t, &list)
	if len(list.Attachments) != 1 || list.Attachments[0].SHA256 != nil || list.Attachments[0].ContentType != nil {
		t.Fatalf("attachment after its key was destroyed: %+v", list)
	}
}

// TestAttachmentRestoreRefusedOncePurgeBegan: restore answers 409 once
// its message's purge began.
func TestAttachmentRestoreRefusedOncePurgeBegan(t *testing.T) {
	e := newAttachEnv(t, false, 1<<20)
	a := e.upload(t, "m1", marked(10), "", 201)
	e.expect(t, "DELETE", attachmentPath(a), "", 204)
	m, err := e.store.DeleteMessage(context.Background(), "t1", "m1")
	if err != nil {
		t.Fatal(err)
	}
	if err := e.store.BeginPurge(context.Background(), store.PurgeMarker{Kind: store.KindMessage, ID: "m1", ThreadID: "t1", DeletedTS: m.DeletedTS, RunID: "r"}); err != nil {
		t.Fatal(err)
	}
	wantCodeOf(t, e.expect(t, "POST", attachmentPath(a)+"/restore", "", 409), CodePurgeInProgress)
}

// TestAttachmentsNotConfigured: without a blob store every attachment
// route answers 503 not_configured.
func TestAttachmentsNotConfigured(t *testing.T) {
	e := newEnv(t, Options{})
	e.expect(t, "POST", "/v1/threads", `{"id":"t1","title":"x","author":"ann"}`, 201)
	e.expect(t, "POST", "/v1/threads/t1/messages", `{"id":"m1","author":"ann","body":1}`, 201)
	for _, r := range []struct{ method, path, body string }{
		{"POST", "/v1/threads/t1/messages/m1/attachments", "file"},
		{"GET", "/v1/threads/t1/messages/m1/attachments", ""},
		{"GET", "/v1/threads/t1/messages/m1/attachments/a1", ""},
		{"DELETE", "/v1/threads/t1/messages/m1/attachments/a1", ""},
		{"POST", "/v1/threads/t1/messages/m1/attachments/a1/restore", ""},
	} {
		wantCodeOf(t, e.expect(t, r.method, r.path, r.body, 503), CodeNotConfigured)
	}
}

func wantCodeOf(t *testing.T, r response, code Code) {
	t.Helper()
	if got := r.errorCode(t); got != code {
		t.Fatalf("code %q, want %q; %s", got, code, r.body)
	}
}
