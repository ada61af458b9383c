package api

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/progressdb/progressdb/server/internal/retention"
	"github.com/progressdb/progressdb/server/internal/wire"
)

// fakeRetention stands in for the retention service (not the store): it
// records requests and answers what the test sets.
type fakeRetention struct {
	mu       sync.Mutex
	requests []retention.RunRequest
	status   retention.Status
	result   retention.Result
	err      error // returned by Run and Start
	runID    string
}

func (f *fakeRetention) Run(ctx context.Context, req retention.RunRequest) (retention.Result, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.requests = append(f.requests, req)
	return f.result, f.err
}

func (f *fakeRetention) Start(ctx context.Context, req retention.RunRequest) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.requests = append(f.requests, req)
	if f.err != nil {
		return "", f.err
	}
	return f.runID, nil
}

func (f *fakeRetention) Status(ctx context.Context) (retention.Status, error) {
	st := f.status
	if st.Lease.State == "" {
		st.Lease.State = retention.LeaseNone // the real status always says
	}
	return st, nil
}

func (f *fakeRetention) lastRequest(t *testing.T) retention.RunRequest {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.requests) == 0 {
		t.Fatal("no run was requested")
	}
	return f.requests[len(f.requests)-1]
}

func TestRetentionStatus(t *testing.T) {
	next := time.Date(2030, 1, 2, 2, 0, 0, 0, time.UTC)
	fake := &fakeRetention{status: retention.Status{
		Enabled: true, Period: "720h0m0s", MessagePeriod: "24h0m0s", Cron: "0 2 * * *", NextRun: wire.At(next),
		Lease:   retention.LeaseStatus{Owner: "host-a/42", Held: true, State: retention.LeaseHeld},
		LastRun: &retention.Result{RunID: "r1", Status: "completed", Purged: 3, AuditFile: "2030-01/retention-x.jsonl"},
	}}
	e := newEnv(t, Options{AdminToken: "adm", Retention: fake})
	e.bearer = "adm"

	var got struct {
		Enabled bool   `json:"enabled"`
		Cron    string `json:"cron"`
		NextRun string `json:"next_run"`
		Lease   struct {
			Owner string `json:"owner"`
			Held  bool   `json:"held"`
		} `json:"lease"`
		LastRun struct {
			RunID  string `json:"run_id"`
			Purged int64  `json:"purged"`
		} `json:"last_run"`
	}
	e.expect(t, "GET", "/admin/retention", "", http.StatusOK).decode(t, &got)
	if !got.Enabled || got.Cron != "0 2 * * *" || got.NextRun != "2030-01-02T02:00:00Z" ||
		got.Lease.Owner != "host-a/42" || !got.Lease.Held || got.LastRun.RunID != "r1" || got.LastRun.Purged != 3 {
		t.Fatalf("status %+v", got)
	}
}

func TestRetentionRun(t *testing.T) {
	fake := &fakeRetention{
		result: retention.Result{RunID: "r2", Status: "completed", Scanned: 10, Eligible: 4, Purged: 4, KeysDeleted: 40},
		runID:  "r3",
	}
	e := newEnv(t, Options{AdminToken: "adm", Retention: fake})
	e.bearer = "adm"

	var res retention.Result
	e.expect(t, "POST", "/admin/retention/run", "", http.StatusOK).decode(t, &res)
	if res.RunID != "r2" || res.Purged != 4 || res.KeysDeleted != 40 {
		t.Fatalf("result %+v", res)
	}
	if req := fake.lastRequest(t); req.DryRun || req.Trigger != "admin" {
		t.Fatalf("request %+v", req)
	}

	e.expect(t, "POST", "/admin/retention/run", `{"dry_run":true}`, http.StatusOK)
	if req := fake.lastRequest(t); !req.DryRun {
		t.Fatalf("dry run not passed on: %+v", req)
	}

	var started struct {
		RunID string `json:"run_id"`
	}
	e.expect(t, "POST", "/admin/retention/run?wait=false", `{"dry_run":false}`, http.StatusAccepted).decode(t, &started)
	if started.RunID != "r3" {
		t.Fatalf("started %+v", started)
	}

	e.expect(t, "POST", "/admin/retention/run", `{"dry_run":"yes"}`, http.StatusBadRequest)
	e.expect(t, "POST", "/admin/retention/run", `{"dryrun":true}`, http.StatusBadRequest)
	e.expect(t, "POST", "/admin/retention/run?wait=later", "", http.StatusBadRequest)
	e.expect(t, "GET", "/admin/retention/run", "", http.StatusMethodNotAllowed)
}

