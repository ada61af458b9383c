package retention

import (
	"context"
	"testing"
	"time"
)

// A cluster's shard adopts an erasure under the cluster's ID (spec §11.1):
// the single node's run purges the author's messages under that ID, and
// adopting it again once completed records nothing and starts no run, as
// a worker repeats it after a crash.
func TestAdoptRunsTheErasureUnderItsID(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	ks := sealEnv(e, nil)
	mids := e.thread("t1", 3, 2)
	r, err := NewRunner(RunnerOptions{Store: e.st, Config: e.cfg, Logger: e.logger, Metrics: e.metrics, Clock: e.clock,
		Keys: ks})
	if err != nil {
		t.Fatal(err)
	}
	m, err := NewService(ServiceOptions{Runner: r})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	const id = "00000000000000aa"
	requested := t0.Add(-time.Hour)
	ended := m.RunEnded()
	st, err := m.Adopt(ctx, id, "secret-author", requested)
	if err != nil {
		t.Fatal(err)
	}
	if st.ErasureID != id || st.Subject != ks.Subject("secret-author") || !st.RequestedAt.Equal(requested) {
		t.Fatalf("adopted: %+v", st)
	}
	// The run it started ends once the erasure is completed and its
	// key-store entry gone.
	select {
	case <-ended:
	case <-time.After(30 * time.Second):
		t.Fatalf("the erasure's run did not end\n%s", e.logs)
	}
	if st, err = m.Erasure(ctx, id); err != nil || st.Status != ErasureCompleted {
		t.Fatalf("after its run: %+v %v", st, err)
	}
	if st.MessagesPurged != int64(len(mids)) || st.VersionsPurged != 6 || st.KeysDestroyed != 1 || len(st.RunIDs) != 1 {
		t.Fatalf("completed: %+v", st)
	}
	again, err := m.Adopt(ctx, id, "secret-author", requested)
	if err != nil || again.Status != ErasureCompleted || len(again.RunIDs) != 1 {
		t.Fatalf("adopted again: %+v %v", again, err)
	}
	if pending, err := ks.PendingErasures(ctx); err != nil || len(pending) != 0 {
		t.Fatalf("key store entries after completion: %v %v", pending, err)
	}
}
