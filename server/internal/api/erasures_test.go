package api

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"log/slog"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"gocloud.dev/secrets/localsecrets"

	"github.com/progressdb/progressdb/audit"
	"github.com/progressdb/progressdb/server/internal/retention"
	"github.com/progressdb/progressdb/server/pkg/attachments"
	"github.com/progressdb/progressdb/server/pkg/config"
	"github.com/progressdb/progressdb/server/pkg/keystore"
	"github.com/progressdb/progressdb/server/pkg/store"
)

// openSealedStore opens a sealed store in dir/db with its key store in
// dir/keys, under a fixed local KEK; the store closes the key store.
func openSealedStore(t *testing.T, dir string) (*store.Store, *keystore.KeyStore) {
	t.Helper()
	var kek [32]byte
	for i := range kek {
		kek[i] = byte(i + 1)
	}
	keeper := localsecrets.NewKeeper(kek)
	t.Cleanup(func() { _ = keeper.Close() })
	ks, err := keystore.Open(context.Background(), filepath.Join(dir, "keys"), keystore.Options{Keeper: keeper})
	if err != nil {
		t.Fatal(err)
	}
	st, err := store.Open(filepath.Join(dir, "db"), store.Options{Sealer: ks, Closer: ks})
	if err != nil {
		_ = ks.Close()
		t.Fatal(err)
	}
	return st, ks
}

// sealedEnv serves a sealed store (a key store beside it) with a real
// retention service that performs subject erasures, signing its audit
// footers with signingKey when set.
func sealedEnv(t *testing.T, signingKey ed25519.PrivateKey) (*testEnv, config.Retention) {
	return sealedEnvWith(t, signingKey, nil)
}

// sealedEnvWith is sealedEnv with attachments kept in blobs (nil: none),
// which the server serves and retention deletes from.
func sealedEnvWith(t *testing.T, signingKey ed25519.PrivateKey, blobs *attachments.Blobs) (*testEnv, config.Retention) {
	t.Helper()
	dir := t.TempDir()
	st, ks := openSealedStore(t, dir)
	cfg := config.Retention{Enabled: true, Period: 30 * 24 * time.Hour, MinPeriod: time.Hour,
		AuditPath: filepath.Join(dir, "audit")}
	late, lateE := &lateService{}, &lateErasures{}
	opts := Options{Store: st, AdminToken: "adm", Retention: late, Erasures: lateE}
	ropts := retention.RunnerOptions{Store: st, Config: cfg, Keys: ks, SigningKey: signingKey,
		Logger: slog.New(slog.DiscardHandler)}
	if blobs != nil {
		opts.Attachments, ropts.Blobs = blobs, blobs
	}
	e := newEnv(t, opts)
	ropts.Metrics = retention.NewMetrics(e.reg)
	r, err := retention.NewRunner(ropts)
	if err != nil {
		t.Fatal(err)
	}
	svc, err := retention.NewService(retention.ServiceOptions{Runner: r})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(svc.Close)
	late.Service, lateE.Erasures = svc, svc
	return e, cfg
}

// lateErasures forwards to an erasure service built after the env's store
// opens.
type lateErasures struct{ retention.Erasures }

