package api

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/progressdb/progressdb/audit"
	"github.com/progressdb/progressdb/server/internal/retention"
	"github.com/progressdb/progressdb/server/internal/wire"
	"github.com/progressdb/progressdb/server/pkg/store"
)

// handlerErasures is the erasure service as the handlers see it: requests
// recorded in memory, one completed erasure with its receipt. It tests the
// routes (validation, statuses, codes, the documents' shapes checked
// against the description); the service itself is tested in retention.
type handlerErasures struct {
	mu   sync.Mutex
	byID map[string]retention.ErasureStatus
	n    int
}

func (h *handlerErasures) Request(_ context.Context, author string) (retention.ErasureAccepted, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if author == "busy" {
		return retention.ErasureAccepted{}, &retention.LeaseHeldError{Holder: retention.LeaseInfo{Owner: "other/1"}}
	}
	h.n++
	id := fmt.Sprintf("e%015d", h.n)
	h.byID[id] = retention.ErasureStatus{ErasureID: id, Status: retention.ErasureRunning, Subject: "hmac-sha256:00",
		RequestedAt: wire.At(time.Now().UTC()), HeldThreads: []string{}, RunIDs: []string{"r1"}}
	return retention.ErasureAccepted{ErasureID: id, RunID: "r1"}, nil
}

func (h *handlerErasures) Erasure(_ context.Context, id string) (retention.ErasureStatus, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	st, ok := h.byID[id]
	if !ok {
		return st, fmt.Errorf("erasure %s: %w", id, store.ErrNotFound)
	}
	return st, nil
}

func (h *handlerErasures) Receipt(ctx context.Context, id string) (audit.Receipt, error) {
	st, err := h.Erasure(ctx, id)
	if err != nil {
		return audit.Receipt{}, err
	}
	if st.Status != retention.ErasureCompleted {
		return audit.Receipt{}, retention.ErrErasureIncomplete
	}
	return audit.Receipt{Format: audit.ReceiptFormat, ErasureID: id, RequestedAt: st.RequestedAt.Time,
		CompletedAt: st.CompletedAt.Time, Subject: st.Subject, DatabaseID: "db1",
		Items:       []audit.ReceiptItem{{ItemType: audit.ItemMessage, ItemID: "m1", ThreadID: "t1"}},
		HeldThreads: []string{},
		Audit: []audit.ReceiptFile{{File: filepath.ToSlash(filepath.Join("2026-11", "retention-x.jsonl")),
			Lines: []audit.ReceiptLine{{Seq: 1, SHA256: strings.Repeat("0", 64)}}, FooterSHA256: strings.Repeat("1", 64)}},
	}, nil
}

