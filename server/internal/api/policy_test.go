package api

import (
	"net/http"
	"strings"
	"testing"

	"github.com/progressdb/progressdb/server/internal/retention"
	"github.com/progressdb/progressdb/server/pkg/store"
)

// A max_messages beyond 2^53−1 is refused: accepted, the policy answers
// would carry a number JavaScript clients read as another one (spec §2).
// The largest number every client reads exactly is accepted and echoed.
func TestThreadPolicyMaxMessagesBeyond2p53(t *testing.T) {
	e := retentionEnv(t, true)
	e.createThread(t, "t1")
	for _, n := range []string{"9007199254740992", "9007199254740993", "9223372036854775807", "1e20", "1e400"} {
		r := e.expect(t, "PUT", "/admin/threads/t1/retention", `{"max_messages":`+n+`}`, http.StatusBadRequest)
		if msg := r.errorText(t); !strings.Contains(msg, "max_messages") || !strings.Contains(msg, "at most 9007199254740991 (2^53−1)") {
			t.Errorf("max_messages %s: %q does not name the rule", n, msg)
		}
	}
	var p retention.ThreadPolicy
	e.expect(t, "GET", "/admin/threads/t1/retention", "", http.StatusOK).decode(t, &p)
	if p.Override.MaxMessages != nil {
		t.Fatalf("a refused PUT set max_messages %d", *p.Override.MaxMessages)
	}
	e.expect(t, "PUT", "/admin/threads/t1/retention", `{"max_messages":9007199254740991}`, http.StatusOK).decode(t, &p)
	if p.Effective.MaxMessages != 1<<53-1 {
		t.Fatalf("effective max_messages %d", p.Effective.MaxMessages)
	}
}

// max_messages is an integer as the description's JSON Schema counts
// them: any number without a fraction (5.0, 5e2); 5.5 and "5" are not.
func TestThreadPolicyMaxMessagesIntegers(t *testing.T) {
	e := retentionEnv(t, true)
	e.createThread(t, "t1")
	for body, want := range map[string]int{`{"max_messages":5.0}`: 5, `{"max_messages":5e2}`: 500, `{"max_messages":0}`: 0} {
		var p retention.ThreadPolicy
		e.expect(t, "PUT", "/admin/threads/t1/retention", body, http.StatusOK).decode(t, &p)
		if p.Override.MaxMessages == nil || *p.Override.MaxMessages != want {
			t.Errorf("%s: override %+v, want max_messages %d", body, p.Override, want)
		}
	}
	for body, has := range map[string]string{
		`{"max_messages":5.5}`:    `field "max_messages" must be an integer, not number 5.5`,
		`{"max_messages":"5"}`:    `field "max_messages" must be an integer, not "5"`,
		`{"max_messages":true}`:   `field "max_messages" must be an integer, not true`,
		`{"max_messages":-1e400}`: "0 (off) or more",
	} {
		if msg := e.expect(t, "PUT", "/admin/threads/t1/retention", body, http.StatusBadRequest).errorText(t); !strings.Contains(msg, has) {
			t.Errorf("%s: %q lacks %q", body, msg, has)
		}
	}
}