// The erasure routes over a real sealed server: 202 and the status and
// receipt documents as described; each refusal with its code (a held
// lease, an erasure not completed, bad input, credentials); 409
// sealing_disabled without sealing; 503 without retention.
func TestErasureRoutes(t *testing.T) {
	seen := &exercised{}
	_, signingKey, err := ed25519.GenerateKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	e, cfg := sealedEnv(t, signingKey)
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
	check(e, "POST", "/v1/threads", `{"id":"t1","title":"x","author":"ann"}`, "", 201, "")
	check(e, "POST", "/v1/threads/t1/messages", `{"id":"m1","author":"ann","body":1}`, "", 201, "")

	var acc retention.ErasureAccepted
	check(e, "POST", "/admin/erasures", `{"author":"ann"}`, admin, 202, "").decode(t, &acc)
	if acc.ErasureID == "" || acc.RunID == "" {
		t.Fatalf("202 without ids: %+v", acc)
	}
	var st retention.ErasureStatus
	for deadline := time.Now().Add(time.Minute); st.Status != retention.ErasureCompleted; time.Sleep(10 * time.Millisecond) {
		check(e, "GET", "/admin/erasures/"+acc.ErasureID, "", admin, 200, "").decode(t, &st)
		if st.Status == retention.ErasureFailed || time.Now().After(deadline) {
			t.Fatalf("erasure %+v", st)
		}
	}
	if st.MessagesPurged != 1 || st.KeysDestroyed != 1 || !slices.Contains(st.RunIDs, acc.RunID) {
		t.Errorf("status %+v", st)
	}
	var rc audit.Receipt
	check(e, "GET", "/admin/erasures/"+acc.ErasureID+"/receipt", "", admin, 200, "").decode(t, &rc)
	if rc.ErasureID != acc.ErasureID || len(rc.Items) != 1 || rc.Items[0].ItemID != "m1" || strings.Contains(rc.Subject, "ann") {
		t.Errorf("receipt %+v", rc)
	}
	check(e, "GET", "/v1/threads/t1/messages/m1", "", "", 404, CodeNotFound)

	// An erasure recorded and not yet completed has no receipt.
	if err := e.store.PutErasure(context.Background(), store.Erasure{ID: "running1", Status: retention.ErasureRunning,
		Subject: "hmac-sha256:00", RequestedAt: 1}); err != nil {
		t.Fatal(err)
	}
	check(e, "GET", "/admin/erasures/running1", "", admin, 200, "")
	check(e, "GET", "/admin/erasures/running1/receipt", "", admin, 409, CodeErasureIncomplete)

	// A lease held elsewhere refuses the request. The erasure's run
	// releases the lease after completing it: wait for that first.
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(10 * time.Millisecond) {
		var rs retention.Status
		check(e, "GET", "/admin/retention", "", admin, 200, "").decode(t, &rs)
		if !rs.Lease.Held && rs.LastRun != nil && rs.LastRun.RunID == acc.RunID {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the erasure's run still holds the lease: %+v", rs.Lease)
		}
	}
	lease, err := retention.AcquireLease(context.Background(), retention.LeaseConfig{
		Path: filepath.Join(cfg.AuditPath, "retention.lock"), TTL: time.Minute, Owner: "elsewhere/1/x", Host: "elsewhere", PID: 1})
	if err != nil {
		t.Fatal(err)
	}
	check(e, "POST", "/admin/erasures", `{"author":"bob"}`, admin, 409, CodeLeaseHeld)
	lease.Release()

	check(e, "POST", "/admin/erasures", `{}`, admin, 400, CodeInvalidField)
	check(e, "POST", "/admin/erasures", `{"author":""}`, admin, 400, CodeInvalidField)
	check(e, "POST", "/admin/erasures", `{"author":"`+strings.Repeat("a", 257)+`"}`, admin, 400, CodeInvalidField)
	check(e, "POST", "/admin/erasures", `{"author":"ann","thread":"t1"}`, admin, 400, CodeInvalidJSON)
	check(e, "POST", "/admin/erasures", "", admin, 400, CodeInvalidJSON)
	check(e, "POST", "/admin/erasures", `{"author":"`+strings.Repeat("a", DefaultMaxBodyBytes)+`"}`, admin, 413, CodeBodyTooLarge)
	check(e, "POST", "/admin/erasures", `{"author":"ann"}`, "", 401, CodeUnauthorized)
	check(e, "GET", "/admin/erasures/nope", "", admin, 404, CodeNotFound)
	check(e, "GET", "/admin/erasures/bad:id", "", admin, 400, CodeInvalidID)
	check(e, "GET", "/admin/erasures/"+acc.ErasureID, "", "", 401, CodeUnauthorized)
	check(e, "GET", "/admin/erasures/nope/receipt", "", admin, 404, CodeNotFound)
	check(e, "GET", "/admin/erasures/bad:id/receipt", "", admin, 400, CodeInvalidID)
	check(e, "GET", "/admin/erasures/"+acc.ErasureID+"/receipt", "", "", 401, CodeUnauthorized)

	closed := newEnv(t, Options{})
	closed.seen = seen
	check(closed, "POST", "/admin/erasures", `{"author":"ann"}`, admin, 403, CodeAdminDisabled)
	check(closed, "GET", "/admin/erasures/e1", "", admin, 403, CodeAdminDisabled)
	check(closed, "GET", "/admin/erasures/e1/receipt", "", admin, 403, CodeAdminDisabled)

	// Sealing off: no erasure service.
	plain := retentionEnvWith(t, true, Options{AdminToken: "adm"})
	plain.seen = seen
	for _, c := range [][3]string{{"POST", "/admin/erasures", `{"author":"ann"}`},
		{"GET", "/admin/erasures/e1", ""}, {"GET", "/admin/erasures/e1/receipt", ""}} {
		msg := check(plain, c[0], c[1], c[2], admin, 409, CodeSealingDisabled).errorText(t)
		if !strings.Contains(msg, "PROGRESSDB_KEK") {
			t.Errorf("%s %s: %q does not name PROGRESSDB_KEK", c[0], c[1], msg)
		}
	}

	// No retention service at all.
	bare := newEnv(t, Options{AdminToken: "adm"})
	bare.seen = seen
	check(bare, "POST", "/admin/erasures", `{"author":"ann"}`, admin, 503, CodeNotConfigured)
	check(bare, "GET", "/admin/erasures/e1", "", admin, 503, CodeNotConfigured)
	check(bare, "GET", "/admin/erasures/e1/receipt", "", admin, 503, CodeNotConfigured)

	for _, m := range missingExercise(t, seen) {
		if strings.Contains(m, "/admin/erasures") {
			t.Error(m)
		}
	}
}

