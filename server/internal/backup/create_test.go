package backup

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/progressdb/progressdb/server/pkg/store"
)

func TestCreateFileVerifies(t *testing.T) {
	for _, name := range []string{"b.tar", "b.tar.zst"} {
		t.Run(name, func(t *testing.T) {
			w := newWorld(t, true)
			w.thread("t1", 3)
			w.thread("t2", 2)
			res := w.run()
			ctx := context.Background()
			path := filepath.Join(w.dir, name)
			m, got, err := w.creator.CreateFile(ctx, path, false)
			if err != nil {
				t.Fatal(err)
			}
			if got != path {
				t.Fatalf("written to %s, want %s", got, path)
			}
			info, err := os.Stat(path)
			if err != nil {
				t.Fatal(err)
			}
			if info.Mode().Perm() != 0o600 {
				t.Errorf("mode %v, want 0600", info.Mode().Perm())
			}
			if m.Threads != 2 || m.Messages != 5 {
				t.Errorf("manifest counts %d threads %d messages, want 2 and 5", m.Threads, m.Messages)
			}
			if m.AuditHead.RunID != res.RunID || m.AuditHead.SHA256 == "" {
				t.Errorf("audit head %+v, want the run %s", m.AuditHead, res.RunID)
			}
			if m.Signature == "" {
				t.Error("manifest not signed")
			}
			noLeftovers(t, w)
			rep, err := Verify(ctx, path, w.key.Public().(ed25519.PublicKey), w.dir)
			if err != nil || !rep.Valid {
				t.Fatalf("verify: %v %+v", err, rep.Problems)
			}
			// The signature fails with another key.
			other, _, _ := ed25519.GenerateKey(rand.Reader)
			rep, err = Verify(ctx, path, other, w.dir)
			if err != nil || rep.Valid || !strings.Contains(strings.Join(rep.Problems, "\n"), "signature") {
				t.Fatalf("verify with another key: %v %+v", err, rep)
			}
		})
	}
}

// noLeftovers checks that no staging checkpoint and no temporary archive
// is left behind.
func noLeftovers(t *testing.T, w *world) {
	t.Helper()
	for _, pattern := range []string{filepath.Join(w.dbPath, ".backup-checkpoint-*"), filepath.Join(w.dir, ".*.tmp-*")} {
		if m, _ := filepath.Glob(pattern); len(m) > 0 {
			t.Errorf("left behind: %v", m)
		}
	}
}

func TestVerifyFindsTampering(t *testing.T) {
	w := newWorld(t, false)
	w.thread("t1", 50)
	ctx := context.Background()
	path := filepath.Join(w.dir, "b.tar")
	if _, _, err := w.creator.CreateFile(ctx, path, false); err != nil {
		t.Fatal(err)
	}
	orig, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	// Where the log (the data not yet in a table) starts in the archive.
	tableAt := entryOffset(t, orig, ".log")
	manifestAt := entryOffset(t, orig, ManifestName)
	cases := []struct {
		name string
		edit func([]byte) []byte
		want string
	}{
		{"table byte", func(b []byte) []byte { b[tableAt+10] ^= 1; return b }, "SHA-256 does not match"},
		{"cut short", func(b []byte) []byte { return b[:tableAt+5] }, "cut short"},
		{"manifest edited", func(b []byte) []byte {
			return bytes.Replace(b, []byte(`"threads":1`), []byte(`"threads":7`), 1)
		}, "7"},
		{"not a tar", func([]byte) []byte { return []byte("hello") }, "archive"},
		{"manifest byte", func(b []byte) []byte { b[manifestAt] = '['; return b }, "manifest.json"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			bad := filepath.Join(t.TempDir(), "bad.tar")
			if err := os.WriteFile(bad, c.edit(bytes.Clone(orig)), 0o600); err != nil {
				t.Fatal(err)
			}
			rep, err := Verify(ctx, bad, nil, t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			if rep.Valid || !strings.Contains(strings.Join(rep.Problems, "\n"), c.want) {
				t.Fatalf("problems %q, want one naming %q", rep.Problems, c.want)
			}
		})
	}
	// The untouched archive verifies.
	if rep, err := Verify(ctx, path, nil, t.TempDir()); err != nil || !rep.Valid {
		t.Fatalf("verify: %v %v", err, rep.Problems)
	}
}

// entryOffset is where the content of the first entry whose name ends
// with suffix starts in an uncompressed archive.
func entryOffset(t *testing.T, archive []byte, suffix string) int {
	t.Helper()
	cr := &countReader{r: bytes.NewReader(archive)}
	tr := tar.NewReader(cr)
	for {
		hdr, err := tr.Next()
		if err != nil {
			t.Fatalf("no entry ending %s: %v", suffix, err)
		}
		if strings.HasSuffix(hdr.Name, suffix) && hdr.Size > 20 {
			return int(cr.n)
		}
	}
}

type countReader struct {
	r io.Reader
	n int64
}

func (c *countReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// Every write acknowledged before the backup was asked for is in it,
// while writers keep writing through it.
func TestBackupHoldsAcknowledgedWrites(t *testing.T) {
	w := newWorld(t, false)
	w.thread("t", 0)
	ctx, cancel := context.WithCancel(context.Background())
	var mu sync.Mutex
	var acked []string
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ctx.Err() == nil; i++ {
				id := fmt.Sprintf("g%d-%d", g, i)
				body, _ := json.Marshal(id)
				if _, err := w.st.AppendMessage(context.Background(), "t", store.Message{ID: id, Author: "a", Body: body}); err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				acked = append(acked, id)
				mu.Unlock()
			}
		}()
	}
	waitFor(t, func() bool { mu.Lock(); defer mu.Unlock(); return len(acked) > 200 })
	mu.Lock()
	before := append([]string(nil), acked...)
	mu.Unlock()
	path := filepath.Join(w.dir, "b.tar")
	_, _, err := w.creator.CreateFile(ctx, path, false)
	cancel()
	wg.Wait()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	rep, err := Unpack(context.Background(), path, dir, "", nil)
	if err != nil || !rep.Valid {
		t.Fatalf("unpack: %v %v", err, rep.Problems)
	}
	st, err := store.Open(dir, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	for _, id := range before {
		if _, err := st.GetMessage(context.Background(), "t", id); err != nil {
			t.Fatalf("acknowledged message %s missing from the backup: %v", id, err)
		}
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for range 100000 {
		if cond() {
			return
		}
		time.Sleep(time.Millisecond)
	}
	t.Fatal("condition never held")
}

// A backup waits for a retention run going to end: the lease is held.
func TestBackupWaitsForRetentionLease(t *testing.T) {
	w := newWorld(t, false)
	w.thread("t1", 1)
	_, release, err := w.runner.Hold(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, _, err := w.creator.CreateFile(context.Background(), filepath.Join(w.dir, "b.tar"), false)
		done <- err
	}()
	select {
	case err := <-done:
		t.Fatalf("backup finished while the lease was held: %v", err)
	default:
	}
	release()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(w.dir, "b.tar")); err != nil {
		t.Fatal(err)
	}
}

func TestCreateInPathNeedsPath(t *testing.T) {
	w := newWorld(t, false)
	w.creator.path = ""
	if _, _, err := w.creator.CreateInPath(context.Background()); !errors.Is(err, ErrNoBackupPath) {
		t.Fatalf("got %v, want ErrNoBackupPath", err)
	}
}
