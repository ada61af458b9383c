package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/progressdb/progressdb/audit"
	"github.com/progressdb/progressdb/server/internal/app"
	"github.com/progressdb/progressdb/server/internal/testtools/s3server"
	"github.com/progressdb/progressdb/server/pkg/attachments"
	"github.com/progressdb/progressdb/server/pkg/config"
	"github.com/progressdb/progressdb/server/pkg/store"
)

// attachMarker fills the attachments of the tests below, so that an
// archive can be searched for their bytes in clear.
const attachMarker = "ATTACHMENT-PLAINTEXT-7f3a9c-"

// postOK sends body to url (method) and decodes the 2xx answer into out.
func postOK(t *testing.T, method, url, ctype string, body io.Reader, out any) {
	t.Helper()
	req, err := http.NewRequest(method, url, body)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", ctype)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	data, _ := io.ReadAll(res.Body)
	if res.StatusCode/100 != 2 {
		t.Fatalf("%s %s: %d %s", method, url, res.StatusCode, data)
	}
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			t.Fatalf("%s %s: %v: %s", method, url, err, data)
		}
	}
}

// download reads an attachment whole from the server at addr.
func downloadAttachment(t *testing.T, addr, tid, mid, aid string) []byte {
	t.Helper()
	res, err := http.Get("http://" + addr + "/v1/threads/" + tid + "/messages/" + mid + "/attachments/" + aid)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	data, err := io.ReadAll(res.Body)
	if err != nil || res.StatusCode != http.StatusOK {
		t.Fatalf("download %s: %d %v", aid, res.StatusCode, err)
	}
	return data
}

// A sealed server's online backup holds its attachments as stored:
// sealed, never a byte in clear, listed in the manifest and checked by
// backup verify. Restored (the built binary, as an operator runs it), the
// blobs go into the copy's own folder; the replay deletes the blob of an
// attachment purged after the backup (recorded replayed), and the copy,
// served with the environment the restore printed, answers the kept
// attachment byte for byte.
func TestBackupRestoreAttachmentsSealed(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	h, _ := sealedHarness(t, testKEK(9))
	root := filepath.Dir(h.dbPath)
	env := serverEnv(h, h.environ...)
	env = withEnv(env, config.VarEnabled, "false") // runs only when asked
	cfg, err := config.Load(env)
	if err != nil {
		t.Fatal(err)
	}
	keep := bytes.Repeat([]byte(attachMarker+"kept-"), 20000) // ~660 KiB: many segments
	gone := bytes.Repeat([]byte(attachMarker+"gone-"), 3000)

	addr, _, stop := startServeStop(t, env, http.DefaultClient, "http")
	base := "http://" + addr + "/v1/threads"
	postOK(t, http.MethodPost, base, "application/json", strings.NewReader(`{"id":"t1","title":"x","author":"ann"}`), nil)
	var kept, purged struct {
		ID string `json:"attachment_id"`
	}
	for _, m := range []struct {
		mid  string
		body []byte
		out  any
	}{{"m1", keep, &kept}, {"m2", gone, &purged}} {
		postOK(t, http.MethodPost, base+"/t1/messages", "application/json", strings.NewReader(`{"id":"`+m.mid+`","author":"ann","body":"b"}`), nil)
		postOK(t, http.MethodPost, base+"/t1/messages/"+m.mid+"/attachments", "application/octet-stream", bytes.NewReader(m.body), m.out)
	}
	stop()
	// m2 deleted 40 days ago: due under the default 30 days.
	past := func() time.Time { return time.Now().Add(-40 * 24 * time.Hour) }
	st, err := app.OpenStore(ctx, cfg, nil, store.Options{Now: past}, app.KeepPlain)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.DeleteMessage(ctx, "t1", "m2"); err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}

	addr, _, stop = startServeStop(t, env, http.DefaultClient, "http")
	served := withEnv(env, "PROGRESSDB_ADDR", addr)
	archive := filepath.Join(root, "b.tar.zst")
	if code, out, errOut := runBinary(t, served, "backup", "create", "--out", archive); code != exitOK {
		t.Fatalf("backup create: exit %d\n%s%s", code, out, errOut)
	}
	if code, out, errOut := runBinary(t, served, "retention", "run"); code != exitOK {
		t.Fatalf("retention run: exit %d\n%s%s", code, out, errOut)
	}
	stop()
	liveBlob := filepath.Join(config.DefaultAttachmentsDir(h.dbPath), "t1", "m2", purged.ID)
	if _, err := os.Stat(liveBlob); !os.IsNotExist(err) {
		t.Fatalf("the purged attachment's blob is still in the live folder (%v)", err)
	}

	// The archive as stored: no attachment byte in clear (the .tar
	// holds its entries uncompressed).
	plain := filepath.Join(root, "b.tar")
	if code, out, errOut := runBinary(t, env, "backup", "create", "--out", plain); code != exitOK {
		t.Fatalf("backup create --out .tar: exit %d\n%s%s", code, out, errOut)
	}
	raw, err := os.ReadFile(plain)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(raw, []byte(attachMarker)) || !bytes.Contains(raw, []byte("attachments/t1/m1/"+kept.ID)) {
		t.Fatalf("the plain archive holds an attachment in clear, or not the kept attachment's sealed blob")
	}
	code, out, errOut := runBinary(t, env, "backup", "verify", archive)
	if code != exitOK || !strings.Contains(out, "attachments: 2 blobs in the archive") {
		t.Fatalf("backup verify: exit %d\n%s%s", code, out, errOut)
	}

	drill := filepath.Join(root, "drill")
	code, out, errOut = runBinary(t, env, "restore", archive, "--db", drill, "--keystore", drill+"-keys", "--json")
	var rep restoreReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil || code != exitOK {
		t.Fatalf("restore: exit %d %v\n%s%s", code, err, out, errOut)
	}
	blobs := config.DefaultAttachmentsDir(drill)
	if rep.Attachments != blobs || rep.ServeEnv[config.VarAttachmentsURL] != "file://"+blobs {
		t.Fatalf("restore put the attachments in %q, serves them from %q; want %s", rep.Attachments, rep.ServeEnv[config.VarAttachmentsURL], blobs)
	}
	if _, err := os.Stat(filepath.Join(blobs, "t1", "m2", purged.ID)); !os.IsNotExist(err) {
		t.Fatalf("the blob purged after the backup is in the restored folder after the replay (%v)", err)
	}
	if rep.Replay == nil || !auditRecordsReplayed(t, rep.Replay.AuditFile, purged.ID) {
		t.Fatalf("the replay %+v records no attachment %s purged replayed", rep.Replay, purged.ID)
	}

	copyEnv := env
	for k, v := range rep.ServeEnv {
		copyEnv = withEnv(copyEnv, k, v)
	}
	addr, _, _ = startServeStop(t, copyEnv, http.DefaultClient, "http")
	if got := downloadAttachment(t, addr, "t1", "m1", kept.ID); !bytes.Equal(got, keep) {
		t.Fatalf("the restored attachment downloads %d bytes, not the %d uploaded", len(got), len(keep))
	}
}

