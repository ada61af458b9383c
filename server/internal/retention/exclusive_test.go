package retention

import (
	"context"
	"errors"
	"testing"
)

// While Exclusive's function runs, no run starts, in this process (the
// slot) or in another sharing the lease; its error comes back wrapped;
// after it, runs go again and the lease is free.
func TestExclusiveKeepsRunsOut(t *testing.T) {
	e := newEnv(t)
	r, other := e.runner(), e.runner()
	ctx := context.Background()
	boom := errors.New("boom")
	err := r.Exclusive(ctx, "test job", func(ctx context.Context, check func() error) error {
		if err := check(); err != nil {
			t.Fatalf("check inside: %v", err)
		}
		for name, rn := range map[string]*Runner{"this process": r, "another process": other} {
			if _, err := rn.Run(ctx, RunRequest{Trigger: "cli"}); !errors.Is(err, ErrLeaseHeld) {
				t.Errorf("a run from %s during the job: %v, want ErrLeaseHeld", name, err)
			}
		}
		if err := other.Exclusive(ctx, "second job", func(context.Context, func() error) error { return nil }); !errors.Is(err, ErrLeaseHeld) {
			t.Errorf("a second job during the first: %v, want ErrLeaseHeld", err)
		}
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("the job's error: %v", err)
	}
	if _, err := other.Run(ctx, RunRequest{Trigger: "cli"}); err != nil {
		t.Fatalf("a run after the job: %v", err)
	}
}
