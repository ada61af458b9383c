package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/progressdb/progressdb/server/internal/api"
	"github.com/progressdb/progressdb/server/internal/cluster"
	"github.com/progressdb/progressdb/server/internal/cluster/etcdtest"
)

// TestClusterAttachmentStreamedForward sends attachments through a node
// that does not own their shard, whose calls to other nodes are cut after
// a second of silence: an upload bigger than a forwarded body may be, sent
// in pieces over longer than that second, is stored whole (the forward
// streams it, and each piece extends the call); a download read slowly
// arrives whole; an upload whose client falls silent is cut, and nothing
// of it is listed.
func TestClusterAttachmentStreamedForward(t *testing.T) {
	etcd := etcdtest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := cluster.CreateCluster(ctx, etcd.Client(t), cluster.Keys{Name: "chat"}, 2, []string{"node-a", "node-b"}); err != nil {
		t.Fatal(err)
	}
	const silence = time.Second
	a, b := startNodeWith(t, etcd, "node-a", true, silence), startNodeWith(t, etcd, "node-b", true, silence)
	for shard, n := range []*node{a, b} {
		if _, err := n.owner.WaitOwned(ctx, shard, 0); err != nil {
			t.Fatal(err)
		}
	}
	tid := threadIn(1, 2, "far") // node-b's
	send(t, a, "POST", "/v1/threads", `{"id":"`+tid+`","title":"x","author":"u"}`, nil, 201)
	send(t, a, "POST", "/v1/threads/"+tid+"/messages", `{"id":"m1","author":"u","body":"x"}`, nil, 201)
	base := a.srv.URL + "/v1/threads/" + tid + "/messages/m1/attachments"

	// 3 MiB, three times a forwarded body's limit, in 6 pieces 250 ms
	// apart: 1.5 s in all, never a second without a byte.
	file := bytes.Repeat([]byte("streamed-through-7Qz "), (3<<20)/21)
	if len(file) <= api.DefaultMaxBodyBytes {
		t.Fatal("the file must be larger than a forwarded body may be")
	}
	pr, pw := io.Pipe()
	go func() {
		piece := len(file)/6 + 1
		for off := 0; off < len(file); off += piece {
			if off > 0 {
				time.Sleep(250 * time.Millisecond)
			}
			if _, err := pw.Write(file[off:min(off+piece, len(file))]); err != nil {
				return
			}
		}
		_ = pw.Close()
	}()
	resp, err := http.Post(base, "application/octet-stream", pr) // chunked: no length declared
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("upload in pieces through node-a: %d %s", resp.StatusCode, body)
	}
	var up struct {
		ID   string `json:"attachment_id"`
		Size int64  `json:"size"`
	}
	if err := json.Unmarshal(body, &up); err != nil || up.Size != int64(len(file)) {
		t.Fatalf("upload answer %s: %v", body, err)
	}

	// Read 256 KiB at a time, 250 ms apart.
	resp, err = http.Get(base + "/" + up.ID)
	if err != nil {
		t.Fatal(err)
	}
	var got bytes.Buffer
	buf := make([]byte, 256<<10)
	for i := 0; ; i++ {
		if i > 0 && i <= 6 {
			time.Sleep(250 * time.Millisecond)
		}
		n, err := io.ReadFull(resp.Body, buf)
		got.Write(buf[:n])
		if err != nil {
			break
		}
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !bytes.Equal(got.Bytes(), file) {
		t.Fatalf("slow download through node-a: %d, %d bytes of %d, equal %v", resp.StatusCode, got.Len(), len(file),
			bytes.Equal(got.Bytes(), file))
	}

	// A client that sends 64 KiB and then nothing: the forward is cut
	// after the silence, with 503 naming the shard.
	pr, pw = io.Pipe()
	defer pw.Close()
	go func() { _, _ = pw.Write(file[:64<<10]) }()
	resp, err = http.Post(base, "application/octet-stream", pr)
	if err != nil {
		t.Fatal(err)
	}
	body, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("upload fallen silent: %d %s", resp.StatusCode, body)
	}

	wantCode(t, body, api.CodeShardUnavailable)
	var list struct {
		Attachments []struct {
			ID string `json:"attachment_id"`
		} `json:"attachments"`
	}
	if err := json.Unmarshal(send(t, b, "GET", "/v1/threads/"+tid+"/messages/m1/attachments", "", nil, 200), &list); err != nil {
		t.Fatal(err)
	}
	if len(list.Attachments) != 1 || list.Attachments[0].ID != up.ID {
		t.Fatalf("attachments after the cut upload: %+v, want only %s", list.Attachments, up.ID)
	}
}