// auditRecordsReplayed reports whether the audit file at path records
// attachment id purged with replayed: true.
func auditRecordsReplayed(t *testing.T, path, id string) bool {
	t.Helper()
	found := false
	err := audit.Purged(path, func(it audit.Item) error {
		found = found || (it.ItemType == audit.ItemAttachment && it.ItemID == id && it.Replayed)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return found
}

// A backup of a database whose attachments are in an S3 bucket (the real
// s3blob driver against an S3-protocol server on loopback) holds no blob
// bytes: its manifest names the blobs, and backup verify checks that the
// bucket PROGRESSDB_ATTACHMENTS_URL names holds each, at its size. A blob
// gone from the bucket, a store that cannot be reached and a store of
// another kind each fail the verify (exit 1), saying why.
func TestBackupOfRemoteAttachments(t *testing.T) {
	ctx := context.Background()
	s3 := s3server.Start(t)
	h := newHarness(t, config.VarAttachmentsURL+"="+s3.URL)
	env := append(serverEnv(h, h.environ...), s3.Env...)
	cfg, err := config.Load(env)
	if err != nil {
		t.Fatal(err)
	}
	sts, err := app.OpenStores(ctx, cfg, nil, store.Options{}, app.KeepPlain)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sts.Store.CreateThread(ctx, store.Thread{ID: "t1", Title: "x", Author: "ann"}); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, mid := range []string{"m1", "m2"} {
		if _, err := sts.Store.AppendMessage(ctx, "t1", store.Message{ID: mid, Author: "ann", Body: json.RawMessage(`"b"`)}); err != nil {
			t.Fatal(err)
		}
		a, err := sts.Blobs.Upload(ctx, sts.Store, attachments.Upload{Thread: "t1", Message: mid, MaxBytes: 1 << 20,
			DeclaredSize: -1, Body: strings.NewReader(strings.Repeat(attachMarker, 1000))})
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, a.BlobName())
	}
	if err := sts.Close(); err != nil {
		t.Fatal(err)
	}

	archive := filepath.Join(filepath.Dir(h.dbPath), "b.tar")
	code, out, errOut := runBinary(t, env, "backup", "create", "--out", archive, "--json")
	if code != exitOK {
		t.Fatalf("backup create: exit %d\n%s%s", code, out, errOut)
	}
	raw, err := os.ReadFile(archive)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(raw, []byte(attachMarker)) || bytes.Contains(raw, []byte("attachments/t1/")) {
		t.Fatal("the backup of a remote store holds blob bytes")
	}
	for _, n := range names {
		if !bytes.Contains(raw, []byte(`"name":"`+n+`"`)) {
			t.Errorf("the manifest does not name blob %s", n)
		}
	}
	verify := func(env []string) (int, string) {
		code, out, errOut := runBinary(t, env, "backup", "verify", archive)
		return code, out + errOut
	}
	if code, out := verify(env); code != exitOK || !strings.Contains(out, "2 blobs named, in the s3:// store") {
		t.Fatalf("backup verify: exit %d\n%s", code, out)
	}
	if code, out := verify(withEnv(env, config.VarAttachmentsURL, "file:///nowhere/files")); code != exitFailed ||
		!strings.Contains(out, "s3:// store") || !strings.Contains(out, config.VarAttachmentsURL) {
		t.Fatalf("backup verify against a file:// store: exit %d\n%s; want 1 naming the backup's s3:// store", code, out)
	}
	if _, err := s3.Backend.DeleteObject(s3server.Bucket, names[1]); err != nil {
		t.Fatal(err)
	}
	if code, out := verify(env); code != exitFailed || !strings.Contains(out, "attachments/"+names[1]+": not in the s3:// store") ||
		strings.Contains(out, names[0]) {
		t.Fatalf("backup verify with a blob gone: exit %d\n%s; want 1 naming it alone", code, out)
	}
	s3.Close()
	if code, out := verify(env); code != exitFailed || !strings.Contains(out, "cannot be reached") {
		t.Fatalf("backup verify with the store down: exit %d\n%s; want 1 saying it cannot be reached", code, out)
	}
}
