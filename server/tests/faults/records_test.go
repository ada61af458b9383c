package faults

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"testing"
)

// TestFaultKillAfterPurgedRecord kills `progressdb retention run` with
// SIGKILL the moment its audit file holds a "purged" record: most kills
// land after a group's records are written and before its purge markers
// are cleared, the instant at which the next run must not record the same
// purges a second time (spec §5: exactly one purged record per item). The
// next run completes, and every invariant is checked.
func TestFaultKillAfterPurgedRecord(t *testing.T) {
	t.Parallel()
	spec := crashSpec()
	for i := range suite.trials {
		t.Run(fmt.Sprintf("trial_%d", i), func(t *testing.T) {
			rng := trialRand(t, i)
			s, fx, before := prepareSite(t, t.TempDir(), spec, rng)
			crashes := &crashLog{}
			p := startRetention(t, pacedEnv(s))
			if killOnPurgedRecord(p, s.audit) {
				crashes.killed(t, s, fx, before, "after the first purged record")
			} else if code := p.wait(t, processTimeout); code != 0 {
				t.Fatalf("exit %d\n%s", code, p.output())
			}
			crashUntilComplete(t, s, fx, before, pacedEnv(s), 0, rng, 0)
			checkInvariants(t, s, fx, before, crashes.abandoned)
		})
	}
}

// killOnPurgedRecord watches the in-progress audit file under root and
// kills p as soon as it holds a purged record; it reports whether it
// killed p before p finished. It reads only what was appended since its
// last look and does not sleep, so the kill follows the write closely.
func killOnPurgedRecord(p *proc, root string) bool {
	var f *os.File
	defer func() {
		if f != nil {
			f.Close()
		}
	}()
	buf := make([]byte, 64<<10)
	var tail []byte
	for {
		select {
		case <-p.done:
			return false
		default:
		}
		if f == nil {
			files, _ := filepath.Glob(filepath.Join(root, "*", "*.jsonl.inprogress"))
			if len(files) == 0 {
				runtime.Gosched()
				continue
			}
			var err error
			if f, err = os.Open(files[0]); err != nil {
				continue
			}
		}
		n, _ := f.Read(buf)
		if n == 0 {
			runtime.Gosched()
			continue
		}
		tail = append(tail, buf[:n]...)
		if bytes.Contains(tail, []byte(`"status":"purged"`)) {
			p.kill()
			return true
		}
		if i := bytes.LastIndexByte(tail, '\n'); i >= 0 {
			tail = tail[i+1:]
		}
	}
}
