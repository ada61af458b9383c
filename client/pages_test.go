package client_test

import (
	"context"
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"

	"github.com/progressdb/progressdb/client"
)

// countingTransport counts the requests that go out.
type countingTransport struct{ n atomic.Int64 }

func (c *countingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	c.n.Add(1)
	return http.DefaultTransport.RoundTrip(req)
}

// The iterators follow next_cursor across pages: every item once, in the
// server's order, one request per page, and none after the caller stops.
func TestIteratorsCrossPages(t *testing.T) {
	base := serve(t)
	ctr := &countingTransport{}
	c := newClient(t, base, client.WithHTTP(&http.Client{Transport: ctr}))
	ctx := context.Background()

	var want []string
	for i := range 7 {
		id := fmt.Sprintf("t-%02d", i)
		check(c.CreateThread(ctx, client.NewThread{Id: &id, Title: id, Author: "ann"})).must(t)
		want = append(want, id)
	}
	check(c.CreateThread(ctx, client.NewThread{Id: ptr("t-gone"), Title: "gone", Author: "ann"})).must(t)
	if err := c.DeleteThread(ctx, "t-gone"); err != nil {
		t.Fatal(err)
	}

	before := ctr.n.Load()
	var got []string
	for th, err := range c.Threads(ctx, client.ListOptions{Limit: 3}) {
		got = append(got, check(th, err).must(t).Id)
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("threads %v, want %v", got, want)
	}
	if n := ctr.n.Load() - before; n != 3 {
		t.Fatalf("%d page requests for 7 threads by 3, want 3", n)
	}
	got = nil
	for th, err := range c.Threads(ctx, client.ListOptions{Limit: 3, IncludeDeleted: true}) {
		got = append(got, check(th, err).must(t).Id)
	}
	if len(got) != 8 {
		t.Fatalf("with deleted: %v", got)
	}

	// Stopping early sends no further page request.
	before = ctr.n.Load()
	for range c.Threads(ctx, client.ListOptions{Limit: 2}) {
		break
	}
	if n := ctr.n.Load() - before; n != 1 {
		t.Fatalf("%d requests for a loop stopped at its first item", n)
	}

	// Messages and versions likewise.
	var mids []string
	for i := range 5 {
		m := check(c.AppendMessage(ctx, "t-00", client.NewMessage{Author: "ann", Body: i})).must(t)
		mids = append(mids, m.Id)
	}
	var gotM []string
	for m, err := range c.Messages(ctx, "t-00", client.ListOptions{Limit: 2}) {
		gotM = append(gotM, check(m, err).must(t).Id)
	}
	if fmt.Sprint(gotM) != fmt.Sprint(mids) {
		t.Fatalf("messages %v, want %v", gotM, mids)
	}
	for i := 1; i < 5; i++ {
		check(c.EditMessage(ctx, "t-00", mids[0], i*10)).must(t)
	}
	var vs []int
	for v, err := range c.Versions(ctx, "t-00", mids[0], client.ListOptions{Limit: 2}) {
		vs = append(vs, check(v, err).must(t).Version)
	}
	if fmt.Sprint(vs) != "[1 2 3 4 5]" {
		t.Fatalf("versions %v", vs)
	}

	// A page a cursor resumes after: the rest of the listing.
	first, next, err := c.ThreadsPage(ctx, client.ListOptions{Limit: 4})
	if err != nil || len(first) != 4 || next == "" {
		t.Fatalf("first page %d, %q, %v", len(first), next, err)
	}
	got = nil
	for th, err := range c.Threads(ctx, client.ListOptions{Limit: 2, Cursor: next}) {
		got = append(got, check(th, err).must(t).Id)
	}
	if fmt.Sprint(got) != fmt.Sprint(want[4:]) {
		t.Fatalf("from the cursor: %v, want %v", got, want[4:])
	}

	// An error ends the iteration after one yield.
	var errs int
	for _, err := range c.Threads(ctx, client.ListOptions{Cursor: "zzz"}) {
		wantCode(t, err, 400, client.ErrorCodeInvalidCursor)
		errs++
	}
	if errs != 1 {
		t.Fatalf("%d yields of the error", errs)
	}
}
