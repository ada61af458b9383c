package retention

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/progressdb/progressdb/audit"
	"github.com/progressdb/progressdb/server/internal/testtools"
	"github.com/progressdb/progressdb/server/pkg/attachments"
	"github.com/progressdb/progressdb/server/pkg/store"
)

const (
	envBlobHelper       = "PROGRESSDB_BLOB_KILL_HELPER" // the folder of the test's world
	envBlobHelperExport = "PROGRESSDB_BLOB_KILL_EXPORT" // set: the child's run exports
)

// killingBlobs is a blob store whose first delete kills the process
// (SIGKILL): the purge's records are deleted and recorded, the blob not.
// Reads go to the store it wraps.
type killingBlobs struct{ BlobStore }

func (killingBlobs) Delete(context.Context, string) error {
	_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
	select {}
}

// TestBlobKillHelperProcess is not a test: TestOwedBlobSurvivesKill runs
// the test binary again with it selected, and the child dies in it.
func TestBlobKillHelperProcess(t *testing.T) {
	dir := os.Getenv(envBlobHelper)
	if dir == "" {
		return
	}
	e := newEnv(t)
	if err := e.st.Close(); err != nil {
		t.Fatal(err)
	}
	var err error
	e.at(31 * day)
	if e.st, err = store.Open(filepath.Join(dir, "db"), store.Options{Now: e.clock.Now}); err != nil {
		t.Fatal(err)
	}
	e.cfg.AuditPath = filepath.Join(dir, "audit")
	e.cfg.LeasePath = filepath.Join(dir, "audit", "retention.lock")
	if os.Getenv(envBlobHelperExport) != "" {
		e.cfg.ExportPath = filepath.Join(dir, "exports")
	}
	blobs, err := attachments.Open(context.Background(), "file://"+filepath.Join(dir, "blobs"))
	if err != nil {
		t.Fatal(err)
	}
	_, _ = e.blobRunner(killingBlobs{blobs}).Run(context.Background(), RunRequest{})
	t.Fatal("the run ended: the blob delete should have killed the process")
}

// A run killed (kill -9) after its thread purge deleted an attachment's
// record, before the blob: the next run deletes the blob and records it
// once, as recovered.
func TestOwedBlobSurvivesKill(t *testing.T) {
	e, blobs := blobEnv(t)
	mids := e.thread("t1", 1, 1)
	a := e.attach(blobs, "t1", mids[0], []byte("kill me softly"))
	e.deleteThread("t1")
	e.killedAtBlobDelete(false)
	if e.exists(store.KindThread, "t1") || !e.blobExists(blobs, a) {
		t.Fatal("the child should have purged the thread and died before its blob")
	}
	res, ra := e.run(e.blobRunner(blobs), RunRequest{})
	if e.blobExists(blobs, a) {
		t.Fatal("the next run left the owed blob")
	}
	if it := ra.item(t, a.ID); !it.Recovered || it.ItemType != audit.ItemAttachment {
		t.Fatalf("record = %+v", it)
	}
	// One record of the blob in the whole trail; the child's file sealed.
	n := 0
	for _, f := range e.auditFiles() {
		if strings.HasSuffix(f, ".inprogress") {
			t.Fatalf("%s left in progress", f)
		}
		if !strings.HasSuffix(f, ".jsonl") || strings.HasPrefix(filepath.Base(f), "export") {
			continue
		}
		for _, it := range readAudit(t, f).Items {
			if it.ItemID == a.ID {
				n++
			}
		}
	}
	if n != 1 {
		t.Fatalf("%d records of attachment %s in the trail (run %s), want 1", n, a.ID, res.RunID)
	}
	if owed, err := e.st.OwedBlobs(context.Background()); err != nil || len(owed) != 0 {
		t.Fatalf("owed after the run = %+v, %v", owed, err)
	}
}

// killedAtBlobDelete closes the env's store, runs retention in a child
// process (exporting, when export) that is killed (SIGKILL) at its first
// blob delete, and opens the store again at the run's time.
func (e *env) killedAtBlobDelete(export bool) {
	t := e.t
	t.Helper()
	if err := e.st.Close(); err != nil {
		t.Fatal(err)
	}
	env := []string{envBlobHelper + "=" + e.dir}
	if export {
		env = append(env, envBlobHelperExport+"=1")
	}
	c := testtools.StartChild(t, "TestBlobKillHelperProcess", env...)
	var out []string
	for line, ok := c.Line(); ok; line, ok = c.Line() {
		out = append(out, line)
	}
	err := c.Wait()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("child: %v, want killed by SIGKILL; output:\n%s", err, strings.Join(out, "\n"))
	}
	e.at(31 * day)
	st, err := store.Open(filepath.Join(e.dir, "db"), store.Options{Now: e.clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	e.st = st
	t.Cleanup(func() { _ = st.Close() })
}
