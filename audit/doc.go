// Package audit writes, reads and verifies retention audit files (spec §5):
// the record a retention run leaves of every item it purged, stamped,
// skipped or failed on. Backup tooling may import it to check what it
// collects; it uses the standard library only.
//
// # Files
//
// One run writes one file, <root>/YYYY-MM/retention-<YYYYMMDDTHHMMSSZ>-<run_id>.jsonl,
// named after the UTC start of the run. While the run is in progress the
// name ends in .inprogress; the rename to .jsonl happens after the footer
// is written and synced, and a .jsonl file is never modified again. A file
// left in progress by a crash is finished by SealAbandoned, which appends a
// footer with status "aborted"; a file too damaged to seal is kept as
// .jsonl.corrupt. Folders are created 0750 and files 0640.
//
// # Lines
//
// Every line is one JSON object whose first keys are, in this order, msg,
// time (when the line was written, RFC 3339 UTC), run_id, seq (0, 1, 2, …)
// and prev (the hex SHA-256 of the previous line's exact bytes without its
// newline; "" on the header), followed by the fields of a Header, an Item or
// a Footer. The chain makes a changed, missing or reordered line visible to
// VerifyFile; the footer's counts must equal the sums over the items.
// Records hold IDs and timestamps only, never titles, bodies or authors.
//
// Files chain too: a header's prev_file is the hex SHA-256 of the last
// line (the footer) of the previous sealed file in run order, "" for the
// first, so a deleted file or an edited footer of any file but the newest
// shows in the file after it. With a signing key (Options), every footer
// carries an ed25519 signature of its chain hash (SignatureMessage).
// VerifyDirWith checks the links between files, the names, the signatures
// and reports every file in the tree that is not a sealed audit file, but
// the live run's. The full format is documented in docs/audit.md.
//
// # Use
//
// A run calls Create (which syncs the header before returning: nothing may
// be deleted before that), Item for each item, Sync before it relies on a
// record being durable, and Close with the footer. Tooling reads files with
// Open and Reader.Next, checks them with VerifyFile, VerifyDir or
// VerifyDirWith, and finds the newest run with LastRun.
package audit
