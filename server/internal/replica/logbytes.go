package replica

import (
	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/tracker"
)

// Trimming the log by bytes (docs/replication-design.md §4). Entries
// count alone does not bound a log whose entries carry an upload's bytes
// (1 MiB chunks, server/pkg/attachments): twice LogKeep of them would be
// about 10 GiB in every replica's log. So a replica also trims once the
// applied entries it holds pass LogMaxBytes, down to half of it, keeping
// what the slowest follower the leader hears from still needs as long as
// that stays within LogMaxBytes; a follower further behind catches up by
// snapshot, which carries the blobs as files rather than as entries.

// DefaultLogMaxBytes bounds the applied entries' bytes a replica keeps
// (Config.LogMaxBytes): as much as raft lets a leader hold uncommitted
// (maxUncommitted), more than two uploads at the default limit (25 MiB),
// and little against a database a snapshot copies anyway.
const DefaultLogMaxBytes = 64 << 20

// logBytes is the size of each entry of a replica's log from its first
// index up to the last applied one it saw; the worker's alone.
type logBytes struct {
	from  uint64 // index of sizes[0]; 0 until loaded
	sizes []uint64
	total uint64
}

// end is the index after the last entry known.
func (b *logBytes) end() uint64 { return b.from + uint64(len(b.sizes)) }

// note records an applied entry's size when it is the next one known;
// anything else is read from the log by sync.
func (b *logBytes) note(index, size uint64) {
	if b.from != 0 && index == b.end() {
		b.sizes = append(b.sizes, size)
		b.total += size
	}
}

// sync makes b cover the entries [first, applied]: those dropped from
// the log leave it, those it lacks are read with sizes (RaftLog's
// EntrySizes), a restart or a snapshot reading them all once.
func (b *logBytes) sync(first, applied uint64, sizes func(lo, hi uint64) ([]uint64, error)) error {
	if b.from == 0 || b.from > first || b.end() < first {
		b.from, b.sizes, b.total = first, nil, 0
	}
	for b.from < first {
		b.total -= b.sizes[0]
		b.sizes, b.from = b.sizes[1:], b.from+1
	}
	if len(b.sizes) == 0 {
		b.sizes = nil // let a long-lived slice's array go
	}
	if b.end() <= applied {
		more, err := sizes(b.end(), applied+1)
		if err != nil {
			b.from, b.sizes, b.total = 0, nil, 0
			return err
		}
		for _, s := range more {
			b.sizes = append(b.sizes, s)
			b.total += s
		}
	}
	return nil
}

// after is the bytes of the known entries after index i.
func (b *logBytes) after(i uint64) uint64 {
	if i < b.from {
		return b.total
	}
	n := b.total
	for k := b.from; k <= i && k < b.end(); k++ {
		n -= b.sizes[k-b.from]
	}
	return n
}

// trimTo is the index to drop the log up to for its bytes (0: none):
// once the entries known pass limit, the newest limit/2 bytes stay, or, when
// slowest (the match of the slowest follower still fed from the log,
// 0 when unknown; asked only then) is below that and what it lacks is
// within limit, everything it lacks.
func (b *logBytes) trimTo(limit uint64, slowestMatch func() uint64) uint64 {
	if limit == 0 || b.total <= limit {
		return 0
	}
	to, kept := b.end()-1, uint64(0)
	for to >= b.from && kept+b.sizes[to-b.from] <= limit/2 {
		kept += b.sizes[to-b.from]
		to--
	}
	if slowest := slowestMatch(); slowest != 0 && slowest < to && slowest >= b.from && b.after(slowest) <= limit {
		to = slowest
	}
	return to
}

// slowestFollower is, on a leader, the lowest match index of the
// replicas it sends entries to and heard from within the last election
// timeout (raft's RecentActive, kept by CheckQuorum); 0 on a follower,
// or when none is behind the leader's own.
func slowestFollower(rn *raft.RawNode, self uint64) uint64 {
	if rn.BasicStatus().RaftState != raft.StateLeader {
		return 0
	}
	slowest := uint64(0)
	for id, pr := range rn.Status().Progress {
		if id == self || !pr.RecentActive || pr.State == tracker.StateSnapshot {
			continue
		}
		if slowest == 0 || pr.Match < slowest {
			slowest = pr.Match
		}
	}
	return slowest
}
