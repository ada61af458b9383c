package client_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/progressdb/progressdb/client"
)

// pattern is n bytes that differ at every offset a test compares, so that
// a shifted or misplaced range cannot match.
func pattern(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7 + i/251)
	}
	return b
}

func hexSum(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// stream hides every method of r but Read: a reader the client can
// neither measure nor rewind, sent chunked.
type stream struct{ r io.Reader }

func (s *stream) Read(p []byte) (int, error) { return s.r.Read(p) }

// attachEnv is a server, a client and a live message to attach to.
type attachEnv struct {
	base     string
	c        *client.Client
	tid, mid string
}

func newAttachEnv(t *testing.T, env ...string) *attachEnv {
	t.Helper()
	base := serve(t, env...)
	return newAttachEnvAt(t, base, newClient(t, base))
}

func newAttachEnvAt(t *testing.T, base string, c *client.Client) *attachEnv {
	t.Helper()
	ctx := context.Background()
	th := check(c.CreateThread(ctx, client.NewThread{Title: "files", Author: "ann"})).must(t)
	m := check(c.AppendMessage(ctx, th.Id, client.NewMessage{Author: "ann", Body: map[string]any{"text": "see attached"}})).must(t)
	return &attachEnv{base: base, c: c, tid: th.Id, mid: m.Id}
}

func (e *attachEnv) download(t *testing.T, aid string, opts client.DownloadOptions) (*client.Download, []byte) {
	t.Helper()
	d := check(e.c.DownloadAttachment(context.Background(), e.tid, e.mid, aid, opts)).must(t)
	defer d.Close()
	b, err := io.ReadAll(d)
	if err != nil {
		t.Fatalf("read download: %v", err)
	}
	return d, b
}

// A file of several 64 KiB segments and a part (plain and sealed, sent
// with its length and chunked) comes back byte for byte, whole and by
// range; ETag and If-None-Match, listing, soft delete and restore work.
func TestAttachmentRoundTrip(t *testing.T) {
	kek := "base64key://" + base64.StdEncoding.EncodeToString([]byte(strings.Repeat("\x05", 32)))
	for _, sealed := range []bool{false, true} {
		t.Run(fmt.Sprintf("sealed=%v", sealed), func(t *testing.T) {
			var env []string
			if sealed {
				env = []string{"PROGRESSDB_KEK=" + kek, "PROGRESSDB_KEYSTORE_PATH=" + filepath.Join(t.TempDir(), "keys")}
			}
			e := newAttachEnv(t, env...)
			ctx := context.Background()
			file := pattern(3*64<<10 + 12345)
			a := check(e.c.UploadAttachment(ctx, e.tid, e.mid, bytes.NewReader(file),
				client.UploadOptions{ContentType: "image/png", Filename: "floor plan.png"})).must(t)
			if a.Size != len(file) || *a.Sha256 != hexSum(file) || *a.ContentType != "image/png" ||
				*a.Filename != "floor plan.png" || a.Thread != e.tid || a.Message != e.mid || a.Deleted {
				t.Fatalf("uploaded %+v", a)
			}
			chunked := check(e.c.UploadAttachment(ctx, e.tid, e.mid, &stream{bytes.NewReader(file)}, client.UploadOptions{})).must(t)
			if chunked.Size != len(file) || *chunked.Sha256 != hexSum(file) || *chunked.ContentType != "application/octet-stream" || chunked.Filename != nil {
				t.Fatalf("uploaded chunked %+v", chunked)
			}
			empty := check(e.c.UploadAttachment(ctx, e.tid, e.mid, strings.NewReader(""), client.UploadOptions{})).must(t)
			if empty.Size != 0 {
				t.Fatalf("empty file of %d bytes", empty.Size)
			}
			list := check(e.c.ListAttachments(ctx, e.tid, e.mid, false)).must(t)
			if len(list) != 3 || list[0].AttachmentId != a.AttachmentId || list[1].AttachmentId != chunked.AttachmentId {
				t.Fatalf("listing %+v", list)
			}

			for _, aid := range []string{a.AttachmentId, chunked.AttachmentId} {
				d, got := e.download(t, aid, client.DownloadOptions{})
				if !bytes.Equal(got, file) || d.Partial || d.Size != int64(len(file)) || d.Length != d.Size || d.Offset != 0 {
					t.Fatalf("download of %d bytes (%+v), want the %d uploaded", len(got), d, len(file))
				}
			}
			d, _ := e.download(t, a.AttachmentId, client.DownloadOptions{})
			if d.ETag != `"`+hexSum(file)+`"` || d.ContentType != "image/png" || d.Filename != "floor plan.png" {
				t.Fatalf("download headers %+v", d)
			}
			for _, r := range []struct{ off, n int64 }{{70000, 5000}, {64 << 10, 64 << 10}, {int64(len(file)) - 10, 0}, {0, 1}} {
				d, got := e.download(t, a.AttachmentId, client.DownloadOptions{Offset: r.off, Length: r.n})
				end := int64(len(file))
				if r.n > 0 {
					end = r.off + r.n
				}
				if !bytes.Equal(got, file[r.off:end]) || !d.Partial || d.Offset != r.off || d.Size != int64(len(file)) || d.Length != end-r.off {
					t.Fatalf("range %d+%d: %d bytes (%+v), want %d", r.off, r.n, len(got), d, end-r.off)
				}
			}
			if d, got := e.download(t, a.AttachmentId, client.DownloadOptions{IfNoneMatch: d.ETag}); !d.NotModified || len(got) != 0 {
				t.Fatalf("If-None-Match of its ETag: %+v, %d bytes", d, len(got))
			}
			_, err := e.c.DownloadAttachment(ctx, e.tid, e.mid, a.AttachmentId, client.DownloadOptions{Offset: int64(len(file))})
			wantCode(t, err, http.StatusRequestedRangeNotSatisfiable, client.ErrorCodeRangeNotSatisfiable)

			if err := e.c.DeleteAttachment(ctx, e.tid, e.mid, a.AttachmentId); err != nil {
				t.Fatal(err)
			}
			if l := check(e.c.ListAttachments(ctx, e.tid, e.mid, false)).must(t); len(l) != 2 {
				t.Fatalf("after delete: %d attachments listed, want 2", len(l))
			}
			if l := check(e.c.ListAttachments(ctx, e.tid, e.mid, true)).must(t); len(l) != 3 || !l[0].Deleted || l[0].DeletedTs == nil {
				t.Fatalf("after delete, with deleted: %+v", l)
			}
			_, err = e.c.DownloadAttachment(ctx, e.tid, e.mid, a.AttachmentId, client.DownloadOptions{})
			wantCode(t, err, http.StatusNotFound, client.ErrorCodeNotFound)
			if _, got := e.download(t, a.AttachmentId, client.DownloadOptions{IncludeDeleted: true}); !bytes.Equal(got, file) {
				t.Fatal("a deleted attachment's download with include_deleted differs")
			}
			if r := check(e.c.RestoreAttachment(ctx, e.tid, e.mid, a.AttachmentId)).must(t); r.Deleted {
				t.Fatalf("restored %+v", r)
			}
			if _, got := e.download(t, a.AttachmentId, client.DownloadOptions{}); !bytes.Equal(got, file) {
				t.Fatal("a restored attachment's download differs")
			}
			_, err = e.c.UploadAttachment(ctx, e.tid, "no-such-message", bytes.NewReader(file), client.UploadOptions{})
			wantCode(t, err, http.StatusNotFound, client.ErrorCodeNotFound)
		})
	}
}

// Over PROGRESSDB_ATTACHMENT_MAX_BYTES, declared or streamed, an upload
// is an error IsTooLarge reports, naming the limit, and nothing is kept.
func TestAttachmentTooLarge(t *testing.T) {
	e := newAttachEnv(t, "PROGRESSDB_ATTACHMENT_MAX_BYTES=100000")
	ctx := context.Background()
	check(e.c.UploadAttachment(ctx, e.tid, e.mid, bytes.NewReader(pattern(100000)), client.UploadOptions{})).must(t)
	for name, r := range map[string]io.Reader{
		"declared": bytes.NewReader(pattern(100001)),
		"chunked":  &stream{bytes.NewReader(pattern(4 << 20))},
	} {
		_, err := e.c.UploadAttachment(ctx, e.tid, e.mid, r, client.UploadOptions{})
		if !client.IsTooLarge(err) {
			t.Fatalf("%s: %v, want body_too_large", name, err)
		}
		if e := wantCode(t, err, http.StatusRequestEntityTooLarge, client.ErrorCodeBodyTooLarge); !strings.Contains(e.Message, "100000") {
			t.Fatalf("%s: %q does not name the limit", name, e.Message)
		}
	}
	if l := check(e.c.ListAttachments(ctx, e.tid, e.mid, true)).must(t); len(l) != 1 {
		t.Fatalf("%d attachments listed, want the 1 under the limit", len(l))
	}
}

// cutReader yields n bytes of pattern, then fails.
type cutReader struct {
	data []byte
	err  error
}

func (c *cutReader) Read(p []byte) (int, error) {
	if len(c.data) == 0 {
		return 0, c.err
	}
	n := copy(p, c.data)
	c.data = c.data[n:]
	return n, nil
}

var errCut = errors.New("the source broke")

// An upload whose reader fails part way returns that error and stores
// nothing a listing shows; a download cut part way fails, never ending
// as if whole.
func TestAttachmentCut(t *testing.T) {
	base := serve(t)
	const cutAt = 150 << 10
	_, url := newFrontNodeReq(t, base, func(_ int, w http.ResponseWriter, r *http.Request) bool {
		if r.Method != http.MethodGet || !strings.Contains(r.URL.Path, "/attachments/") {
			return false
		}
		// Pass the answer on, then break the connection part way.
		req, _ := http.NewRequestWithContext(r.Context(), r.Method, base+r.URL.RequestURI(), nil)
		req.Header = r.Header.Clone()
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			panic(http.ErrAbortHandler)
		}
		defer res.Body.Close()
		for k, v := range res.Header {
			w.Header()[k] = v
		}
		w.WriteHeader(res.StatusCode)
		io.Copy(w, io.LimitReader(res.Body, cutAt))
		panic(http.ErrAbortHandler)
	})
	e := newAttachEnvAt(t, base, newClient(t, base))
	ctx := context.Background()
	file := pattern(400 << 10)
	for name, r := range map[string]io.Reader{
		"declared": &cutReader{data: file[:cutAt], err: errCut},
		"chunked":  &cutReader{data: file[:cutAt], err: errCut},
	} {
		opts := client.UploadOptions{}
		if name == "declared" {
			opts.Size = int64(len(file))
		}
		if _, err := e.c.UploadAttachment(ctx, e.tid, e.mid, r, opts); !errors.Is(err, errCut) {
			t.Fatalf("%s: upload cut off: %v, want the reader's error", name, err)
		}
	}
	if l := check(e.c.ListAttachments(ctx, e.tid, e.mid, true)).must(t); len(l) != 0 {
		t.Fatalf("a cut-off upload is listed: %+v", l)
	}

	a := check(e.c.UploadAttachment(ctx, e.tid, e.mid, bytes.NewReader(file), client.UploadOptions{})).must(t)
	cut := newClient(t, url)
	d := check(cut.DownloadAttachment(ctx, e.tid, e.mid, a.AttachmentId, client.DownloadOptions{})).must(t)
	defer d.Close()
	got, err := io.ReadAll(d)
	if !errors.Is(err, io.ErrUnexpectedEOF) || len(got) >= len(file) {
		t.Fatalf("a download cut after %d of %d bytes read %d bytes with %v, want io.ErrUnexpectedEOF", cutAt, len(file), len(got), err)
	}
	if !bytes.Equal(got, file[:len(got)]) {
		t.Fatal("the bytes before the cut differ")
	}
}

