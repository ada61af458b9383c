package faults

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"

	"github.com/progressdb/progressdb/audit"
)

// attachEnv is the configuration of a server or run that stores
// attachments in blobURL (a file:// folder beside the database when
// ""): deletions due a second after they are made, orphans after a
// second too.
func attachEnv(s site, blobURL string) envVars {
	e := s.shortPeriodEnv(time.Second).with("PROGRESSDB_RETENTION_ORPHAN_GRACE", "1s")
	if blobURL == "" {
		return e
	}
	// The real s3blob driver, its credentials from the environment as in
	// production (the test's S3 server does not check signatures).
	none := filepath.Join(s.dir, "no-aws-config")
	return e.with("PROGRESSDB_ATTACHMENTS_URL", blobURL, "AWS_ACCESS_KEY_ID", "test", "AWS_SECRET_ACCESS_KEY", "test",
		"AWS_CONFIG_FILE", none, "AWS_SHARED_CREDENTIALS_FILE", none)
}

// chat creates thread tid with messages mids over the API.
func chat(t testing.TB, srv *server, tid string, mids ...string) {
	t.Helper()
	srv.mustCall(t, "POST", "/v1/threads", map[string]any{"id": tid, "title": "t", "author": "a"}, "", http.StatusCreated, nil)
	for _, mid := range mids {
		srv.mustCall(t, "POST", "/v1/threads/"+tid+"/messages",
			map[string]any{"id": mid, "author": "a", "body": map[string]string{"text": "x"}}, "", http.StatusCreated, nil)
	}
}

// upload attaches body to message mid of tid over the API and returns
// the attachment's ID.
func upload(t testing.TB, srv *server, tid, mid string, body io.Reader) (string, error) {
	req, err := http.NewRequest("POST", srv.url+"/v1/threads/"+tid+"/messages/"+mid+"/attachments", body)
	if err != nil {
		return "", err
	}
	req.Header.Set("Content-Type", "application/octet-stream")
	resp, err := httpClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusCreated {
		return "", fmt.Errorf("upload: status %d: %s", resp.StatusCode, data)
	}
	var a struct {
		ID string `json:"attachment_id"`
	}
	if err := json.Unmarshal(data, &a); err != nil || a.ID == "" {
		return "", fmt.Errorf("upload answer %s: %v", data, err)
	}
	return a.ID, nil
}

// attachmentItems returns the purged attachment records of the whole
// trail, by attachment ID.
func attachmentItems(t testing.TB, s site) map[string][]auditLine {
	t.Helper()
	out := map[string][]auditLine{}
	for _, f := range readAudit(t, s.audit) {
		for _, it := range f.items {
			if it.ItemType == audit.ItemAttachment && it.Status == audit.StatusPurged {
				out[it.ItemID] = append(out[it.ItemID], it)
			}
		}
	}
	return out
}

