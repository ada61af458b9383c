package replica

import "go.etcd.io/raft/v3"

// Leadership is a group's term and leader as one of its replicas sees
// them.
type Leadership struct {
	Group   uint64
	Replica uint64 // the replica that sees it
	Term    uint64
	Leader  uint64 // the leader's replica ID; 0 while none is known
}

// Leading reports whether the replica that sees it is the leader.
func (l Leadership) Leading() bool { return l.Leader != 0 && l.Leader == l.Replica }

// LeaseChange is the start or the end of a replica's lease of its group:
// the replica leads and has applied an entry of its term, so its writes
// are proposed in that term and its retention runs under it
// (RetentionCoordinator). Term is that term, 0 when the lease ended (the
// replica stepped down, failed, was removed, or its host stopped). A
// lease may also end by a change to a later term's.
type LeaseChange struct {
	Group   uint64
	Replica uint64
	Term    uint64
}

// Leading reports whether the change starts a lease.
func (l LeaseChange) Leading() bool { return l.Term != 0 }

// observe counts a new leader and tells onLead when a Ready changed the
// term or the leader. It runs after the Ready's hard state was saved: a
// leadership is told once the term it belongs to is on disk.
func (g *group) observe(rd raft.Ready) {
	if rd.SoftState == nil && rd.HardState == nil {
		return
	}
	now := g.seen
	if rd.SoftState != nil {
		now.Leader = rd.SoftState.Lead
	}
	if rd.HardState != nil {
		now.Term = rd.HardState.GetTerm()
	}
	if now == g.seen {
		return
	}
	if now.Leader != 0 && now.Leader != g.seen.Leader {
		g.leaderChanges.Add(1)
	}
	g.seen = now
	if g.onLead != nil {
		g.onLead(now)
	}
}

// stopLeading tells onLead that a failed replica knows no leader: it
// steps no more, so a leader among the others will come, and this one
// must not be routed to meanwhile.
func (g *group) stopLeading() {
	if g.seen.Leader == 0 {
		return
	}
	g.seen.Leader = 0
	if g.onLead != nil {
		g.onLead(g.seen)
	}
}

// ReportUnreachable tells the group that a message to replica could not
// be sent: its leader stops streaming appends to it and probes instead.
// The transport calls it; it never blocks.
func (h *Host) ReportUnreachable(groupID, replica uint64) {
	h.report(groupID, func(rn *raft.RawNode) { rn.ReportUnreachable(replica) })
}

// ReportSnapshot tells the group how sending a snapshot to replica ended.
func (h *Host) ReportSnapshot(groupID, replica uint64, status raft.SnapshotStatus) {
	h.report(groupID, func(rn *raft.RawNode) { rn.ReportSnapshot(replica, status) })
}

// report queues r for the group's worker, the only caller of its RawNode.
func (h *Host) report(groupID uint64, r func(*raft.RawNode)) {
	g := h.group(groupID)
	if g == nil {
		return
	}
	g.mu.Lock()
	g.reports = append(g.reports, r)
	g.mu.Unlock()
	h.sched.enqueue(groupID)
}

// takeReports empties the reports.
func (g *group) takeReports() []func(*raft.RawNode) {
	g.mu.Lock()
	defer g.mu.Unlock()
	r := g.reports
	g.reports = nil
	return r
}
