// Package retention purges soft-deleted and expired content and records
// every purge in the signed audit trail (spec §3–§6, §12). It holds:
//
//   - runs: the Runner (runner.go) begins a run (run.go) whose sources
//     (sources.go) feed the rules applied to each entry (consider.go);
//     claims (claims.go) become deletions in paced batches (take.go,
//     deleter.go, pace.go) and records in the audit file (journal.go),
//     closed by the footer (finish.go); a run stops for the reasons of
//     stop.go, and the next one finishes what it left (recovery.go);
//   - the schedule and the service: the cron Scheduler (scheduler.go) and
//     the Manager the server and the API use (service.go,
//     service_contract.go), with pause (pause.go) and per-thread
//     policies (policy.go);
//   - the lease: the file lease and its session (lease.go, session.go),
//     which a cluster replaces with a shard's ownership (a Coordinator),
//     and Exclusive for maintenance that must not run beside a run
//     (exclusive.go);
//   - the audit head (head.go): where the trail stands, which backups
//     record and a hold for a backup or a move keeps still;
//   - subject erasure (erasure.go, erasure_contract.go): an author's
//     content purged through the same pipeline, with receipts;
//   - export before delete (export.go);
//   - replay (replay.go): the purges a trail records after a backup's
//     head, applied to a restored copy;
//   - sealing a database written before sealing was on (encrypt.go).
//
// Progress, metrics and the clock tests drive are in progress.go,
// metrics.go and clock.go.
package retention
