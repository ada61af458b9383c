package retention

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/progressdb/progressdb/audit"
	"github.com/progressdb/progressdb/server/pkg/keystore"
	"github.com/progressdb/progressdb/server/pkg/store"
)

// randomBytes are n bytes no compressor shortens, the same every run.
func randomBytes(n int, seed uint64) []byte {
	rng := rand.New(rand.NewPCG(seed, seed))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	return b
}

// exportedAttachments reads every attachment of every record in the
// export files under root (sealed or left in progress), by ID, counting
// how many times each was exported.
func exportedAttachments(t *testing.T, root string) (map[string]audit.ExportAttachment, map[string]int) {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(root, "*", "export-*"))
	got, n := map[string]audit.ExportAttachment{}, map[string]int{}
	for _, f := range files {
		if strings.HasSuffix(f, ".corrupt") {
			t.Fatalf("%s set aside as damaged", f)
		}
		for _, rec := range exportRecords(t, f) {
			for _, a := range rec.Attachments {
				got[a.ID] = a
				n[a.ID]++
			}
		}
	}
	return got, n
}

// An exported purge's archive holds its attachments, byte-exact and in
// the clear (opened, as sealed bodies are), with their metadata, before
// the blobs go: a thread's all, a message's its own.
func TestExportHoldsAttachments(t *testing.T) {
	for _, sealed := range []bool{false, true} {
		name := "plain"
		if sealed {
			name = "sealed"
		}
		t.Run(name, func(t *testing.T) {
			e, blobs := blobEnv(t)
			var ks *keystore.KeyStore
			if sealed {
				ks = sealEnv(e, nil)
			}
			root := e.exportOn()
			mids := e.thread("t1", 2, 1)
			live := e.thread("live", 2, 1)
			big := randomBytes(3*64<<10+5, 7) // past three segments
			files, byID := map[string][]byte{}, map[string]store.Attachment{}
			a1 := e.attach(blobs, "t1", mids[0], big)
			a2 := e.attach(blobs, "t1", mids[1], nil)
			a3 := e.attach(blobs, "live", live[0], []byte("hello"))
			a4 := e.attach(blobs, "live", live[1], []byte("stays"))
			files[a1.ID], files[a2.ID], files[a3.ID] = big, []byte{}, []byte("hello")
			for _, a := range []store.Attachment{a1, a2, a3} {
				byID[a.ID] = a
			}
			e.deleteThread("t1")
			e.deleteMessage("live", live[0])
			e.at(31 * day)

			r, err := NewRunner(RunnerOptions{Store: e.st, Config: e.cfg, Logger: e.logger, Metrics: e.metrics,
				Clock: e.clock, Host: "test-host", PID: 4242, Version: "test", Blobs: blobs, Keys: ks})
			if err != nil {
				t.Fatal(err)
			}
			res, ra := e.run(r, RunRequest{})
			if res.Exported != 2 || res.Purged < 2 {
				t.Fatalf("run: %+v", res)
			}
			got, n := exportedAttachments(t, root)
			if len(got) != 3 {
				t.Fatalf("exported attachments %v, want %s %s %s", n, a1.ID, a2.ID, a3.ID)
			}
			for id, want := range files {
				a := got[id]
				sum := sha256.Sum256(want)
				if n[id] != 1 || !bytes.Equal(a.Data, want) || a.Data == nil || a.Size != int64(len(want)) ||
					a.SHA256 != hex.EncodeToString(sum[:]) || a.Filename != "x.pdf" || a.ContentType != "application/pdf" ||
					a.Key != 0 || a.Sealed != "" {
					t.Errorf("attachment %s exported %d times as %+v (%d bytes)", id, n[id], a.AttachmentMeta, len(a.Data))
				}
				if e.blobExists(blobs, byID[id]) {
					t.Errorf("blob of %s left after the purge", id)
				}
				if it := ra.item(t, id); it.ItemType != audit.ItemAttachment || it.Status != audit.StatusPurged {
					t.Errorf("audit record of %s = %+v", id, it)
				}
			}
			if got[a3.ID].Message != live[0] || got[a1.ID].Thread != "t1" {
				t.Errorf("metadata: %+v / %+v", got[a3.ID].AttachmentMeta, got[a1.ID].AttachmentMeta)
			}
			if !e.blobExists(blobs, a4) {
				t.Error("the live message's attachment went")
			}
		})
	}
}

