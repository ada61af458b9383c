package faults

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestFaultNamedPipes puts named pipes (FIFOs) where the tools expect
// regular files: at the lease path, and as a *.jsonl file in the audit
// tree. Opening one for reading blocks until a writer comes, so a tool
// that opened it would hang for good (and ignore SIGTERM). Each tool must
// refuse it at once with an error that says what is there, and delete
// nothing.
func TestFaultNamedPipes(t *testing.T) {
	t.Parallel()
	t.Run("lease_path", func(t *testing.T) {
		s, _, before := prepareSite(t, t.TempDir(), smallSpec(), trialRand(t, 0))
		if err := os.MkdirAll(filepath.Dir(s.lease), 0o750); err != nil {
			t.Fatal(err)
		}
		if err := syscall.Mkfifo(s.lease, 0o640); err != nil {
			t.Fatal(err)
		}
		for _, args := range [][]string{{"retention", "run"}, {"retention", "status"}} {
			p := start(t, s.env(), args...)
			code, ok := p.waitTimeout(30 * time.Second)
			switch {
			case !ok:
				t.Errorf("%s hung on a named pipe at the lease path\n%s", p, p.output())
			case code == 0 || code == exitLeaseHeld:
				t.Errorf("%s exited %d with a named pipe at the lease path\n%s", p, code, p.output())
			case !strings.Contains(p.stderr.String()+p.stdout.String(), "named pipe"):
				t.Errorf("%s: the error does not say what is at the lease path\n%s", p, p.output())
			}
		}
		if after := snapshotLive(t, s.db); !sameKeys(before, after) {
			t.Errorf("the database changed: %d keys before, %d after", len(before.keys), len(after.keys))
		}
	})
	t.Run("audit_file", func(t *testing.T) {
		s := newSite(t.TempDir())
		month := filepath.Join(s.audit, "2025-01")
		if err := os.MkdirAll(month, 0o750); err != nil {
			t.Fatal(err)
		}
		fifo := filepath.Join(month, "retention-20250101T000000Z-0123456789ab.jsonl")
		if err := syscall.Mkfifo(fifo, 0o640); err != nil {
			t.Fatal(err)
		}
		p := start(t, s.env(), "audit", "verify", s.audit)
		code, ok := p.waitTimeout(30 * time.Second)
		switch {
		case !ok:
			t.Errorf("audit verify hung on a named pipe\n%s", p.output())
		case code != 1:
			t.Errorf("audit verify exited %d, want 1\n%s", code, p.output())
		case !strings.Contains(p.stdout.String()+p.stderr.String(), filepath.Base(fifo)) ||
			!strings.Contains(p.stdout.String()+p.stderr.String(), "not a regular file"):
			t.Errorf("audit verify does not name the file and its type\n%s", p.output())
		}
	})
}