func TestThreadRetentionPolicy(t *testing.T) {
	e := retentionEnv(t, true)
	e.createThread(t, "t1")

	var p retention.ThreadPolicy
	e.expect(t, "GET", "/admin/threads/t1/retention", "", http.StatusOK).decode(t, &p)
	want := retention.Policy{Period: "30d", MessagePeriod: "30d", MaxAge: "90d", MaxMessages: 0}
	if p.ThreadID != "t1" || p.Override != (retention.PolicyOverride{}) || p.Effective != want {
		t.Fatalf("fresh thread %+v", p)
	}
	if body := string(e.expect(t, "GET", "/admin/threads/t1/retention", "", http.StatusOK).body); !strings.Contains(body, `"override":{}`) {
		t.Fatalf("an empty override is not {}: %s", body)
	}

	e.expect(t, "PUT", "/admin/threads/t1/retention", `{"max_age":"7d","max_messages":500,"period":"36h"}`, http.StatusOK).decode(t, &p)
	want = retention.Policy{Period: "1d12h", MessagePeriod: "30d", MaxAge: "7d", MaxMessages: 500}
	if p.Effective != want || *p.Override.MaxAge != "7d" || *p.Override.MaxMessages != 500 || p.Override.MessagePeriod != nil {
		t.Fatalf("after PUT %+v", p)
	}
	var got retention.ThreadPolicy
	e.expect(t, "GET", "/admin/threads/t1/retention", "", http.StatusOK).decode(t, &got)
	if got.Effective != want {
		t.Fatalf("GET after PUT %+v", got)
	}

	// "0" turns max_age off for this thread.
	p = retention.ThreadPolicy{}
	e.expect(t, "PUT", "/admin/threads/t1/retention", `{"max_age":"0"}`, http.StatusOK).decode(t, &p)
	if p.Effective.MaxAge != "0" || p.Effective.Period != "30d" || p.Effective.MaxMessages != 0 {
		t.Fatalf("max_age off %+v", p)
	}

	e.expect(t, "DELETE", "/admin/threads/t1/retention", "", http.StatusNoContent)
	p = retention.ThreadPolicy{}
	e.expect(t, "GET", "/admin/threads/t1/retention", "", http.StatusOK).decode(t, &p)
	if p.Override != (retention.PolicyOverride{}) || p.Effective.MaxAge != "90d" {
		t.Fatalf("after DELETE %+v", p)
	}

	bad := []struct{ body, has string }{
		{`{"max_age":"30m"}`, `max_age "30m" is below PROGRESSDB_RETENTION_MIN_PERIOD (1h); set PROGRESSDB_RETENTION_ALLOW_SHORT_PERIOD=true to allow it`},
		{`{"period":"0"}`, "must be greater than 0"},
		{`{"message_period":"2 days"}`, "must be a duration"},
		{`{"max_age":"-1d"}`, "must be a duration"},
		{`{"max_messages":-1}`, "0 (off) or more"},
		{`{"max_messages":"ten"}`, "max_messages"},
		{`{"maxage":"7d"}`, "maxage"},
		{``, ""},
	}
	for _, b := range bad {
		msg := e.expect(t, "PUT", "/admin/threads/t1/retention", b.body, http.StatusBadRequest).errorText(t)
		if !strings.Contains(msg, b.has) {
			t.Errorf("PUT %s: %q lacks %q", b.body, msg, b.has)
		}
	}
	p = retention.ThreadPolicy{}
	e.expect(t, "GET", "/admin/threads/t1/retention", "", http.StatusOK).decode(t, &p)
	if p.Override != (retention.PolicyOverride{}) {
		t.Fatalf("a refused PUT changed the override: %+v", p)
	}

	for _, m := range []string{"GET", "PUT", "DELETE"} {
		e.expect(t, m, "/admin/threads/nope/retention", `{"max_messages":1}`, http.StatusNotFound)
	}
	e.expect(t, "GET", "/admin/threads/bad:id/retention", "", http.StatusBadRequest)
	e.expect(t, "POST", "/admin/threads/t1/retention", "", http.StatusMethodNotAllowed)
	e.bearer = ""
	e.expect(t, "GET", "/admin/threads/t1/retention", "", http.StatusUnauthorized)
}

func TestThreadRetentionPolicyRefusals(t *testing.T) {
	e := retentionEnv(t, true)
	e.createThread(t, "t1")
	e.expect(t, "DELETE", "/v1/threads/t1", "", http.StatusNoContent)
	th, err := e.store.GetThread(t.Context(), "t1")
	if err != nil {
		t.Fatal(err)
	}
	if err := e.store.BeginPurge(t.Context(), store.PurgeMarker{Kind: store.KindThread, ID: "t1", DeletedTS: th.DeletedTS, RunID: "r1"}); err != nil {
		t.Fatal(err)
	}
	e.expect(t, "PUT", "/admin/threads/t1/retention", `{"max_messages":1}`, http.StatusConflict)
	e.expect(t, "DELETE", "/admin/threads/bad:id/retention", "", http.StatusBadRequest)

	none := newEnv(t, Options{AdminToken: "adm"})
	none.bearer = "adm"
	for _, m := range []string{"GET", "PUT", "DELETE"} {
		none.expect(t, m, "/admin/threads/t1/retention", `{"max_messages":1}`, http.StatusServiceUnavailable)
	}
}

// Once a message's purge claim is confirmed (its deletes may begin), a
// legal hold or an override of its thread answers 409 naming it: it can no
// longer be given back whole. Before the confirmation both answer 200.
func TestHoldAndOverrideRefusedWhileAMessageIsBeingPurged(t *testing.T) {
	e := retentionEnv(t, true)
	ctx := t.Context()
	e.createThread(t, "t1")
	e.appendMessage(t, "t1", "m1", `1`)
	e.expect(t, "DELETE", "/v1/threads/t1/messages/m1", "", http.StatusNoContent)
	tomb, err := e.store.GetMessage(ctx, "t1", "m1")
	if err != nil {
		t.Fatal(err)
	}
	m := store.PurgeMarker{Kind: store.KindMessage, ID: "m1", ThreadID: "t1", DeletedTS: tomb.DeletedTS, RunID: "r1"}
	if err := e.store.BeginPurge(ctx, m); err != nil {
		t.Fatal(err)
	}
	e.expect(t, "PUT", "/admin/threads/t1/legal_hold", `{"legal_hold":false}`, http.StatusOK)
	if _, err := e.store.ConfirmPurge(ctx, m, func(store.ClaimState) error { return nil }); err != nil {
		t.Fatal(err)
	}
	for _, r := range []struct{ path, body string }{
		{"/admin/threads/t1/legal_hold", `{"legal_hold":true}`},
		{"/admin/threads/t1/retention", `{"max_messages":1}`},
	} {
		if msg := e.expect(t, "PUT", r.path, r.body, http.StatusConflict).errorText(t); !strings.Contains(msg, "m1") {
			t.Errorf("PUT %s: 409 %q does not name the message being purged", r.path, msg)
		}
	}
}