// tempFiles returns the uploads' temporary files in a file:// folder,
// by name relative to it, with their sizes.
func tempFiles(t testing.TB, dir string) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(p, ".tmp") {
			return nil
		}
		if info, err := d.Info(); err == nil {
			rel, _ := filepath.Rel(dir, p)
			out[filepath.ToSlash(rel)] = info.Size()
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestFaultKilledMidUpload kills `progressdb serve` with SIGKILL while a
// large upload streams in. After a restart the attachment is nowhere: no
// listing shows it and a download answers 404. Its leftover (the
// file:// driver's temporary file) is removed by the first run after the
// grace period, recorded once as an orphan with its size and digest.
func TestFaultKilledMidUpload(t *testing.T) {
	t.Parallel()
	s := newSite(t.TempDir())
	env := attachEnv(s, "")
	srv := startServer(t, env)
	chat(t, srv, "t1", "m1")
	folder := s.db + "-attachments"

	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		_, err := upload(t, srv, "t1", "m1", pr)
		done <- err
	}()
	chunk := bytes.Repeat([]byte("streamed attachment bytes "), 4096) // ~104 KiB
	waitFor(t, time.Minute, "2 MiB of the upload on disk", func() bool {
		if _, err := pw.Write(chunk); err != nil {
			t.Fatalf("upload stream: %v", err)
		}
		for _, size := range tempFiles(t, folder) {
			if size >= 2<<20 {
				return true
			}
		}
		return false
	})
	srv.kill()
	_ = pw.CloseWithError(errors.New("server killed"))
	if err := <-done; err == nil {
		t.Fatal("the upload succeeded although the server was killed during it")
	}
	temps := tempFiles(t, folder)
	if len(temps) != 1 {
		t.Fatalf("temporary files after the kill: %v, want one", temps)
	}
	var temp string
	for name := range temps {
		temp = name
	}
	aid, _, _ := strings.Cut(filepath.Base(temp), ".")
	stored, err := os.ReadFile(filepath.Join(folder, filepath.FromSlash(temp)))
	if err != nil {
		t.Fatal(err)
	}
	killed := time.Now()

	srv = startServer(t, env)
	var list struct {
		Attachments []struct {
			ID string `json:"attachment_id"`
		} `json:"attachments"`
	}
	srv.mustCall(t, "GET", "/v1/threads/t1/messages/m1/attachments?include_deleted=true", nil, "", http.StatusOK, &list)
	if len(list.Attachments) != 0 {
		t.Fatalf("the cut-off upload is listed: %+v", list.Attachments)
	}
	if status, _ := srv.call(t, "GET", "/v1/threads/t1/messages/m1/attachments/"+aid, nil, ""); status != http.StatusNotFound {
		t.Fatalf("download of the cut-off upload: status %d, want 404", status)
	}

	sleepUntil(killed.Add(1500 * time.Millisecond)) // past the grace period
	srv.mustCall(t, "POST", "/admin/retention/run", nil, adminToken, http.StatusOK, nil)
	if left := tempFiles(t, folder); len(left) != 0 {
		t.Fatalf("temporary files after a run past the grace period: %v", left)
	}
	srv.mustCall(t, "POST", "/admin/retention/run", nil, adminToken, http.StatusOK, nil)
	items := attachmentItems(t, s)
	if len(items) != 1 || len(items[aid]) != 1 {
		t.Fatalf("attachment records: %+v, want one of %s", items, aid)
	}
	it := items[aid][0]
	if !it.Orphan || it.Blob != temp || it.ThreadID != "t1" || it.MessageID != "m1" ||
		it.Size == nil || *it.Size != int64(len(stored)) || it.SHA256 != hexSHA256(stored) {
		t.Fatalf("orphan record = %+v, want blob %s of %d bytes", it, temp, len(stored))
	}
	if m := scrape(t, srv); !strings.Contains(m, "\nprogressdb_retention_orphan_blobs_removed_total 1\n") {
		t.Errorf("orphan counter not 1 after the removal:\n%s", grepLines(m, "orphan"))
	}
	if code := srv.stop(t); code != 0 {
		t.Fatalf("server exit status %d\n%s", code, srv.output())
	}
	verifyAudit(t, s.audit)
}

// blockingS3 is an S3-protocol server on loopback (gofakes3, in memory)
// that lets the first pass object deletions through and holds the next
// ones until released: a run killed while one is held has deleted its
// purges' records and owes the rest of their blobs.
type blockingS3 struct {
	backend *s3mem.Backend
	url     string
	pass    int64
	deletes atomic.Int64
	held    chan struct{} // closed when a deletion is first held
	release chan struct{} // closed to let every deletion through
	once    sync.Once
}

const faultBucket = "fault-files"

func startBlockingS3(t testing.TB, pass int) *blockingS3 {
	t.Helper()
	b := &blockingS3{backend: s3mem.New(), pass: int64(pass), held: make(chan struct{}), release: make(chan struct{})}
	if err := b.backend.CreateBucket(faultBucket); err != nil {
		t.Fatal(err)
	}
	fake := gofakes3.New(b.backend, gofakes3.WithLogger(gofakes3.DiscardLog())).Server()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodDelete && b.deletes.Add(1) > b.pass {
			b.once.Do(func() { close(b.held) })
			select {
			case <-b.release:
			case <-r.Context().Done():
				return
			}
		}
		fake.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(b.letGo)
	b.url = "s3://" + faultBucket + "?region=us-east-1&use_path_style=true&endpoint=" + srv.URL
	return b
}

func (b *blockingS3) letGo() {
	select {
	case <-b.release:
	default:
		close(b.release)
	}
}

// exists reports whether object name is in the bucket.
func (b *blockingS3) exists(t testing.TB, name string) bool {
	t.Helper()
	_, err := b.backend.HeadObject(faultBucket, name)
	if err != nil && !gofakes3.HasErrorCode(err, gofakes3.ErrNoSuchKey) {
		t.Fatalf("head %s: %v", name, err)
	}
	return err == nil
}

