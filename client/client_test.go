package client_test

import (
	"archive/tar"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/progressdb/progressdb/client"
)

func ptr[T any](v T) *T { return &v }

func newClient(t testing.TB, base string, opts ...client.Option) *client.Client {
	t.Helper()
	c, err := client.New(base, append([]client.Option{client.WithAPIKey(apiKey), client.WithAdminToken(adminToken)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// checked is a result and its error: check(f()).must(t) fails the test
// on the error and returns the result.
type checked[T any] struct {
	v   T
	err error
}

func check[T any](v T, err error) checked[T] { return checked[T]{v, err} }

func (c checked[T]) must(t testing.TB) T {
	t.Helper()
	if c.err != nil {
		t.Fatal(c.err)
	}
	return c.v
}

type checked2[A, B any] struct {
	a   A
	b   B
	err error
}

func check2[A, B any](a A, b B, err error) checked2[A, B] { return checked2[A, B]{a, b, err} }

func (c checked2[A, B]) must(t testing.TB) (A, B) {
	t.Helper()
	if c.err != nil {
		t.Fatal(c.err)
	}
	return c.a, c.b
}

// wantCode fails unless err is an *APIError with status and code.
func wantCode(t testing.TB, err error, status int, code client.ErrorCode) *client.APIError {
	t.Helper()
	var e *client.APIError
	if !errors.As(err, &e) {
		t.Fatalf("error %v (%T), want an *APIError %d %s", err, err, status, code)
	}
	if e.Status != status || e.Code != code || client.CodeOf(err) != code || !client.HasCode(err, code) {
		t.Fatalf("error %d %q (%s), want %d %q", e.Status, e.Code, e.Message, status, code)
	}
	if e.Message == "" || e.RequestID == "" {
		t.Fatalf("error without message or request ID: %+v", e)
	}
	return e
}

// rawJSON fetches path with the API key and returns the answer's JSON
// object, to compare the client's values with the wire's text.
func rawJSON(t testing.TB, base, path string) map[string]json.RawMessage {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, base+path, nil)
	req.Header.Set("Authorization", "Bearer "+apiKey)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var m map[string]json.RawMessage
	if err := json.NewDecoder(res.Body).Decode(&m); err != nil {
		t.Fatal(err)
	}
	return m
}

// exactTime fails unless the client's time is the wire's string to the
// nanosecond: formatted back it is the same text, and it parses back to
// the same instant.
func exactTime(t testing.TB, what string, got time.Time, wire json.RawMessage) {
	t.Helper()
	var s string
	if err := json.Unmarshal(wire, &s); err != nil {
		t.Fatalf("%s: %s is not a string", what, wire)
	}
	if f := got.UTC().Format(time.RFC3339Nano); f != s {
		t.Fatalf("%s: client has %s, the server wrote %s", what, f, s)
	}
}

// Every operation of the description through the client against a real
// server: each answers what the server stored, timestamps to the
// nanosecond.
func TestEveryOperation(t *testing.T) {
	base := serve(t)
	c := newClient(t, base)
	ctx := context.Background()

	if err := c.Health(ctx); err != nil {
		t.Fatal(err)
	}

	// Threads.
	th := check(c.CreateThread(ctx, client.NewThread{Id: ptr("t-plans"), Title: "Plans", Author: "ann"})).must(t)
	if th.Id != "t-plans" || th.Title != "Plans" || th.Author != "ann" || th.Deleted || th.DeletedTs != nil || th.CreatedTs.IsZero() {
		t.Fatalf("created %+v", th)
	}
	gen := check(c.CreateThread(ctx, client.NewThread{Title: "Generated", Author: "bob"})).must(t)
	if gen.Id == "" {
		t.Fatal("no generated ID")
	}
	wire := rawJSON(t, base, "/v1/threads/t-plans")
	exactTime(t, "thread created_ts", th.CreatedTs, wire["created_ts"])
	got := check(c.GetThread(ctx, "t-plans", false)).must(t)
	if !got.CreatedTs.Equal(th.CreatedTs) || got.Title != "Plans" {
		t.Fatalf("got %+v, created %+v", got, th)
	}
	edited := check(c.EditThread(ctx, "t-plans", "Plans for spring")).must(t)
	if edited.Title != "Plans for spring" || check(c.GetThread(ctx, "t-plans", false)).must(t).Title != "Plans for spring" {
		t.Fatalf("edited %+v", edited)
	}
	list, next := check2(c.ThreadsPage(ctx, client.ListOptions{Limit: 10})).must(t)
	if len(list) != 2 || next != "" {
		t.Fatalf("threads page: %d threads, next %q", len(list), next)
	}

	// Messages.
	m1 := check(c.AppendMessage(ctx, "t-plans", client.NewMessage{Id: ptr("m-1"), Author: "bob", Body: map[string]any{"text": "hi", "n": 9007199254740991.0}})).must(t)
	if m1.Id != "m-1" || m1.Thread != "t-plans" || m1.Version != 1 || !m1.CreatedTs.Equal(m1.Ts) {
		t.Fatalf("appended %+v", m1)
	}
	wire = rawJSON(t, base, "/v1/threads/t-plans/messages/m-1")
	exactTime(t, "message ts", m1.Ts, wire["ts"])
	exactTime(t, "message created_ts", m1.CreatedTs, wire["created_ts"])
	m2 := check(c.EditMessage(ctx, "t-plans", "m-1", map[string]any{"text": "hi, edited"})).must(t)
	if m2.Version != 2 || !m2.CreatedTs.Equal(m1.CreatedTs) || !m2.Ts.After(m1.Ts) {
		t.Fatalf("edited %+v after %+v", m2, m1)
	}
	latest := check(c.GetMessage(ctx, "t-plans", "m-1", false)).must(t)
	if latest.Version != 2 || latest.Body.(map[string]any)["text"] != "hi, edited" {
		t.Fatalf("latest %+v", latest)
	}
	var versions []client.Message
	for v, err := range c.Versions(ctx, "t-plans", "m-1", client.ListOptions{}) {
		versions = append(versions, check(v, err).must(t))
	}
	if len(versions) != 2 || versions[0].Version != 1 || versions[1].Version != 2 || versions[0].Body.(map[string]any)["n"] != 9007199254740991.0 {
		t.Fatalf("versions %+v", versions)
	}
	check(c.AppendMessage(ctx, "t-plans", client.NewMessage{Author: "ann", Body: "plain text"})).must(t)
	if err := c.DeleteMessage(ctx, "t-plans", "m-1"); err != nil {
		t.Fatal(err)
	}
	wantCode(t, errOf(c.GetMessage(ctx, "t-plans", "m-1", false)), 404, client.ErrorCodeNotFound)
	dm := check(c.GetMessage(ctx, "t-plans", "m-1", true)).must(t)
	if !dm.Deleted || dm.DeletedTs == nil {
		t.Fatalf("deleted message %+v", dm)
	}
	msgs, _ := check2(c.MessagesPage(ctx, "t-plans", client.ListOptions{})).must(t)
	all, _ := check2(c.MessagesPage(ctx, "t-plans", client.ListOptions{IncludeDeleted: true})).must(t)
	if len(msgs) != 1 || len(all) != 2 {
		t.Fatalf("messages: %d live, %d with deleted", len(msgs), len(all))
	}
	rm := check(c.RestoreMessage(ctx, "t-plans", "m-1")).must(t)
	if rm.Deleted || rm.Version != 4 {
		t.Fatalf("restored message %+v", rm)
	}

	if err := c.DeleteThread(ctx, gen.Id); err != nil {
		t.Fatal(err)
	}
	wantCode(t, errOf(c.GetThread(ctx, gen.Id, false)), 404, client.ErrorCodeNotFound)
	if d := check(c.GetThread(ctx, gen.Id, true)).must(t); !d.Deleted || d.DeletedTs == nil {
		t.Fatalf("deleted thread %+v", d)
	}
	if a := check(c.AdminThread(ctx, gen.Id)).must(t); !a.Deleted {
		t.Fatalf("admin thread %+v", a)
	}
	if r := check(c.RestoreThread(ctx, gen.Id)).must(t); r.Deleted {
		t.Fatalf("restored %+v", r)
	}

	// Admin.
	db := check(c.Database(ctx)).must(t)
	if db.ID == "" || !strings.HasSuffix(db.Path, "db") {
		t.Fatalf("database %+v", db)
	}
	if n := check(c.CountThreads(ctx)).must(t); n.Sealed != 0 || n.Plain == 0 {
		t.Fatalf("thread counts %+v, want plain threads only", n)
	}
	st, cl, err := c.RetentionStatus(ctx)
	if err != nil || st == nil || cl != nil || st.Paused {
		t.Fatalf("retention status %+v %+v %v", st, cl, err)
	}
	ps := check(c.PauseRetention(ctx, "legal review")).must(t)
	if !ps.Paused || ps.PausedReason != "legal review" || ps.PausedAt == nil {
		t.Fatalf("pause %+v", ps)
	}
	_, _, err = c.RunRetention(ctx, false)
	if e := wantCode(t, err, 409, client.ErrorCodeRetentionPaused); e.Detail == nil || e.Detail.Paused == nil || !*e.Detail.Paused {
		t.Fatalf("paused run: %+v", e.Detail)
	}
	if ps := check(c.ResumeRetention(ctx)).must(t); ps.Paused {
		t.Fatalf("resume %+v", ps)
	}
	run, cl, err := c.RunRetention(ctx, true)
	if err != nil || run == nil || cl != nil || !run.DryRun || run.Status != client.RunResultStatusCompleted || run.RunId == "" {
		t.Fatalf("dry run %+v %+v %v", run, cl, err)
	}

	if h := check(c.SetLegalHold(ctx, "t-plans", true)).must(t); !h.LegalHold {
		t.Fatalf("hold %+v", h)
	}
	holds := check(c.LegalHolds(ctx)).must(t)
	if len(holds) != 1 || holds[0].Id != "t-plans" {
		t.Fatalf("holds %+v", holds)
	}
	wantCode(t, errOf(c.EditThread(ctx, "t-plans", "Other")), 409, client.ErrorCodeLegalHold)
	if h := check(c.SetLegalHold(ctx, "t-plans", false)).must(t); h.LegalHold {
		t.Fatalf("release %+v", h)
	}

	pol := check(c.SetThreadPolicy(ctx, "t-plans", client.PolicyOverride{Period: ptr("90d"), MaxMessages: ptr(100)})).must(t)
	if pol.Effective.Period != "90d" || pol.Effective.MaxMessages != 100 || *pol.Override.Period != "90d" {
		t.Fatalf("policy %+v", pol)
	}
	if p := check(c.ThreadPolicy(ctx, "t-plans")).must(t); p.Override.MaxMessages == nil || *p.Override.MaxMessages != 100 {
		t.Fatalf("policy %+v", p)
	}
	if err := c.ClearThreadPolicy(ctx, "t-plans"); err != nil {
		t.Fatal(err)
	}
	if p := check(c.ThreadPolicy(ctx, "t-plans")).must(t); p.Override.Period != nil || p.Override.MaxMessages != nil {
		t.Fatalf("cleared policy %+v", p.Override)
	}

	man := check(c.CreateBackup(ctx, client.BackupOptions{})).must(t)
	if man.BackupId == "" || man.Threads != 2 || man.Messages != 2 || man.CreatedAt.IsZero() {
		t.Fatalf("manifest %+v", man)
	}
	bl := check(c.ListBackups(ctx)).must(t)
	if len(bl.Backups) != 1 || bl.Backups[0].BackupId != man.BackupId || !bl.Backups[0].CreatedAt.Equal(man.CreatedAt) {
		t.Fatalf("backups %+v", bl)
	}
	stream := check(c.StreamBackup(ctx, client.BackupOptions{Compress: "none"})).must(t)
	names := map[string]bool{}
	tr := tar.NewReader(stream)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("streamed backup: %v", err)
		}
		names[h.Name] = true
	}
	stream.Close()
	if !names["manifest.json"] {
		t.Fatalf("streamed backup without manifest.json: %v", names)
	}

	wantCode(t, errOf(c.ClusterStatus(ctx)), 404, client.ErrorCodeNotACluster)
	wantCode(t, errOf(c.MoveShard(ctx, 0, "node-b")), 404, client.ErrorCodeNotACluster)

	// Subject erasure needs sealing, which this server runs without.
	wantCode(t, errOf(c.RequestErasure(ctx, "ann")), 409, client.ErrorCodeSealingDisabled)
	wantCode(t, errOf(c.Erasure(ctx, "7c1f04a9b2d3e581")), 409, client.ErrorCodeSealingDisabled)
	wantCode(t, errOf(c.ErasureReceipt(ctx, "7c1f04a9b2d3e581")), 409, client.ErrorCodeSealingDisabled)

	runID, cl, err := c.StartRetention(ctx, true)
	if err != nil || runID == "" || cl != nil {
		t.Fatalf("start retention %q %+v %v", runID, cl, err)
	}

	// The generated operations, beneath the thin layer.
	mr := check(c.Raw().MetricsWithResponse(ctx)).must(t)
	if mr.StatusCode() != 200 || !strings.Contains(string(mr.Body), "progressdb_") {
		t.Fatalf("metrics %d", mr.StatusCode())
	}
	or := check(c.Raw().OpenapiWithResponse(ctx)).must(t)
	if or.StatusCode() != 200 || !strings.Contains(string(or.Body), "openapi: 3.1.0") {
		t.Fatalf("openapi %d", or.StatusCode())
	}
}

func errOf[T any](_ T, err error) error { return err }