// An upload answered 503 is sent again only when it can be whole: a
// stream none of which was read (its length declared, the refusal came
// before the body), a
// stream the caller can give again (GetBody), a reader that seeks back
// to where it stood; a stream already read is not sent again, its 503
// returned. A download answered 503 is tried again.
func TestAttachmentRetries(t *testing.T) {
	base := serve(t)
	file := pattern(200 << 10)
	type scripted struct {
		name       string
		consume    bool // the front node reads the body before its 503
		body       func() (io.Reader, client.UploadOptions)
		wantStored bool
	}
	for _, sc := range []scripted{
		{"stream unread", false, func() (io.Reader, client.UploadOptions) {
			return &stream{bytes.NewReader(file)}, client.UploadOptions{Size: int64(len(file))}
		}, true},
		{"stream read", true, func() (io.Reader, client.UploadOptions) {
			return &stream{bytes.NewReader(file)}, client.UploadOptions{}
		}, false},
		{"stream with GetBody", true, func() (io.Reader, client.UploadOptions) {
			return &stream{bytes.NewReader(file)}, client.UploadOptions{GetBody: func() (io.Reader, error) {
				return &stream{bytes.NewReader(file)}, nil
			}}
		}, true},
		{"seeker part way", true, func() (io.Reader, client.UploadOptions) {
			// The file starts where the reader stands, not at 0.
			r := io.NewSectionReader(bytes.NewReader(append([]byte("skip"), file...)), 0, int64(len(file))+4)
			r.Seek(4, io.SeekStart)
			return r, client.UploadOptions{}
		}, true},
	} {
		t.Run(sc.name, func(t *testing.T) {
			front, url := newFrontNodeReq(t, base, func(n int, w http.ResponseWriter, r *http.Request) bool {
				if n != 1 {
					return false
				}
				if sc.consume {
					io.Copy(io.Discard, r.Body)
				}
				unavailable(w, "0")
				return true
			})
			c := newClient(t, url, client.WithRetry(client.Retry{Attempts: 3, Base: time.Millisecond, Max: time.Second}))
			e := newAttachEnvAt(t, base, newClient(t, base))
			arrivals := len(front.times())
			r, opts := sc.body()
			a, err := c.UploadAttachment(context.Background(), e.tid, e.mid, r, opts)
			tries := len(front.times()) - arrivals
			if !sc.wantStored {
				wantCode(t, err, http.StatusServiceUnavailable, client.ErrorCodeShardUnavailable)
				if tries != 1 {
					t.Fatalf("a stream already read was sent %d times, want once", tries)
				}
				if l := check(e.c.ListAttachments(context.Background(), e.tid, e.mid, true)).must(t); len(l) != 0 {
					t.Fatalf("stored %+v", l)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tries != 2 || a.Size != len(file) || *a.Sha256 != hexSum(file) {
				t.Fatalf("%d tries, stored %d bytes (%s), want 2 tries and the file", tries, a.Size, *a.Sha256)
			}
			if _, got := e.download(t, a.AttachmentId, client.DownloadOptions{}); !bytes.Equal(got, file) {
				t.Fatal("the file stored after a retry differs")
			}
		})
	}

	e := newAttachEnvAt(t, base, newClient(t, base))
	a := check(e.c.UploadAttachment(context.Background(), e.tid, e.mid, bytes.NewReader(file), client.UploadOptions{})).must(t)
	front, url := newFrontNode(t, base, func(n int, w http.ResponseWriter) bool {
		if n == 1 {
			unavailable(w, "0")
			return true
		}
		return false
	})
	e.c = newClient(t, url, client.WithRetry(client.Retry{Attempts: 3, Base: time.Millisecond, Max: time.Second}))
	if _, got := e.download(t, a.AttachmentId, client.DownloadOptions{Offset: 1000, Length: 100}); !bytes.Equal(got, file[1000:1100]) {
		t.Fatal("a retried range download differs")
	}
	if n := len(front.times()); n != 2 {
		t.Fatalf("download: %d tries, want 2", n)
	}
}

// generator yields size bytes of pattern made as they are read, and fails
// the upload when the client holds what it read instead of sending it
// (more than slack bytes read but not yet written to its connection), or
// reads it again after its end.
type generator struct {
	size, made int64
	sum        hash.Hash
	written    *atomic.Int64
	ended      bool
}

const slack = 4 << 20

func (g *generator) Read(p []byte) (int, error) {
	if g.ended {
		return 0, errors.New("generator: read again after its end")
	}
	if g.made-g.written.Load() > slack {
		// A streaming client wrote what it read before it reads more; a
		// generous wait keeps a slow machine from failing.
		for deadline := time.Now().Add(10 * time.Second); g.made-g.written.Load() > slack; time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				return 0, fmt.Errorf("generator: the client read %d bytes and sent %d: it holds the file", g.made, g.written.Load())
			}
		}
	}
	if g.made == g.size {
		g.ended = true
		return 0, io.EOF
	}
	n := int(min(int64(len(p)), g.size-g.made))
	for i := range n {
		k := int(g.made) + i
		p[i] = byte(k*7 + k/251)
	}
	g.sum.Write(p[:n])
	g.made += int64(n)
	return n, nil
}

