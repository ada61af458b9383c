package app

import (
	"bytes"
	"context"
	"encoding/base64"
	"io"
	"log/slog"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/progressdb/progressdb/server/pkg/config"
	"github.com/progressdb/progressdb/server/pkg/store/storetest"
)

// Markers of sealed content; '-' is not base64, so no ciphertext holds one.
const (
	sealTitle  = "seal-title-Xq9"
	sealAuthor = "seal-author-Xq9"
	sealBody   = "seal-body-Xq9"
)

func sealKEK() string {
	return "base64key://" + base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{3}, 32))
}

// serveFor runs Serve with env until the returned stop is called.
func serveFor(t *testing.T, env []string) (addr string, stop func()) {
	t.Helper()
	addr = freeAddr(t)
	cfg, err := config.Load(append(env, "PROGRESSDB_ADDR="+addr))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Serve(ctx, cfg, slog.New(slog.NewTextHandler(io.Discard, nil))) }()
	if code := waitAnswering(t, addr); code != http.StatusOK {
		t.Fatalf("healthz: %d", code)
	}
	return addr, func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("Serve: %v", err)
			}
		case <-time.After(20 * time.Second):
			t.Fatal("Serve did not return after cancellation")
		}
	}
}

// A server with PROGRESSDB_KEK answers titles, authors and bodies as
// written, across a restart, while no file of DB_PATH or of the key store
// holds any of them (tables decoded, WAL tails read).
func TestServeSealsContent(t *testing.T) {
	dir := t.TempDir()
	db, keys := filepath.Join(dir, "data"), filepath.Join(dir, "keys")
	env := []string{"PROGRESSDB_DB_PATH=" + db, "PROGRESSDB_KEK=" + sealKEK(), "PROGRESSDB_KEYSTORE_PATH=" + keys}
	addr, stop := serveFor(t, env)
	base := "http://" + addr + "/v1"
	if code, body := call(t, "POST", base+"/threads", `{"id":"t1","title":"`+sealTitle+`","author":"`+sealAuthor+`"}`, nil); code != http.StatusCreated {
		t.Fatalf("create thread: %d %s", code, body)
	}
	if code, body := call(t, "POST", base+"/threads/t1/messages", `{"id":"m1","author":"`+sealAuthor+`","body":{"text":"`+sealBody+`"}}`, nil); code != http.StatusCreated {
		t.Fatalf("append: %d %s", code, body)
	}
	check := func() {
		t.Helper()
		if _, body := call(t, "GET", base+"/threads/t1", "", nil); !strings.Contains(string(body), `"title":"`+sealTitle+`"`) || !strings.Contains(string(body), `"author":"`+sealAuthor+`"`) {
			t.Errorf("thread: %s", body)
		}
		if _, body := call(t, "GET", base+"/threads/t1/messages", "", nil); !strings.Contains(string(body), sealBody) || !strings.Contains(string(body), sealAuthor) {
			t.Errorf("messages: %s", body)
		}
	}
	check()
	stop()
	addr, stop = serveFor(t, env)
	base = "http://" + addr + "/v1"
	check()
	stop()
	storetest.RequireNone(t, db, sealTitle, sealAuthor, sealBody)
	storetest.RequireNone(t, keys, sealTitle, sealAuthor, sealBody)
}
