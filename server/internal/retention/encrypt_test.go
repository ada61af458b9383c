package retention

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/progressdb/progressdb/server/pkg/store"
	"github.com/progressdb/progressdb/server/pkg/store/storetest"
)

// plainThenSealed writes n threads of 2 messages of 2 versions in plain,
// then turns e into a sealing server's world.
func plainThenSealed(e *env, n int) {
	e.t.Helper()
	sealEnv(e, func() {
		for i := range n {
			e.thread(string(rune('a'+i)), 2, 2)
		}
	})
}

// A sealing pass stops at the batch after a pause, refuses to start while
// paused, and once resumed finishes from where it stopped: the counts move
// from plain to sealed, the plaintext is erased from every file, and a
// second pass finds nothing to do. Its batches reach the runner's hook.
func TestEncryptExistingPauseAndResume(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	e.cfg.BatchSize = 2
	plainThenSealed(e, 4)
	r := e.runner()
	var batches int
	r.hooks.beforeBatch = func(ctx context.Context, b batchPoint) {
		batches = b.N
		if b.Lease == nil {
			t.Error("the hook sees no lease")
		}
		if b.N == 4 {
			if _, err := r.SetPause(ctx, true, "incident"); err != nil {
				t.Error(err)
			}
		}
	}
	var reports []EncryptProgress
	res, err := r.EncryptExisting(ctx, EncryptRequest{Progress: func(p EncryptProgress) { reports = append(reports, p) }})
	// Thread a's 5 records in batches of 2, 2 and 1; the pause stops the
	// first batch of thread b.
	if !errors.Is(err, ErrPaused) || batches != 4 || res.Sealed != 5 || res.Threads != 1 || res.Erased {
		t.Fatalf("paused at the 4th batch: %+v %v (batches %d), want ErrPaused after thread a's 5 records, nothing erased", res, err, batches)
	}
	if res.Before != (store.ThreadCounts{Plain: 4}) {
		t.Fatalf("counts before: %+v, want 4 plain", res.Before)
	}
	c, err := e.st.CountThreads(ctx, "")
	if err != nil || c.Sealed == 0 || c.Plain == 0 {
		t.Fatalf("counts after a paused pass: %+v %v, want some sealed and some plain", c, err)
	}
	if _, err := r.EncryptExisting(ctx, EncryptRequest{}); !errors.Is(err, ErrPaused) {
		t.Fatalf("while paused: %v, want ErrPaused", err)
	}

	if _, err := r.SetPause(ctx, false, ""); err != nil {
		t.Fatal(err)
	}
	r.hooks.beforeBatch = nil
	reports = nil
	res, err = r.EncryptExisting(ctx, EncryptRequest{Progress: func(p EncryptProgress) { reports = append(reports, p) }})
	if err != nil || !res.Resumed || res.Sealed != 4*(1+2*2)-5 || !res.Erased {
		t.Fatalf("resumed: %+v %v, want the %d records left sealed, then erased", res, err, 4*5-5)
	}
	last := reports[len(reports)-1]
	if last.Step != EncryptErasing || last.Erase == nil || last.Total != 4 || last.Done != 4 || last.Records != res.Sealed {
		t.Fatalf("last progress %+v, want the erase step at 4/4 threads", last)
	}
	var sealing bool
	for _, p := range reports {
		sealing = sealing || (p.Step == EncryptSealing && p.Done == 4 && p.Total == 4)
	}
	if !sealing {
		t.Fatalf("no report of the sealing at 4/4: %+v", reports)
	}
	if c, err := e.st.CountThreads(ctx, ""); err != nil || c != (store.ThreadCounts{Sealed: 4}) {
		t.Fatalf("counts after: %+v %v, want 4 sealed", c, err)
	}
	if err := e.st.DB().Flush(); err != nil {
		t.Fatal(err)
	}
	scan, err := storetest.Scan(filepath.Join(e.dir, "db"), []string{"secret title", "secret-author", "secret body"})
	if err != nil {
		t.Fatal(err)
	}
	if found := scan.Found(); len(found) > 0 {
		t.Fatalf("plaintext left in the files after the pass: %v", found)
	}
	res, err = r.EncryptExisting(ctx, EncryptRequest{})
	if err != nil || res.Resumed || res.Sealed != 0 || res.Erased || res.Threads != 4 {
		t.Fatalf("second pass: %+v %v, want nothing to seal or erase", res, err)
	}
	for _, line := range []string{`"keys_encrypt_started"`, `"keys_encrypt_progress"`, `"keys_encrypt_erased"`} {
		if !strings.Contains(e.logs.String(), line) {
			t.Errorf("no %s line", line)
		}
	}
}

// The pass paces its batches with the runner's clock (BATCH_PAUSE between
// batches that sealed), and not with a sleep of its own: on a fake clock it
// waits until the clock is moved.
func TestEncryptExistingPacesOnTheRunnersClock(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	e.cfg.BatchSize = 5
	e.cfg.BatchPause = 10 * time.Second
	plainThenSealed(e, 2)
	r := e.runner()
	done := make(chan error, 1)
	go func() {
		_, err := r.EncryptExisting(ctx, EncryptRequest{})
		done <- err
	}()
	var pauses []time.Duration
	for range 2 {
		select {
		case err := <-done:
			t.Fatalf("the pass ended before pausing: %v", err)
		case <-time.After(100 * time.Millisecond):
		} // one full batch per thread
		pauses = append(pauses, e.clock.waitTimers(t, 1)...)
		select {
		case err := <-done:
			t.Fatalf("the pass ended while its pause waited: %v", err)
		default:
		}
		e.clock.Advance(15 * time.Second)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	for _, p := range pauses {
		if p < 8*time.Second || p > 12*time.Second {
			t.Fatalf("pauses %v, want BATCH_PAUSE ±20%%", pauses)
		}
	}
}

// The lease keeps a pass and a run apart; a store that does not seal has
// nothing to seal with.
func TestEncryptExistingRefusals(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	if _, err := e.runner().EncryptExisting(ctx, EncryptRequest{}); !errors.Is(err, store.ErrNotSealing) {
		t.Fatalf("without sealing: %v, want store.ErrNotSealing", err)
	}
	plainThenSealed(e, 1)
	held, err := AcquireLease(ctx, e.runner().leaseConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer held.Release()
	var lh *LeaseHeldError
	if res, err := e.runner().EncryptExisting(ctx, EncryptRequest{}); !errors.As(err, &lh) || res.Sealed != 0 {
		t.Fatalf("lease held: %+v %v, want a *LeaseHeldError and nothing sealed", res, err)
	}
}
