package router

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/progressdb/progressdb/server/internal/api"
	"github.com/progressdb/progressdb/server/internal/wire"
	"github.com/progressdb/progressdb/server/pkg/store"
)

// maxFanOutBody bounds one shard's answer to a fan-out (a page of 1000
// threads with the longest titles stays well below).
const maxFanOutBody = 16 << 20

// eachShard runs f for every shard of the cluster at once and returns the
// first error in shard order.
func (rt *Router) eachShard(f func(n int) error) error {
	shards := rt.o.View.Shards()
	errs := make([]error, shards)
	var wg sync.WaitGroup
	for n := range shards {
		wg.Go(func() { errs[n] = f(n) })
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// ask calls shard n's owner about that shard alone (HeaderShard) with the
// client's credentials and request ID, and decodes a 200 answer into dst.
// Any other answer is returned as the status and the answer's error text.
// The call is bounded by the request timeout unless long is set.
func (rt *Router) ask(ctx context.Context, r *http.Request, n int, method, uri string, body []byte, dst any, long bool) (int, string, error) {
	if !long {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, rt.o.RequestTimeout)
		defer cancel()
	}
	h := http.Header{}
	for _, k := range []string{"Authorization", "X-Request-Id", "Content-Type"} {
		if v := r.Header.Values(k); len(v) > 0 {
			h[k] = v
		}
	}
	h.Set(HeaderShard, strconv.Itoa(n))
	resp, err := rt.call(ctx, n, method, uri, h, body)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxFanOutBody))
	if err != nil {
		if errors.Is(ctx.Err(), context.Canceled) {
			return 0, "", ctx.Err()
		}
		return 0, "", unavailable(n, "reading its owner's answer: %v", err)
	}
	if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusAccepted {
		var e struct {
			Error string `json:"error"`
		}
		_ = json.Unmarshal(data, &e)
		return resp.StatusCode, e.Error, nil
	}
	if err := json.Unmarshal(data, dst); err != nil {
		return 0, "", unavailable(n, "its owner's answer is not understood: %v", err)
	}
	return resp.StatusCode, "", nil
}

// get asks shard n's owner for uri and decodes its answer into dst; any
// answer but 200 leaves the shard unavailable.
func (rt *Router) get(ctx context.Context, r *http.Request, n int, uri string, dst any) error {
	status, msg, err := rt.ask(ctx, r, n, http.MethodGet, uri, nil, dst, false)
	if err != nil {
		return err
	}
	if status != http.StatusOK {
		return unavailable(n, "its owner answered %d: %s", status, msg)
	}
	return nil
}

// shardCall returns the shard a node's fan-out call asks about, after
// checking that this node owns it with the caller's epoch.
func (rt *Router) shardCall(r *http.Request) (int, bool, error) {
	call, ok := nodeCallOf(r.Context())
	if !ok {
		return 0, false, nil
	}
	if call.shard < 0 {
		return 0, true, &routeError{http.StatusBadRequest, api.CodeInvalidParameter, HeaderShard + " is required on this route", ErrNotNode}
	}
	if rt.grouped(call.shard) {
		return call.shard, true, rt.checkLeader(r.Context(), call.shard, isRead(r))
	}
	return call.shard, true, rt.checkCall(call.shard, call, isRead(r))
}

type threadPage struct {
	Threads    []wire.Thread `json:"threads"`
	NextCursor string        `json:"next_cursor"`
}

// listLimit is the page size the store applies to o.
func listLimit(o store.ListOptions) int {
	if o.Limit == 0 {
		return store.DefaultListLimit
	}
	return o.Limit
}

// ListThreads implements api.Cluster: every shard's page after the cursor,
// merged in ID order and cut to the limit. The cursor holds the last ID
// of the page, as on a single node, so it means the same on every shard; a
// next cursor is handed out when any shard has more. A shard that cannot
// answer makes the whole listing fail (503), never a short page.
func (rt *Router) ListThreads(r *http.Request, o store.ListOptions) ([]wire.Thread, string, error) {
	if o.Cursor != "" {
		if _, err := store.ThreadCursorID(o.Cursor); err != nil {
			return nil, "", err
		}
	}
	ctx := r.Context()
	if n, ok, err := rt.shardCall(r); ok {
		if err != nil {
			return nil, "", err
		}
		st, _ := rt.o.Shards.Store(n)
		ts, next, err := st.ListThreads(ctx, o)
		return wire.Threads(ts), next, err
	}
	q := url.Values{"limit": {strconv.Itoa(listLimit(o))}}
	if o.Cursor != "" {
		q.Set("cursor", o.Cursor)
	}
	if o.IncludeDeleted {
		q.Set("include_deleted", "true")
	}
	pages := make([]threadPage, rt.o.View.Shards())
	err := rt.eachShard(func(n int) error {
		if st, ok := rt.here(n); ok {
			if err := rt.readHere(ctx, n); err != nil {
				return err
			}
			ts, next, err := st.ListThreads(ctx, o)
			pages[n] = threadPage{Threads: wire.Threads(ts), NextCursor: next}
			if err != nil {
				return unavailable(n, "listing it: %v", err)
			}
			return nil
		}
		return rt.get(ctx, r, n, "/v1/threads?"+q.Encode(), &pages[n])
	})
	if err != nil {
		return nil, "", fmt.Errorf("listing threads: %w", err)
	}
	var all []wire.Thread
	more := false
	for _, p := range pages {
		all = append(all, p.Threads...)
		more = more || p.NextCursor != ""
	}
	slices.SortFunc(all, func(a, b wire.Thread) int { return strings.Compare(a.ID, b.ID) })
	limit := listLimit(o)
	if len(all) > limit {
		all, more = all[:limit], true
	}
	next := ""
	if more && len(all) > 0 {
		next = store.ThreadCursor(all[len(all)-1].ID)
	}
	if all == nil {
		all = []wire.Thread{}
	}
	return all, next, nil
}

// LegalHolds implements api.Cluster: every shard's held threads, in ID order.
func (rt *Router) LegalHolds(r *http.Request) ([]wire.Thread, error) {
	ctx := r.Context()
	if n, ok, err := rt.shardCall(r); ok {
		if err != nil {
			return nil, err
		}
		st, _ := rt.o.Shards.Store(n)
		ts, err := st.LegalHolds(ctx)
		return wire.Threads(ts), err
	}
	lists := make([]struct {
		Threads []wire.Thread `json:"threads"`
	}, rt.o.View.Shards())
	err := rt.eachShard(func(n int) error {
		if st, ok := rt.here(n); ok {
			if err := rt.readHere(ctx, n); err != nil {
				return err
			}
			ts, err := st.LegalHolds(ctx)
			lists[n].Threads = wire.Threads(ts)
			if err != nil {
				return unavailable(n, "listing its holds: %v", err)
			}
			return nil
		}
		return rt.get(ctx, r, n, "/admin/legal_holds", &lists[n])
	})
	if err != nil {
		return nil, fmt.Errorf("listing legal holds: %w", err)
	}
	all := []wire.Thread{}
	for _, l := range lists {
		all = append(all, l.Threads...)
	}
	slices.SortFunc(all, func(a, b wire.Thread) int { return strings.Compare(a.ID, b.ID) })
	return all, nil
}
