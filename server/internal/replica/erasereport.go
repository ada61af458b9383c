package replica

import (
	"cmp"
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"go.etcd.io/raft/v3"

	"github.com/progressdb/progressdb/server/internal/retention"
	"github.com/progressdb/progressdb/server/pkg/store"
)

// Which replicas erased (spec §15, docs/replication-design.md §11). Each
// replica, once its eraser has erased every purge it applied, reports
// the applied index it erased through as an entry of the group's log (a
// report: proposal ID 0, which no proposal has), forwarded to the leader
// like any proposal. Every replica applies the reports in log order and
// keeps the highest index each replica reported; the leader's retention
// run reads them for its footer (ReplicasErased). Reports are kept in
// memory: a replica that restarts knows those applied since, as it
// counts only the purges it applied since.

// reportID is the proposal ID of reports, which no command has.
const reportID = 0

// reportErased is the kind of a report that a replica erased.
const reportErased = 'e'

// ErasureReportWait bounds how long a run's footer waits for the
// replicas the leader hears from to report the erase of its purges.
const ErasureReportWait = 10 * time.Second

// erasurePoll is how often the reports are looked at meanwhile.
const erasurePoll = 20 * time.Millisecond

// proposalID is a random proposal ID, never reportID.
func proposalID() uint64 {
	for {
		if id := rand.Uint64(); id != reportID {
			return id
		}
	}
}

// reportErase proposes that this replica erased everything it applied up
// to index. A report raft drops (no leader known) is not sent again:
// the next erase reports a later index.
func (g *group) reportErase(index uint64) {
	data := binary.AppendUvarint(binary.AppendUvarint([]byte{reportErased}, g.replica), index)
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		return
	}
	// Not among the waiting proposals: nobody waits for a report.
	g.props = append(g.props, &proposal{id: reportID, cmd: data, done: make(chan error, 1), start: time.Now()})
	g.mu.Unlock()
	g.host.sched.enqueue(g.id)
}

// applyReport applies a report's entry (the worker's). A report of a
// kind this version does not know is passed over.
func (g *group) applyReport(data []byte) {
	if len(data) == 0 || data[0] != reportErased {
		return
	}
	r, n := binary.Uvarint(data[1:])
	if n <= 0 {
		return
	}
	index, m := binary.Uvarint(data[1+n:])
	if m <= 0 {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.erasedBy[r] = max(g.erasedBy[r], index)
}

// erasures sorts the group's replicas, on its leader, by whether they
// reported the erase of the last purge it applied: waiting are those
// that owe it and should report soon (their log holds the purge; not
// whether the leader heard from them lately, which CheckQuorum clears
// every election timeout). purge is 0 when this replica applied none
// since it started.
func (g *group) erasures() (purge uint64, erased, pending, waiting []uint64, err error) {
	g.rnMu.Lock()
	st := g.rn.Status()
	log := g.log
	g.rnMu.Unlock()
	if st.RaftState != raft.StateLeader {
		return 0, nil, nil, nil, fmt.Errorf("group %d: %w", g.id, store.ErrNotLeader)
	}
	purge, _ = log.Purges()
	g.mu.Lock()
	defer g.mu.Unlock()
	for id, pr := range st.Progress {
		switch {
		case g.erasedBy[id] >= purge:
			erased = append(erased, id)
		case id == g.replica || pr.Match >= purge:
			waiting = append(waiting, id)
			fallthrough
		default:
			pending = append(pending, id)
		}
	}
	for _, ids := range [][]uint64{erased, pending, waiting} {
		slices.SortFunc(ids, cmp.Compare)
	}
	return purge, erased, pending, waiting, nil
}

// ReplicasErased implements retention.ReplicaEraser: the replicas of the
// group that reported the erase of the last purge this leader applied,
// and those that still owe it (down, behind, or not reported within
// ErasureReportWait: a replica whose log holds the purge is waited for). Nothing is known of a leader that applied no purge
// since it started.
func (l *leaderLease) ReplicasErased(ctx context.Context) (erased, pending []uint64, err error) {
	deadline := time.Now().Add(ErasureReportWait)
	for {
		if err := l.Check(); err != nil {
			return nil, nil, err
		}
		purge, erased, pending, waiting, err := l.g.erasures()
		if err != nil || purge == 0 {
			return nil, nil, err
		}
		if len(waiting) == 0 || time.Now().After(deadline) {
			return erased, pending, nil
		}
		select {
		case <-ctx.Done():
			return erased, pending, nil
		case <-l.done:
		case <-time.After(erasurePoll):
		}
	}
}

var _ retention.ReplicaEraser = (*leaderLease)(nil)
