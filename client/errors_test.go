package client_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/progressdb/progressdb/client"
)

// The server's errors reach the caller as *APIError with the code of the
// description's closed list, for errors.As and the helpers alike.
func TestErrorsByCode(t *testing.T) {
	base := serve(t)
	c := newClient(t, base)
	ctx := context.Background()
	check(c.CreateThread(ctx, client.NewThread{Id: ptr("t-1"), Title: "One", Author: "ann"})).must(t)
	check(c.AppendMessage(ctx, "t-1", client.NewMessage{Id: ptr("m-1"), Author: "ann", Body: 1})).must(t)

	wantCode(t, errOf(c.GetThread(ctx, "-bad", false)), 400, client.ErrorCodeInvalidId)
	wantCode(t, errOf(c.CreateThread(ctx, client.NewThread{Title: "", Author: "ann"})), 400, client.ErrorCodeInvalidField)
	_, _, err := c.ThreadsPage(ctx, client.ListOptions{Cursor: "made-up"})
	wantCode(t, err, 400, client.ErrorCodeInvalidCursor)
	_, _, err = c.ThreadsPage(ctx, client.ListOptions{Limit: 5000})
	wantCode(t, err, 400, client.ErrorCodeInvalidParameter)
	e := wantCode(t, errOf(c.GetThread(ctx, "t-none", false)), 404, client.ErrorCodeNotFound)
	if !client.IsNotFound(e) || client.IsRetryable(e) || !client.HasCode(e, client.ErrorCodeLegalHold, client.ErrorCodeNotFound) {
		t.Fatalf("helpers on %v", e)
	}
	wantCode(t, errOf(c.CreateThread(ctx, client.NewThread{Id: ptr("t-1"), Title: "Again", Author: "ann"})), 409, client.ErrorCodeAlreadyExists)
	check(c.CreateThread(ctx, client.NewThread{Id: ptr("t-2"), Title: "Two", Author: "ann"})).must(t)
	wantCode(t, errOf(c.AppendMessage(ctx, "t-2", client.NewMessage{Id: ptr("m-1"), Author: "ann", Body: 2})), 409, client.ErrorCodeIdUnavailable)
	e = wantCode(t, errOf(c.AppendMessage(ctx, "t-1", client.NewMessage{Author: "ann", Body: strings.Repeat("x", 1<<20)})), 413, client.ErrorCodeBodyTooLarge)
	if !strings.Contains(e.Message, "1048576") {
		t.Fatalf("413 does not name the limit: %q", e.Message)
	}

	// Credentials: none, or the API key where the admin token is asked.
	anon, err := client.New(base)
	if err != nil {
		t.Fatal(err)
	}
	wantCode(t, errOf(anon.GetThread(ctx, "t-1", false)), 401, client.ErrorCodeUnauthorized)
	wrong := check(client.New(base, client.WithAPIKey(apiKey), client.WithAdminToken(apiKey))).must(t)
	wantCode(t, errOf(wrong.LegalHolds(ctx)), 401, client.ErrorCodeUnauthorized)
	check(wrong.GetThread(ctx, "t-1", false)).must(t)

	// A server without an admin token has no admin API.
	open := check(client.New(serve(t, "PROGRESSDB_ADMIN_TOKEN=", "PROGRESSDB_API_KEY="))).must(t)
	wantCode(t, errOf(open.LegalHolds(ctx)), 403, client.ErrorCodeAdminDisabled)
	check(open.CreateThread(ctx, client.NewThread{Title: "Open", Author: "ann"})).must(t)

	// A cursor handed out by another listing is no cursor of this one.
	check(c.CreateThread(ctx, client.NewThread{Id: ptr("t-3"), Title: "Three", Author: "ann"})).must(t)
	_, next, err := c.ThreadsPage(ctx, client.ListOptions{Limit: 1})
	if err != nil || next == "" {
		t.Fatalf("first page: next %q, %v", next, err)
	}
	_, _, err = c.MessagesPage(ctx, "t-1", client.ListOptions{Cursor: next})
	wantCode(t, err, 400, client.ErrorCodeInvalidCursor)

	// errors.As finds the answer through wrapping.
	var target *client.APIError
	if !errors.As(errors.Join(errors.New("context"), e), &target) || target.Code != client.ErrorCodeBodyTooLarge {
		t.Fatalf("errors.As through a wrap: %v", target)
	}
}
