package backup

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/progressdb/progressdb/server/internal/logging"
)

// BACKUP_KEEP is logged as every other duration is (README: a number of
// milliseconds under a key ending in _ms), by the scheduler's start and by
// each expiry, never as Go's "720h0m0s".
func TestBackupLogsKeepInMilliseconds(t *testing.T) {
	var buf lockedBuffer
	logger, _, err := logging.New(logging.Options{Format: "json", Stderr: &buf})
	if err != nil {
		t.Fatal(err)
	}
	w := newWorld(t, false)
	w.thread("t1", 1)
	w.backupAt(time.Now().Add(-40 * day))
	partial := filepath.Join(w.creator.Path(), ".progressdb-backup-20200101T000000Z-111111111111.tar.tmp-1")
	if err := os.WriteFile(partial, []byte("partial"), 0o600); err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-40 * day)
	if err := os.Chtimes(partial, old, old); err != nil {
		t.Fatal(err)
	}
	s, err := NewScheduler(SchedulerOptions{Creator: w.creator, Spec: "0 3 * * *", Keep: 30 * day, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	s.Start(ctx)
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(buf.String(), "backup_partial_removed") && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	s.Stop()
	seen := map[string]bool{}
	for _, line := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("%q: %v", line, err)
		}
		msg, _ := rec["msg"].(string)
		switch msg {
		case "backup_scheduler_started", "backup_expired", "backup_partial_removed":
		default:
			continue
		}
		seen[msg] = true
		if _, ok := rec["keep"]; ok {
			t.Errorf("%s logs keep as %v: want keep_ms", msg, rec["keep"])
		}
		if got := rec["keep_ms"]; got != float64((30 * day).Milliseconds()) {
			t.Errorf("%s: keep_ms %v, want %d", msg, got, (30 * day).Milliseconds())
		}
	}
	for _, msg := range []string{"backup_scheduler_started", "backup_expired", "backup_partial_removed"} {
		if !seen[msg] {
			t.Errorf("no %s line in:\n%s", msg, buf.String())
		}
	}
}

// lockedBuffer is a bytes.Buffer the scheduler's goroutine writes while
// the test reads it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
