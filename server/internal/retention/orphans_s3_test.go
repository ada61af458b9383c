package retention

import (
	"context"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/progressdb/progressdb/audit"
	"github.com/progressdb/progressdb/server/internal/testtools/s3server"
	"github.com/progressdb/progressdb/server/pkg/attachments"
	"github.com/progressdb/progressdb/server/pkg/store"
)

// An S3 multipart upload an upload killed part way left open (its parts
// stored and billed) is aborted once begun longer ago than the grace
// period, and recorded once (orphan, the object's name and the upload's
// ID); a younger one waits, one of a recorded attachment stays.
func TestOrphanMultipartUploadAborted(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	fake := s3server.Start(t)
	bucket := s3server.Bucket
	u, err := url.Parse(fake.URL)
	if err != nil {
		t.Fatal(err)
	}
	endpoint := u.Query().Get("endpoint")
	blobs, err := attachments.Open(ctx, fake.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = blobs.Close() })
	client := s3.New(s3.Options{Region: "us-east-1", BaseEndpoint: aws.String(endpoint), UsePathStyle: true,
		Credentials: aws.AnonymousCredentials{}})
	open := func(name string) string {
		out, err := client.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: aws.String(bucket), Key: aws.String(name)})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := client.UploadPart(ctx, &s3.UploadPartInput{Bucket: aws.String(bucket), Key: aws.String(name),
			UploadId: out.UploadId, PartNumber: aws.Int32(1), Body: strings.NewReader("a part of a killed upload")}); err != nil {
			t.Fatal(err)
		}
		return *out.UploadId
	}
	openUploads := func() map[string]string {
		got := map[string]string{}
		if err := blobs.OpenUploads(ctx, func(u attachments.OpenUpload) (bool, error) {
			got[u.Name] = u.ID
			return true, nil
		}); err != nil {
			t.Fatal(err)
		}
		return got
	}

	e.cfg.OrphanGrace = time.Hour
	mids := e.thread("t1", 1, 1)
	kept := e.attach(blobs, "t1", mids[0], []byte("recorded"))
	orphan := e.st.NewID()
	name := store.BlobName("t1", mids[0], orphan)
	id := open(name)
	open(kept.BlobName()) // a stray upload to a recorded attachment's name: not an orphan
	if got := openUploads(); got[name] != id || len(got) != 2 {
		t.Fatalf("open uploads = %v", got)
	}
	setClock := func(at time.Time) {
		e.clock.mu.Lock()
		e.clock.now = at
		e.clock.mu.Unlock()
	}
	setClock(time.Now().Add(30 * time.Minute)) // within the grace period
	_, ra := e.run(e.blobRunner(blobs), RunRequest{})
	ra.noItem(t, orphan)
	setClock(time.Now().Add(2 * time.Hour))
	_, ra = e.run(e.blobRunner(blobs), RunRequest{})
	if got := openUploads(); len(got) != 1 || got[kept.BlobName()] == "" {
		t.Fatalf("open uploads after the sweep = %v, want only the recorded attachment's", got)
	}
	it := ra.item(t, orphan)
	if it.ItemType != audit.ItemAttachment || !it.Orphan || it.Blob != name || it.Upload != id || it.Size != nil || it.SHA256 != "" {
		t.Fatalf("record of the aborted upload = %+v", it)
	}
	ra.noItem(t, kept.ID)
	if !e.blobExists(blobs, kept) {
		t.Fatal("the recorded attachment's blob is gone")
	}
	_, ra = e.run(e.blobRunner(blobs), RunRequest{})
	ra.noItem(t, orphan)
}