// A run killed (kill -9) after its export and its purge, before the
// blob's deletion: the archive holds the attachment, once, and the next
// run deletes the blob without exporting it again.
func TestExportedAttachmentSurvivesKill(t *testing.T) {
	e, blobs := blobEnv(t)
	root := e.exportOn()
	mids := e.thread("t1", 1, 1)
	body := randomBytes(70<<10, 9)
	a := e.attach(blobs, "t1", mids[0], body)
	e.deleteThread("t1")
	e.killedAtBlobDelete(true)
	if e.exists(store.KindThread, "t1") || !e.blobExists(blobs, a) {
		t.Fatal("the child should have exported and purged the thread, and died before its blob")
	}
	if got, n := exportedAttachments(t, root); n[a.ID] != 1 || !bytes.Equal(got[a.ID].Data, body) {
		t.Fatalf("after the kill the archive holds %s %d times", a.ID, n[a.ID])
	}

	_, ra := e.run(e.blobRunner(blobs), RunRequest{})
	if e.blobExists(blobs, a) {
		t.Fatal("the next run left the owed blob")
	}
	if it := ra.item(t, a.ID); !it.Recovered {
		t.Fatalf("record = %+v", it)
	}
	got, n := exportedAttachments(t, root)
	if n[a.ID] != 1 || !bytes.Equal(got[a.ID].Data, body) {
		t.Fatalf("the archive holds %s %d times, want once byte-exact", a.ID, n[a.ID])
	}
	files, _ := filepath.Glob(filepath.Join(root, "*", "*.inprogress"))
	if len(files) != 0 {
		t.Fatalf("exports left in progress: %v", files)
	}
}

// exportMeta copies every field of the store's attachment record into
// the export's, so that a field added to store.Attachment is exported
// or named here as the store's own: the two types are kept apart on
// purpose (audit.AttachmentMeta says why) and must not drift.
func TestExportMetaCopiesEveryField(t *testing.T) {
	var a store.Attachment
	v := reflect.ValueOf(&a).Elem()
	for i := range v.NumField() { // a distinct non-zero value in each
		f := v.Field(i)
		switch f.Kind() {
		case reflect.String:
			f.SetString(fmt.Sprintf("v%d", i))
		case reflect.Int64:
			f.SetInt(int64(100 + i))
		case reflect.Uint32:
			f.SetUint(uint64(100 + i))
		case reflect.Bool:
			f.SetBool(true)
		default:
			t.Fatalf("store.Attachment.%s: kind %s not handled by this test", v.Type().Field(i).Name, f.Kind())
		}
	}
	asMap := func(x any) map[string]any {
		b, err := json.Marshal(x)
		if err != nil {
			t.Fatal(err)
		}
		m := map[string]any{}
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatal(err)
		}
		return m
	}
	stored, exported := asMap(a), asMap(exportMeta(a))
	// The store's bookkeeping, never exported; key and sealed are set by
	// the caller only when the bytes stay sealed (the plain shape has none).
	storeOnly := map[string]bool{"purge_run": true}
	callerSets := map[string]bool{"key": true, "sealed": true}
	for k, want := range stored {
		got, ok := exported[k]
		switch {
		case storeOnly[k] || callerSets[k] && !ok:
		case !ok:
			t.Errorf("store field %q is not exported: copy it in exportMeta or name it store-only here", k)
		case got != want:
			t.Errorf("%q exported as %v, stored as %v", k, got, want)
		}
	}
	for k := range exported {
		if _, ok := stored[k]; !ok {
			t.Errorf("exported field %q has no store field", k)
		}
	}
}
