// Package replica runs the Raft groups of replicated shards on one node
// (docs/replication-design.md §3): a RawNode per replica, driven by one
// scheduler (a queue of groups with work and a few workers) and one
// ticker, with each group's log and state in its shard's store
// (store.RaftLog) and its messages sent through a Transport. A group
// applies its store's commands (store.ApplyCommand) and is the store's
// Proposer, so the store's writes become proposals evaluated on the
// leader (§5). `progressdb serve` runs one Host per node of a cluster
// created with replicas (server/internal/app).
package replica