func TestRetentionRunRefused(t *testing.T) {
	holder := retention.LeaseInfo{Owner: "host-b/7", Host: "host-b", PID: 7, Epoch: 12,
		Expires: wire.At(time.Date(2030, 1, 1, 0, 5, 0, 0, time.UTC))}

	for _, wait := range []string{"", "?wait=false"} {
		t.Run("lease held"+wait, func(t *testing.T) {
			fake := &fakeRetention{err: &retention.LeaseHeldError{Holder: holder}}
			e := newEnv(t, Options{AdminToken: "adm", Retention: fake})
			e.bearer = "adm"
			var body struct {
				Error  string               `json:"error"`
				Holder *retention.LeaseInfo `json:"holder"`
			}
			e.expect(t, "POST", "/admin/retention/run"+wait, "", http.StatusConflict).decode(t, &body)
			if body.Error == "" || body.Holder == nil || *body.Holder != holder {
				t.Fatalf("body %+v", body)
			}
		})
		t.Run("disabled"+wait, func(t *testing.T) {
			fake := &fakeRetention{err: retention.ErrDisabled}
			e := newEnv(t, Options{AdminToken: "adm", Retention: fake})
			e.bearer = "adm"
			if msg := e.expect(t, "POST", "/admin/retention/run"+wait, "", http.StatusConflict).errorText(t); msg != "retention is disabled" {
				t.Fatalf("message %q", msg)
			}
		})
	}

	t.Run("failed run", func(t *testing.T) {
		fake := &fakeRetention{
			result: retention.Result{RunID: "r4", Status: "failed", Failed: 1},
			err:    errors.New("audit folder not writable"),
		}
		e := newEnv(t, Options{AdminToken: "adm", Retention: fake})
		e.bearer = "adm"
		var body struct {
			Error  string            `json:"error"`
			Result *retention.Result `json:"result"`
		}
		e.expect(t, "POST", "/admin/retention/run", "", http.StatusInternalServerError).decode(t, &body)
		if body.Error == "" || body.Result == nil || body.Result.RunID != "r4" || body.Result.Status != "failed" {
			t.Fatalf("body %+v", body)
		}
	})

	t.Run("not configured", func(t *testing.T) {
		e := newEnv(t, Options{AdminToken: "adm"})
		e.bearer = "adm"
		for _, c := range []struct{ method, path, body string }{
			{"GET", "/admin/retention", ""},
			{"POST", "/admin/retention/run", ""},
			{"PUT", "/admin/retention/pause", `{"paused":true}`},
		} {
			if msg := e.expect(t, c.method, c.path, c.body, http.StatusServiceUnavailable).errorText(t); msg != "retention not configured" {
				t.Fatalf("%s %s: %q", c.method, c.path, msg)
			}
		}
	})
}

func (f *fakeRetention) SetPause(ctx context.Context, paused bool, reason string) (retention.PauseState, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.status.PauseState = retention.PauseState{Paused: paused, Reason: reason}
	return f.status.PauseState, f.err
}

func (f *fakeRetention) ThreadPolicy(ctx context.Context, tid string) (retention.ThreadPolicy, error) {
	return retention.ThreadPolicy{}, f.err
}

func (f *fakeRetention) SetThreadPolicy(ctx context.Context, tid string, o retention.PolicyOverride) (retention.ThreadPolicy, error) {
	return retention.ThreadPolicy{}, f.err
}

func (f *fakeRetention) ClearThreadPolicy(ctx context.Context, tid string) error { return f.err }
