package api

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/progressdb/progressdb/server/internal/retention"
	"github.com/progressdb/progressdb/server/internal/wire"
	"github.com/progressdb/progressdb/server/pkg/attachments"
	"github.com/progressdb/progressdb/server/pkg/store"
)

// A subject erasure covers everything the author attached (spec §16):
// an attachment belongs to its message, and is sealed under the key of
// that message's author, who is the one who attached it. After POST
// /admin/erasures for ann, on a real sealed server with a file:// blob
// store: none of her attachments (one soft-deleted among them) is listed
// or downloadable, their blobs are gone from the folder, a copy of them
// taken before (an object version, a backup of the bucket) opens with
// no key of the key store, and no file of the folder holds any attachment
// in clear; bob's attachments in the same threads are intact.
func TestSubjectErasureCoversAttachments(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "files")
	blobs, err := attachments.Open(ctx, "file://"+filepath.ToSlash(dir))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = blobs.Close() })
	e, _ := sealedEnvWith(t, nil, blobs)
	for _, req := range [][2]string{
		{"/v1/threads", `{"id":"t1","title":"Plans","author":"ann"}`},
		{"/v1/threads", `{"id":"t2","title":"Other","author":"bob"}`},
		{"/v1/threads/t1/messages", `{"id":"m1","author":"ann","body":"mine"}`},
		{"/v1/threads/t1/messages", `{"id":"m2","author":"bob","body":"his"}`},
		{"/v1/threads/t2/messages", `{"id":"m3","author":"ann","body":"mine too"}`},
		{"/v1/threads/t2/messages", `{"id":"m4","author":"bob","body":"his too"}`},
	} {
		e.expect(t, "POST", req[0], req[1], 201)
	}
	upload := func(tid, mid string, data []byte) wire.Attachment {
		t.Helper()
		r := e.do(t, "POST", "/v1/threads/"+tid+"/messages/"+mid+"/attachments", data, http.Header{"Content-Type": {"image/png"}})
		if r.status != http.StatusCreated {
			t.Fatalf("upload to %s: %d %s", mid, r.status, clip(r.body))
		}
		var a wire.Attachment
		r.decode(t, &a)
		return a
	}
	annData := bytes.Repeat([]byte("ann-marker-5Kd "), 10_000) // past two segments
	bobData := bytes.Repeat([]byte("bob-marker-8Wq "), 10_000)
	ann := []wire.Attachment{upload("t1", "m1", annData), upload("t1", "m1", annData[:100]), upload("t2", "m3", annData)}
	bob := []wire.Attachment{upload("t1", "m2", bobData), upload("t2", "m4", bobData[:7])}
	e.expect(t, "DELETE", attachmentPath(ann[1]), "", 204)

	// What a copy of the bucket keeps: ann's blobs as stored, and their
	// records, which say which key sealed them.
	type copied struct {
		rec  store.Attachment
		blob []byte
	}
	var copies []copied
	for _, a := range ann {
		rec, err := e.store.GetAttachment(ctx, a.Thread, a.Message, a.AttachmentID)
		if err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(filepath.Join(dir, a.Thread, a.Message, a.AttachmentID))
		if err != nil {
			t.Fatal(err)
		}
		copies = append(copies, copied{rec, b})
	}

	var acc retention.ErasureAccepted
	e.send(t, "POST", "/admin/erasures", `{"author":"ann"}`, "Bearer adm").decode(t, &acc)
	var st retention.ErasureStatus
	for deadline := time.Now().Add(time.Minute); st.Status != retention.ErasureCompleted; time.Sleep(10 * time.Millisecond) {
		e.send(t, "GET", "/admin/erasures/"+acc.ErasureID, "", "Bearer adm").decode(t, &st)
		if st.Status == retention.ErasureFailed || time.Now().After(deadline) {
			t.Fatalf("erasure %+v", st)
		}
	}

	for _, a := range ann {
		e.expect(t, "GET", attachmentPath(a), "", 404)
		e.expect(t, "GET", "/v1/threads/"+a.Thread+"/messages/"+a.Message+"/attachments?include_deleted=true", "", 404)
		if _, err := os.Stat(filepath.Join(dir, a.Thread, a.Message, a.AttachmentID)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("blob of ann's attachment %s: %v", a.AttachmentID, err)
		}
	}
	for _, c := range copies {
		if _, err := e.store.AttachmentKey(ctx, c.rec); !errors.Is(err, store.ErrUnreadable) {
			t.Errorf("ann's attachment %s: its key still opens its copy (%v)", c.rec.ID, err)
		}
		if bytes.Contains(c.blob, []byte("ann-marker")) {
			t.Errorf("the copy of %s was in clear", c.rec.ID)
		}
	}
	for _, m := range []string{"ann-marker", "bob-marker"} {
		if hits := filesHolding(t, dir, []byte(m)); len(hits) > 0 {
			t.Errorf("%s in clear in %v", m, hits)
		}
	}
	for i, a := range bob {
		want := [][]byte{bobData, bobData[:7]}[i]
		if r := e.do(t, "GET", attachmentPath(a), nil, nil); r.status != 200 || !bytes.Equal(r.body, want) {
			t.Errorf("bob's attachment %s: %d, %d bytes", a.AttachmentID, r.status, len(r.body))
		}
		var list struct {
			Attachments []wire.Attachment `json:"attachments"`
		}
		e.expect(t, "GET", "/v1/threads/"+a.Thread+"/messages/"+a.Message+"/attachments", "", 200).decode(t, &list)
		if len(list.Attachments) != 1 || list.Attachments[0].AttachmentID != a.AttachmentID {
			t.Errorf("bob's listing of %s: %+v", a.Message, list.Attachments)
		}
	}
	if got := counterSum(t, e.reg, "progressdb_retention_blobs_purged_total"); got != float64(len(ann)) {
		t.Errorf("blobs purged = %v, want %d", got, len(ann))
	}
}
