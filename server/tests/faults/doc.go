// Package faults is progressdb's fault suite: it runs the real binary
// against real Pebble databases and audit folders, does to it what
// production does (SIGKILL at any instant, a lost lease, a full disk, bad
// configuration, malformed records, hostile requests) and checks, from the
// outside, the guarantees of the retention subsystem (spec §3–§5):
//
//   - live threads, messages and versions are never touched, byte for byte;
//   - every eligible item ends up purged with all of its keys;
//   - every purge has a "purged" audit record, and no surviving item has one;
//   - every sealed audit file verifies, and abandoned ones are sealed;
//   - two runs never hold the lease, or delete, at the same time.
//
// The package holds tests only. `make test` runs it in its short mode (one
// trial of each kill scenario, small fixtures); `make faults` runs the long
// mode, where PROGRESSDB_FAULT_TRIALS sets the number of crash trials. The
// tests run in parallel, two per core unless -parallel says otherwise:
// each has its own folders, ports and processes. Each randomised
// trial logs its seed; PROGRESSDB_FAULT_SEED replays it. docs/reliability.md
// lists every fault, how it is produced and what is checked.
package faults
