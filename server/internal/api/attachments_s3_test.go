package api

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/progressdb/progressdb/server/internal/testtools/s3server"
	"github.com/progressdb/progressdb/server/internal/wire"
	"github.com/progressdb/progressdb/server/pkg/attachments"
	"github.com/progressdb/progressdb/server/pkg/sealstream"
	"github.com/progressdb/progressdb/server/pkg/store"
)

// s3Env serves a sealed store with its attachments in s3.
func s3Env(t *testing.T, s3 *s3server.Server, max int64) *attachEnv {
	t.Helper()
	return attachEnvOn(t, s3.URL, true, max)
}

// TestAttachmentsOnVersionedS3 runs attachments through the s3blob
// driver against an S3 server with versioning on: byte-exact round trips
// with ranges; the size limit and a cut-off upload store no version; no
// version of any object holds the file in clear; a deleted blob's old
// version stays in the bucket, and once the thread's keys are destroyed
// it opens no more.
func TestAttachmentsOnVersionedS3(t *testing.T) {
	s3 := s3server.Start(t)
	e := s3Env(t, s3, 10<<20)
	S := sealstream.SegmentSize
	data := marked(2*S + 333)
	a := e.upload(t, "m1", data, "?filename=scan.pdf", 201)
	if r := e.do(t, "GET", attachmentPath(a), nil, nil); r.status != 200 || !bytes.Equal(r.body, data) {
		t.Fatalf("download: %d, %d bytes", r.status, len(r.body))
	}
	for _, rg := range [][2]int{{0, 10}, {S - 5, S + 5}, {2 * S, 2*S + 333}} {
		r := e.do(t, "GET", attachmentPath(a), nil, http.Header{"Range": {fmt.Sprintf("bytes=%d-%d", rg[0], rg[1]-1)}})
		if r.status != 206 || !bytes.Equal(r.body, data[rg[0]:rg[1]]) {
			t.Fatalf("range %v: %d, %d bytes", rg, r.status, len(r.body))
		}
	}

	// Over the limit, and cut off part way: no version of anything.
	r := e.do(t, "POST", "/v1/threads/t1/messages/m1/attachments", marked(10<<20+1), nil)
	if r.status != 413 {
		t.Fatalf("over the limit: %d %s", r.status, r.body)
	}
	// Past the driver's first 5 MiB part: a multipart upload is under
	// way when the client goes, and must be aborted.
	cutOff(t, e.testEnv, 8<<20, 6<<20)
	all := s3.Versions(t, "")
	if len(all) != 1 {
		t.Fatalf("bucket holds %d versions, want the one upload's: %v", len(all), keysOf(all))
	}
	for k, b := range all {
		if bytes.Contains(b, []byte("attachment-marker-7Qz")) {
			t.Fatalf("version %s holds the attachment in clear", k)
		}
	}

	// The blob deleted (as retention will): versioning keeps the old
	// version, which opens with the key store until the thread's keys go.
	name := store.BlobName("t1", "m1", a.AttachmentID)
	blobs, err := attachments.Open(context.Background(), s3.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer blobs.Close()
	if err := blobs.Delete(context.Background(), name); err != nil {
		t.Fatal(err)
	}
	if err := blobs.Delete(context.Background(), name); err != nil {
		t.Fatalf("second delete: %v", err)
	}
	if ok, err := blobs.Exists(context.Background(), name); err != nil || ok {
		t.Fatalf("deleted blob exists: %v %v", ok, err)
	}
	old := s3.Versions(t, name)
	if len(old) != 1 {
		t.Fatalf("versioning kept %d versions of the deleted blob, want 1", len(old))
	}
	rec, err := e.store.GetAttachment(context.Background(), "t1", "m1", a.AttachmentID)
	if err != nil {
		t.Fatal(err)
	}
	openVersion := func(b []byte) ([]byte, error) {
		wrap, err := e.store.AttachmentKey(context.Background(), rec)
		if err != nil {
			return nil, err
		}
		rc, err := sealstream.OpenRange(context.Background(), sealstream.ReaderAtOpener(bytes.NewReader(b), int64(len(b))),
			wrap, store.AttachmentBlobAD(rec), rec.Size, 0, rec.Size)
		if err != nil {
			return nil, err
		}
		defer rc.Close()
		return io.ReadAll(rc)
	}
	for _, b := range old {
		if got, err := openVersion(b); err != nil || !bytes.Equal(got, data) {
			t.Fatalf("the old version does not open with its key: %v", err)
		}
	}
	if _, err := e.keys.DestroyThread(context.Background(), "t1"); err != nil {
		t.Fatal(err)
	}
	for k, b := range old {
		if _, err := openVersion(b); err == nil {
			t.Fatalf("version %s still opens after the thread's keys were destroyed", k)
		}
	}
}

func keysOf(m map[string][]byte) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// cutOff sends an upload declaring declared bytes, sends only sent of
// them and closes the connection; it returns once the server has
// answered the request (counted in its metrics).
func cutOff(t *testing.T, e *testEnv, declared, sent int) {
	t.Helper()
	before := counterSum(t, e.reg, "progressdb_http_requests_total")
	conn, err := net.Dial("tcp", strings.TrimPrefix(e.srv.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	w := bufio.NewWriter(conn)
	fmt.Fprintf(w, "POST /v1/threads/t1/messages/m1/attachments HTTP/1.1\r\nHost: x\r\nContent-Type: image/png\r\nContent-Length: %d\r\n\r\n", declared)
	_, _ = w.Write(marked(sent))
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	_ = conn.Close()
	deadline := time.Now().Add(20 * time.Second)
	for counterSum(t, e.reg, "progressdb_http_requests_total") <= before {
		if time.Now().After(deadline) {
			t.Fatal("the cut-off upload was never answered")
		}
		time.Sleep(10 * time.Millisecond)
	}
	var list struct {
		Attachments []wire.Attachment `json:"attachments"`
	}
	r := e.send(t, "GET", "/v1/threads/t1/messages/m1/attachments", "", "")
	r.decode(t, &list)
	for _, a := range list.Attachments {
		if a.Size == int64(sent) || a.Size == int64(declared) {
			t.Fatalf("a cut-off upload is listed: %+v", a)
		}
	}
}
