package replica

import (
	"cmp"
	"fmt"
	"slices"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/tracker"
)

// Roles of a replica in its group, as GroupStatus names them.
const (
	RoleLeader       = "leader"
	RoleFollower     = "follower"
	RoleCandidate    = "candidate"
	RolePreCandidate = "pre_candidate"
)

// GroupStatus is one group as this host's replica sees it: what `cluster
// status` and GET /admin/cluster show of a replicated shard.
type GroupStatus struct {
	Group   uint64 `json:"group"`
	Replica uint64 `json:"replica"`
	Role    string `json:"role"`
	// Leader is the leader's replica ID; 0 while none is known.
	Leader uint64 `json:"leader"`
	Term   uint64 `json:"term"`
	// Commit is the highest index this replica knows committed; Applied
	// the highest its store applied.
	Commit  uint64 `json:"commit"`
	Applied uint64 `json:"applied"`
	// Serving: this replica leads and has applied an entry of its term,
	// so it evaluates writes and serves reads.
	Serving bool `json:"serving"`
	// Failed is the error the group stopped on here; "" while it runs.
	Failed string `json:"failed,omitempty"`
	// Peers is every replica's progress as the leader tracks it, this
	// one included, by replica ID; empty on a follower.
	Peers []PeerStatus `json:"peers,omitempty"`
}

// PeerStatus is one replica's progress as its leader tracks it.
type PeerStatus struct {
	Replica uint64 `json:"replica"`
	// Match is the highest index known to be in its log.
	Match uint64 `json:"match"`
	// Lag is how many entries of the leader's log it lacks.
	Lag uint64 `json:"lag"`
	// Active: the leader heard from it within the last election timeout
	// (always true for the leader itself).
	Active  bool `json:"active"`
	Learner bool `json:"learner,omitempty"`
	// State is how the leader sends to it: probe (finding where its log
	// matches), replicate (streaming entries) or snapshot.
	State string `json:"state"`
}

// GroupStatus returns the group's status on this replica.
func (h *Host) GroupStatus(groupID uint64) (GroupStatus, error) {
	g := h.group(groupID)
	if g == nil {
		return GroupStatus{}, fmt.Errorf("group %d: %w", groupID, ErrNoGroup)
	}
	return g.status(), nil
}

// Statuses returns the status of every group this host runs, by group.
func (h *Host) Statuses() []GroupStatus {
	h.mu.RLock()
	gs := make([]*group, 0, len(h.groups))
	for _, g := range h.groups {
		gs = append(gs, g)
	}
	h.mu.RUnlock()
	out := make([]GroupStatus, 0, len(gs))
	for _, g := range gs {
		out = append(out, g.status())
	}
	slices.SortFunc(out, func(a, b GroupStatus) int { return cmp.Compare(a.Group, b.Group) })
	return out
}

func (g *group) status() GroupStatus {
	g.rnMu.Lock()
	st := g.rn.Status()
	failed := g.failed
	g.rnMu.Unlock()
	out := GroupStatus{Group: g.id, Replica: g.replica, Role: roleName(st.RaftState), Leader: st.Lead,
		Term: st.GetTerm(), Commit: st.GetCommit(), Applied: g.raftLog().Applied(), Serving: g.lease.Load() != 0}
	if failed != nil {
		out.Failed = failed.Error()
	}
	last := st.Progress[g.replica].Match // the leader's own: its last index
	for id, pr := range st.Progress {
		ps := PeerStatus{Replica: id, Match: pr.Match, Active: pr.RecentActive || id == g.replica,
			Learner: pr.IsLearner, State: stateName(pr.State)}
		if last > pr.Match {
			ps.Lag = last - pr.Match
		}
		out.Peers = append(out.Peers, ps)
	}
	slices.SortFunc(out.Peers, func(a, b PeerStatus) int { return cmp.Compare(a.Replica, b.Replica) })
	return out
}

func roleName(s raft.StateType) string {
	switch s {
	case raft.StateLeader:
		return RoleLeader
	case raft.StateCandidate:
		return RoleCandidate
	case raft.StatePreCandidate:
		return RolePreCandidate
	default:
		return RoleFollower
	}
}

func stateName(s tracker.StateType) string {
	switch s {
	case tracker.StateReplicate:
		return "replicate"
	case tracker.StateSnapshot:
		return "snapshot"
	default:
		return "probe"
	}
}
