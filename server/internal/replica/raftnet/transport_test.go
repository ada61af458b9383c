package raftnet_test

import (
	"encoding/binary"
	"fmt"
	"strings"
	"testing"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/progressdb/progressdb/server/internal/replica/raftnet"
	"github.com/progressdb/progressdb/server/internal/replica/replicatest"
)

const (
	metricSent       = "progressdb_replica_messages_sent_total"
	metricDropped    = "progressdb_replica_messages_dropped_total"
	metricReconnects = "progressdb_replica_stream_reconnects_total"
	metricRejected   = "progressdb_replica_frames_rejected_total"
)

// Four groups on three nodes elect leaders and apply commands proposed
// through every node, in one order on every replica, over one stream per
// pair of nodes: no pair needed a second connection, no message was
// dropped.
func TestNetworkGroupsElectAndApply(t *testing.T) {
	t.Parallel()
	c := newNetCluster(t, 0, 1, 2, 3)
	const perProposer = 5
	c.ProposeFromEvery(c.groups, perProposer, func(g uint64, i, k int) string { return fmt.Sprintf("g%d n%d k%d", g, i, k) })
	for _, g := range c.groups {
		c.Converged(g, 3*perProposer)
	}
	sent := 0.0
	for i := range c.nodes {
		sent += c.counter(i, metricSent, "", "")
		if d := c.counter(i, metricDropped, "", ""); d != 0 {
			t.Errorf("node %d dropped %v messages", i, d)
		}
		for j := range c.nodes {
			if i != j && c.proxy[i][j].Accepted() > 1 {
				t.Errorf("node %d opened %d connections to node %d", i, c.proxy[i][j].Accepted(), j)
			}
		}
	}
	if sent == 0 {
		t.Fatal("no message counted as sent")
	}
}

// A leader cut off from both peers by the proxies commits nothing: a
// command proposed to it is never applied by any replica. The majority
// elects a new leader and commits; once healed, the old leader's streams
// are opened again and it catches up with the majority's log.
func TestNetworkCutOffLeaderCommitsNothing(t *testing.T) {
	t.Parallel()
	c := newNetCluster(t, 5)
	const g = 5
	old := c.CutOffLeader(g, c.cut)
	if r := c.counter(old, metricReconnects, "", ""); r == 0 {
		t.Fatal("the old leader's streams were never opened again")
	}
}

// A follower's node stops (server, transport, host, stores) and starts
// again on the same address from its stores: the others' streams to it
// broke and are opened again, and it catches up with what it missed.
func TestNetworkRestartedPeerCatchesUp(t *testing.T) {
	t.Parallel()
	c := newNetCluster(t, 6)
	const g = 6
	for k := range 5 {
		c.Propose(k%3, g, fmt.Sprintf("before %d", k))
	}
	c.Converged(g, 5)
	lead := c.Leader(g)
	down := (lead + 1) % 3
	c.stop(down)
	for k := range 10 {
		c.Propose(lead, g, fmt.Sprintf("while down %d", k))
	}
	c.start(down, nil)
	got := c.Converged(g, 15)
	if got[4] != "before 4" || got[14] != "while down 9" {
		t.Fatalf("applied %q", got)
	}
	c.WaitFor("the leader's stream to the restarted node", func() bool {
		return c.counter(lead, metricReconnects, "", "") > 0 && c.proxy[lead][down].Accepted() >= 2
	})
}

// A frame that no node sends (a message of raft's local kinds) written
// into a live stream is rejected: the receiver closes that stream, logs
// and counts why, and delivers nothing of it; the sender opens a new one
// and the group goes on committing on every replica.
func TestNetworkMalformedFrameClosesOnlyItsStream(t *testing.T) {
	t.Parallel()
	c := newNetCluster(t, 8)
	const g = 8
	c.Propose(0, g, "before")
	c.Converged(g, 1)
	lead := c.Leader(g)
	follower := (lead + 1) % 3
	hup, err := proto.Marshal(&raftpb.Message{Type: raftpb.MessageType_MsgHup.Enum(), To: new(replicatest.ID(g, follower)), From: new(replicatest.ID(g, lead))})
	if err != nil {
		t.Fatal(err)
	}
	rec := binary.AppendUvarint(binary.AppendUvarint(nil, g), uint64(len(hup)))
	frame := binary.BigEndian.AppendUint32(nil, uint32(len(rec)+len(hup)))
	frame = append(append(frame, rec...), hup...)
	c.WaitFor("a live stream to write into", func() bool {
		return raftnet.WriteRaw(c.nodes[lead].tr, nodeName(follower), frame)
	})
	c.WaitFor("the frame rejected and the stream opened again", func() bool {
		return c.counter(follower, metricRejected, "", "") == 1 && c.counter(lead, metricReconnects, "", "") >= 1
	})
	if logs := c.logs.String(); !strings.Contains(logs, "raft_frame_rejected") || !strings.Contains(logs, "MsgHup is local to a node") {
		t.Fatalf("no rejection with its reason in the logs:\n%s", logs)
	}
	c.Propose(follower, g, "after")
	c.Converged(g, 2)
}