// Without an audit signing key the footers of an erasure's run are
// unsigned, and `erasure verify --public-key` could never verify its
// receipt: the receipt route refuses with its own code, naming the key,
// instead of handing out a document with "signature": "".
func TestErasureReceiptRefusedUnsigned(t *testing.T) {
	e, _ := sealedEnv(t, nil)
	const admin = "Bearer adm"
	e.send(t, "POST", "/v1/threads", `{"id":"t1","title":"x","author":"ann"}`, "")
	e.send(t, "POST", "/v1/threads/t1/messages", `{"id":"m1","author":"ann","body":1}`, "")
	var acc retention.ErasureAccepted
	if r := e.send(t, "POST", "/admin/erasures", `{"author":"ann"}`, admin); r.status != 202 {
		t.Fatalf("request: %d %s", r.status, r.body)
	} else {
		r.decode(t, &acc)
	}
	var st retention.ErasureStatus
	for deadline := time.Now().Add(time.Minute); st.Status != retention.ErasureCompleted; time.Sleep(10 * time.Millisecond) {
		e.send(t, "GET", "/admin/erasures/"+acc.ErasureID, "", admin).decode(t, &st)
		if st.Status == retention.ErasureFailed || time.Now().After(deadline) {
			t.Fatalf("erasure %+v", st)
		}
	}
	r := e.send(t, "GET", "/admin/erasures/"+acc.ErasureID+"/receipt", "", admin)
	if r.status != 409 || r.errorCode(t) != CodeReceiptUnsigned || !strings.Contains(string(r.body), "PROGRESSDB_AUDIT_SIGNING_KEY") {
		t.Fatalf("receipt without a signing key: %d %s, want 409 %s naming PROGRESSDB_AUDIT_SIGNING_KEY", r.status, r.body, CodeReceiptUnsigned)
	}
}

// On a sealed server: a thread answer is kept sealed and replays; an
// erasure request sent again with its key answers as the first and
// records no second erasure; once the author is erased, the answers that
// held their writing are gone with it (404).
func TestErasureIdempotencyKeys(t *testing.T) {
	e, _ := sealedEnv(t, nil)
	created := e.sendKeyed(t, "POST", "/v1/threads", `{"id":"t1","title":"secret title","author":"ann"}`, "c1")
	sameAnswer(t, created, e.sendKeyed(t, "POST", "/v1/threads", `{"id":"t1","title":"secret title","author":"ann"}`, "c1"))
	appended := e.sendKeyed(t, "POST", "/v1/threads/t1/messages", `{"id":"m1","author":"ann","body":"secret body"}`, "a1")
	sameAnswer(t, appended, e.sendKeyed(t, "POST", "/v1/threads/t1/messages", `{"id":"m1","author":"ann","body":"secret body"}`, "a1"))

	e.bearer = "adm"
	first := e.sendKeyed(t, "POST", "/admin/erasures", `{"author":"ann"}`, "e1")
	if first.status != http.StatusAccepted {
		t.Fatalf("erasure: %d %s", first.status, first.body)
	}
	var acc retention.ErasureAccepted
	first.decode(t, &acc)
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(10 * time.Millisecond) {
		var st retention.ErasureStatus
		e.expect(t, "GET", "/admin/erasures/"+acc.ErasureID, "", http.StatusOK).decode(t, &st)
		if st.Status == retention.ErasureCompleted {
			break
		}
		if st.Status == retention.ErasureFailed || time.Now().After(deadline) {
			t.Fatalf("erasure %+v", st)
		}
	}
	sameAnswer(t, first, e.sendKeyed(t, "POST", "/admin/erasures", `{"author":"ann"}`, "e1"))
	if r := e.sendKeyed(t, "POST", "/admin/erasures", `{"author":"bob"}`, "e1"); r.status != http.StatusUnprocessableEntity || r.errorCode(t) != CodeIdempotencyKeyReused {
		t.Fatalf("erasure with a used key: %d %s, want 422 %s", r.status, r.body, CodeIdempotencyKeyReused)
	}

	e.bearer = ""
	for _, c := range []struct{ path, body, key string }{
		{"/v1/threads", `{"id":"t1","title":"secret title","author":"ann"}`, "c1"},
		{"/v1/threads/t1/messages", `{"id":"m1","author":"ann","body":"secret body"}`, "a1"},
	} {
		r := e.sendKeyed(t, "POST", c.path, c.body, c.key)
		if r.status != http.StatusNotFound || r.errorCode(t) != CodeNotFound || bytes.Contains(r.body, []byte("secret")) {
			t.Fatalf("replay of %s after the erasure: %d %s, want 404 not_found", c.key, r.status, r.body)
		}
	}
}