// countConn counts the bytes written to a connection.
type countConn struct {
	net.Conn
	n *atomic.Int64
}

func (c *countConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	c.n.Add(int64(n))
	return n, err
}

// A 20 MiB upload from a reader that can be read once streams: the
// client never holds more than a little of it (the reader checks what
// reached the connection), with its length declared or chunked.
func TestAttachmentUploadStreams(t *testing.T) {
	e := newAttachEnv(t, "PROGRESSDB_ATTACHMENT_MAX_BYTES=33554432")
	var written atomic.Int64
	var d net.Dialer
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &countConn{Conn: c, n: &written}, nil
	}}}
	c := newClient(t, e.base, client.WithHTTP(hc))
	const size = 20 << 20
	for _, declared := range []bool{true, false} {
		written.Store(0)
		g := &generator{size: size, sum: sha256.New(), written: &written}
		opts := client.UploadOptions{}
		if declared {
			opts.Size = size
		}
		a, err := c.UploadAttachment(context.Background(), e.tid, e.mid, g, opts)
		if err != nil {
			t.Fatalf("declared %v: %v", declared, err)
		}
		if a.Size != size || *a.Sha256 != hex.EncodeToString(g.sum.Sum(nil)) {
			t.Fatalf("declared %v: stored %d bytes (%s), want %d", declared, a.Size, *a.Sha256, size)
		}
	}
}