// The erasure routes: 202 and the status and receipt documents as
// described, each refusal with its code; 409 sealing_disabled without
// sealing; 503 without retention or on a cluster node.
func TestErasureRoutes(t *testing.T) {
	es := &handlerErasures{byID: map[string]retention.ErasureStatus{}}
	now := time.Now().UTC()
	es.byID["done1"] = retention.ErasureStatus{ErasureID: "done1", Status: retention.ErasureCompleted,
		Subject: "hmac-sha256:00", RequestedAt: wire.At(now), CompletedAt: wire.At(now), KeysDestroyed: 2,
		VersionsPurged: 3, MessagesPurged: 2, HeldThreads: []string{"t9"}, RunIDs: []string{"r1"}}
	seen := &exercised{}
	e := retentionEnvWith(t, true, Options{AdminToken: "adm", Erasures: es})
	e.seen = seen
	const admin = "Bearer adm"
	check := func(env *testEnv, method, path, body, auth string, status int, code Code) response {
		t.Helper()
		r := env.send(t, method, path, body, auth)
		if r.status != status {
			t.Fatalf("%s %s: %d, want %d; %s", method, path, r.status, status, clip(r.body))
		}
		if code != "" {
			if got := r.errorCode(t); got != code {
				t.Errorf("%s %s: code %s, want %s", method, path, got, code)
			}
		}
		return r
	}

	var acc retention.ErasureAccepted
	check(e, "POST", "/admin/erasures", `{"author":"ann"}`, admin, 202, "").decode(t, &acc)
	if acc.ErasureID == "" || acc.RunID == "" {
		t.Fatalf("202 without ids: %+v", acc)
	}
	var st retention.ErasureStatus
	check(e, "GET", "/admin/erasures/"+acc.ErasureID, "", admin, 200, "").decode(t, &st)
	if st.ErasureID != acc.ErasureID || st.Status != retention.ErasureRunning {
		t.Errorf("status %+v", st)
	}
	check(e, "GET", "/admin/erasures/"+acc.ErasureID+"/receipt", "", admin, 409, CodeErasureIncomplete)
	var rc audit.Receipt
	check(e, "GET", "/admin/erasures/done1/receipt", "", admin, 200, "").decode(t, &rc)
	if rc.ErasureID != "done1" || len(rc.Items) != 1 {
		t.Errorf("receipt %+v", rc)
	}
	check(e, "GET", "/admin/erasures/done1", "", admin, 200, "")

	check(e, "POST", "/admin/erasures", `{}`, admin, 400, CodeInvalidField)
	check(e, "POST", "/admin/erasures", `{"author":""}`, admin, 400, CodeInvalidField)
	check(e, "POST", "/admin/erasures", `{"author":"`+strings.Repeat("a", 257)+`"}`, admin, 400, CodeInvalidField)
	check(e, "POST", "/admin/erasures", `{"author":"ann","thread":"t1"}`, admin, 400, CodeInvalidJSON)
	check(e, "POST", "/admin/erasures", "", admin, 400, CodeInvalidJSON)
	check(e, "POST", "/admin/erasures", `{"author":"`+strings.Repeat("a", DefaultMaxBodyBytes)+`"}`, admin, 413, CodeBodyTooLarge)
	check(e, "POST", "/admin/erasures", `{"author":"busy"}`, admin, 409, CodeLeaseHeld)
	check(e, "POST", "/admin/erasures", `{"author":"ann"}`, "", 401, CodeUnauthorized)
	check(e, "GET", "/admin/erasures/nope", "", admin, 404, CodeNotFound)
	check(e, "GET", "/admin/erasures/bad:id", "", admin, 400, CodeInvalidID)
	check(e, "GET", "/admin/erasures/done1", "", "", 401, CodeUnauthorized)
	check(e, "GET", "/admin/erasures/nope/receipt", "", admin, 404, CodeNotFound)
	check(e, "GET", "/admin/erasures/bad:id/receipt", "", admin, 400, CodeInvalidID)
	check(e, "GET", "/admin/erasures/done1/receipt", "", "", 401, CodeUnauthorized)

	closed := newEnv(t, Options{Erasures: es})
	closed.seen = seen
	check(closed, "POST", "/admin/erasures", `{"author":"ann"}`, admin, 403, CodeAdminDisabled)
	check(closed, "GET", "/admin/erasures/done1", "", admin, 403, CodeAdminDisabled)
	check(closed, "GET", "/admin/erasures/done1/receipt", "", admin, 403, CodeAdminDisabled)

	// Sealing off: no erasure service.
	plain := retentionEnvWith(t, true, Options{AdminToken: "adm"})
	plain.seen = seen
	for _, c := range [][3]string{{"POST", "/admin/erasures", `{"author":"ann"}`},
		{"GET", "/admin/erasures/done1", ""}, {"GET", "/admin/erasures/done1/receipt", ""}} {
		msg := check(plain, c[0], c[1], c[2], admin, 409, CodeSealingDisabled).errorText(t)
		if !strings.Contains(msg, "PROGRESSDB_KEK") {
			t.Errorf("%s %s: %q does not name PROGRESSDB_KEK", c[0], c[1], msg)
		}
	}

	// No retention service at all.
	bare := newEnv(t, Options{AdminToken: "adm", Erasures: es})
	bare.seen = seen
	check(bare, "POST", "/admin/erasures", `{"author":"ann"}`, admin, 503, CodeNotConfigured)
	check(bare, "GET", "/admin/erasures/done1", "", admin, 503, CodeNotConfigured)
	check(bare, "GET", "/admin/erasures/done1/receipt", "", admin, 503, CodeNotConfigured)

	for _, m := range missingExercise(t, seen) {
		if strings.Contains(m, "/admin/erasures") {
			t.Error(m)
		}
	}
}