// TestFaultKilledMidPurgeBlobs kills `progressdb retention run` with
// SIGKILL after its purges deleted attachments' records and while it
// deletes their blobs (the S3 server holds a deletion; a random number
// of them went through before). No record names a blob that is still
// there; the next run deletes the rest, and every purged attachment ends
// with its blob gone and exactly one audit record, a live one untouched.
func TestFaultKilledMidPurgeBlobs(t *testing.T) {
	t.Parallel()
	for i := range pick(1, max(2, suite.trials/5)) {
		t.Run(fmt.Sprintf("trial_%d", i), func(t *testing.T) {
			rng := trialRand(t, i)
			s := newSite(t.TempDir())
			const purged = 13 // 3 threads × 2 messages × 2, and one deleted message's
			s3 := startBlockingS3(t, rng.IntN(purged))
			env := attachEnv(s, s3.url)
			srv := startServer(t, env)
			names := map[string]string{} // attachment ID → blob name, of those to purge
			add := func(tid, mid string) string {
				id, err := upload(t, srv, tid, mid, strings.NewReader("bytes of "+tid+"/"+mid))
				if err != nil {
					t.Fatal(err)
				}
				return id
			}
			for _, tid := range []string{"t1", "t2", "t3"} {
				chat(t, srv, tid, tid+"-m1", tid+"-m2")
				for _, mid := range []string{tid + "-m1", tid + "-m2"} {
					for range 2 {
						id := add(tid, mid)
						names[id] = tid + "/" + mid + "/" + id
					}
				}
				srv.mustCall(t, "DELETE", "/v1/threads/"+tid, nil, "", http.StatusNoContent, nil)
			}
			chat(t, srv, "live", "live-m1", "live-m2")
			gone := add("live", "live-m1")
			names[gone] = "live/live-m1/" + gone
			kept := add("live", "live-m2")
			srv.mustCall(t, "DELETE", "/v1/threads/live/messages/live-m1", nil, "", http.StatusNoContent, nil)
			if code := srv.stop(t); code != 0 {
				t.Fatalf("server exit status %d\n%s", code, srv.output())
			}
			sleepUntil(time.Now().Add(1100 * time.Millisecond)) // the deletions fall due

			// Trial 0 (the short mode's): the purges are made durable in
			// one group, so the kill leaves every purge done and blobs
			// owed, for the next run's start to finish. Odd trials use
			// batches of one key: each purge is made durable, and its
			// blobs deleted and recorded, before the next one, so the
			// held deletion follows records already synced.
			runEnv := env
			if i%2 == 1 {
				runEnv = env.with("PROGRESSDB_RETENTION_BATCH_SIZE", "1")
			}
			p := startRetention(t, runEnv)
			select {
			case <-s3.held:
			case <-p.done:
				t.Fatalf("the run ended before a blob deletion was held\n%s", p.output())
			case <-time.After(2 * time.Minute):
				t.Fatalf("no blob deletion after 2m\n%s", p.output())
			}
			p.kill()
			left := 0
			for id, name := range names {
				if s3.exists(t, name) {
					left++
					if len(attachmentItems(t, s)[id]) > 0 {
						t.Errorf("attachment %s has a record and its blob is still there", id)
					}
				}
			}
			t.Logf("killed after %d of %d blob deletions; %d blobs left", s3.pass, purged, left)

			s3.letGo()
			if p, res := runRetention(t, env); p.code != 0 || res == nil || res.Status != audit.RunCompleted {
				t.Fatalf("the next run: exit %d, %+v\n%s", p.code, res, p.output())
			}
			items := attachmentItems(t, s)
			for id, name := range names {
				if s3.exists(t, name) {
					t.Errorf("blob %s of a purged attachment is still there", name)
				}
				if n := len(items[id]); n != 1 || items[id][0].Orphan {
					t.Errorf("attachment %s has %d records (%+v), want 1 of its purge", id, n, items[id])
				}
			}
			if !s3.exists(t, "live/live-m2/"+kept) || len(items[kept]) != 0 {
				t.Error("the live attachment was touched")
			}
			checkSealed(t, s.audit, readAudit(t, s.audit), nil)
		})
	}
}

func hexSHA256(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// scrape returns the server's metrics.
func scrape(t testing.TB, srv *server) string {
	t.Helper()
	status, body := srv.call(t, "GET", "/metrics", nil, "")
	if status != http.StatusOK {
		t.Fatalf("/metrics: status %d", status)
	}
	return string(body)
}

// grepLines returns the lines of text that hold word.
func grepLines(text, word string) string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if strings.Contains(l, word) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
