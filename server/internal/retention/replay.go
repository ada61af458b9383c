package retention

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"strings"

	"github.com/progressdb/progressdb/audit"
	"github.com/progressdb/progressdb/server/pkg/keystore"
	"github.com/progressdb/progressdb/server/pkg/store"
)

// A restored database (from a backup, or copied back by hand) lacks the
// purges the audit trail records after its head (head.go). A replay run
// repeats them, every cause alike, through the one purge pipeline: the
// replay source hands each recorded item to the same claim, confirmation,
// batches, markers, audit records and erase as any other source. Its
// file's header says trigger "restore" or "start"; each item is recorded
// purged with replayed: true, or skipped with reason "absent" when the
// database never held it or no longer does (spec §10).

// ReplayOptions tune a replay run (RunRequest.Replay).
type ReplayOptions struct {
	// BackupID names the backup restored (header backup_id).
	BackupID string
	// AcceptBrokenAudit replays what the trail after the head still shows
	// when it does not verify (a file missing, a broken chain, a bad
	// signature), instead of replaying nothing and failing. Recorded in
	// the header.
	AcceptBrokenAudit bool
	// PublicKey, when set, requires every file after the head to carry a
	// valid footer signature.
	PublicKey ed25519.PublicKey
}

// ErrBrokenTrail: the audit trail after the database's head does not
// verify, so what the database lacks is not known; nothing was replayed.
var ErrBrokenTrail = errors.New("the audit trail after the database's head does not verify")

// causeReplay names the replay source in progress and logs; every item
// keeps the cause its first purge recorded.
const causeReplay = "replay"

// replaying reports whether this run is a replay.
func (rn *run) replaying() bool { return audit.IsReplayTrigger(rn.trigger) }

// sourcesFor chooses a run's sources by its trigger.
func sourcesFor(req RunRequest) []source {
	if audit.IsReplayTrigger(req.Trigger) {
		return []source{&replaySource{trigger: req.Trigger, opts: req.Replay}}
	}
	return policySources()
}

// headerNoter is a source that adds to the run's audit header.
type headerNoter interface{ note(h *audit.Header) }

var (
	_ source      = (*replaySource)(nil)
	_ headerNoter = (*replaySource)(nil)
)

// replaySource lists the items the trail records purged after the
// database's head, in the trail's order, each once. Replays of other
// copies are passed over: their items were recorded purged before them.
type replaySource struct {
	trigger string
	opts    ReplayOptions

	loaded bool
	err    error
	items  []audit.Item
	// atts are the attachments the trail records purged on their own
	// (their message and thread not purged after the head).
	atts []audit.Item
}

func (*replaySource) cause() string { return causeReplay }

func (s *replaySource) note(h *audit.Header) {
	h.Trigger = s.trigger
	h.BackupID = s.opts.BackupID
	h.AcceptBrokenAudit = s.opts.AcceptBrokenAudit
}

// load reads the trail after the head, once; the run holds the lease.
func (s *replaySource) load(ctx context.Context, rn *run) error {
	if s.loaded {
		return s.err
	}
	s.loaded = true
	head, _, _, err := rn.r.settle(ctx)
	if err != nil {
		s.err = fmt.Errorf("read the database's audit head: %w", err)
		return s.err
	}
	id, err := rn.r.identity(ctx)
	if err != nil {
		s.err = err
		return s.err
	}
	tr, err := audit.After(rn.r.cfg.AuditPath, head, s.opts.PublicKey)
	if err != nil {
		s.err = fmt.Errorf("read the audit trail: %w", err)
		return s.err
	}
	for _, p := range tr.Problems {
		rn.r.log.Error("retention_replay_trail_broken", "run_id", rn.id, "file", p.File, "line", p.Line,
			"reason", p.Reason, "accepted", s.opts.AcceptBrokenAudit)
	}
	if len(tr.Problems) > 0 && !s.opts.AcceptBrokenAudit {
		s.err = &BrokenTrailError{Problems: tr.Problems}
		return s.err
	}
	seen := make(map[audit.ItemKey]bool)
	// Accepted, a broken trail is replayed as far as it can be read: the
	// files the chain reaches, then those after the head it does not.
	for _, f := range append(tr.Files, tr.Unlinked...) {
		if f.RunID == rn.id || replayOrOther(&f.Header, id) {
			continue
		}
		err := audit.Purged(f.Path, func(it audit.Item) error {
			if it.ItemType == audit.ItemAttachment {
				// Its record goes again with its message's or thread's
				// replayed purge, which owes its blob anew; one purged on
				// its own is replayed on its own (below).
				s.atts = append(s.atts, it)
				return nil
			}
			k := audit.ItemKey{Type: it.ItemType, ID: it.ItemID}
			if !seen[k] {
				seen[k] = true
				s.items = append(s.items, it)
			}
			return nil
		})
		if err != nil {
			s.err = fmt.Errorf("read %s: %w", f.Path, err)
			return s.err
		}
	}
	own := s.atts[:0]
	for _, it := range s.atts {
		k := audit.ItemKey{Type: it.ItemType, ID: it.ItemID}
		if !seen[k] && !seen[audit.ItemKey{Type: audit.ItemMessage, ID: it.MessageID}] &&
			!seen[audit.ItemKey{Type: audit.ItemThread, ID: it.ThreadID}] {
			seen[k] = true
			own = append(own, it)
		}
	}
	s.atts = own
	rn.r.log.Info("retention_replay_loaded", "run_id", rn.id, "head", head.RunID, "files", len(tr.Files),
		"items", len(s.items), "attachments", len(s.atts))
	return nil
}

func (s *replaySource) count(ctx context.Context, rn *run) (int64, error) {
	if err := s.load(ctx, rn); err != nil {
		return 0, err
	}
	return int64(len(s.items) + len(s.atts)), nil
}

func (s *replaySource) scan(ctx context.Context, rn *run) error {
	if err := s.load(ctx, rn); err != nil {
		return err
	}
	for _, it := range s.items {
		if rn.done() {
			return nil
		}
		rn.replay(ctx, it)
		_ = rn.looked()
	}
	for _, it := range s.atts {
		if rn.done() {
			return nil
		}
		rn.replayAttachment(ctx, it)
		_ = rn.looked()
	}
	return nil
}

// replayAttachment repeats the purge of an attachment purged on its own:
// the copy's record goes, deleted in the copy or not, and its blob is
// owed again (a file:// backup brings the blob back too).
func (rn *run) replayAttachment(ctx context.Context, it audit.Item) {
	if err := rn.checkpoint(ctx); err != nil {
		rn.halt(err)
		return
	}
	if err := rn.del.oweErase(ctx); err != nil {
		rn.fail(ctx, stagePurge, "", err)
		return
	}
	rn.journal.scanned++
	d := store.AttachmentDeletion{Thread: it.ThreadID, Message: it.MessageID, ID: it.ItemID}
	err := rn.r.st.PurgeAttachment(ctx, d, store.AttachmentPurge{RunID: rn.id, Cause: it.Cause, Erase: rn.del.erase,
		Replayed: true})
	switch {
	case errors.Is(err, store.ErrNotEligible) && errors.Is(err, store.ErrNotFound):
		absent := attachmentItem(d, audit.StatusSkipped, audit.ReasonAbsent)
		absent.Cause = it.Cause
		rn.record(absent)
	case errors.Is(err, store.ErrNotEligible):
		rn.record(attachmentItem(d, audit.StatusSkipped, err.Error()))
	case err != nil:
		rn.fail(ctx, stagePurge, "", err)
	}
}

// replay repeats the purge of one item the trail records.
func (rn *run) replay(ctx context.Context, it audit.Item) {
	if err := ctx.Err(); err != nil {
		rn.halt(err)
		return
	}
	kind := store.ItemKind(it.ItemType)
	c := candidate{kind: kind, id: it.ItemID, tid: it.ThreadID, cause: it.Cause, replay: true}
	if c.cause == "" {
		c.cause = audit.CauseDeleted // recorded before causes existed
	}
	if !it.DeletedAt.IsZero() {
		c.deletedTS = it.DeletedAt.UnixNano()
	}
	exists, err := rn.r.st.ItemExists(ctx, kind, it.ItemID)
	if err != nil {
		rn.fail(ctx, stageScan, "read "+it.ItemType, err)
		return
	}
	rn.journal.scanned++
	if !exists {
		absent := c.item(audit.StatusSkipped, audit.ReasonAbsent)
		absent.Replayed = false
		rn.record(absent)
		return
	}
	if err := rn.destroySubjectKey(ctx, c); err != nil {
		rn.fail(ctx, stagePurge, "destroy the key of "+it.ItemType+" "+it.ItemID, err)
		return
	}
	rn.take(ctx, c)
}

// destroySubjectKey destroys again, on a copy, the key a subject erasure
// destroyed (spec §12 Copies): the copy's key store, restored from before
// the erasure, still holds the author's key in the thread, which would
// open the thread's title they sealed even once their messages are gone.
// The key's number is in the message's record; the author is not needed.
// Done before the claim: a replay killed after it repeats it as a no-op.
func (rn *run) destroySubjectKey(ctx context.Context, c candidate) error {
	if rn.r.keys == nil || c.cause != audit.CauseSubject || c.kind != store.KindMessage {
		return nil
	}
	versions, err := rn.r.st.ListVersions(ctx, c.tid, c.id)
	if errors.Is(err, store.ErrNotFound) || err == nil && len(versions) == 0 {
		return nil
	}
	if err != nil {
		return err
	}
	if num := versions[0].Key; num != 0 {
		gone, err := rn.r.keys.DestroyKey(ctx, keystore.KeyRef{Thread: c.tid, Number: num})
		if err != nil {
			return err
		}
		rn.r.log.Debug("retention_replay_subject_key_destroyed", "run_id", rn.id, "thread_id", c.tid,
			"message_id", c.id, "key", num, "was_there", gone)
	}
	return nil
}

// BrokenTrailError lists why the trail after the head does not verify.
type BrokenTrailError struct{ Problems []audit.Problem }

func (e *BrokenTrailError) Error() string {
	var b strings.Builder
	b.WriteString(ErrBrokenTrail.Error())
	for i, p := range e.Problems {
		if i == 3 {
			fmt.Fprintf(&b, "; and %d more", len(e.Problems)-i)
			break
		}
		b.WriteString("; ")
		b.WriteString(p.Error())
	}
	return b.String()
}

func (e *BrokenTrailError) Unwrap() error { return ErrBrokenTrail }

// Behind reports how many purges the trail records after the database's
// head, replays of other copies aside, and whether the trail after the
// head is whole. It reads without the lease, so a server start never
// waits for a run elsewhere: the database is this process's alone.
func (r *Runner) Behind(ctx context.Context) (lacks int64, whole bool, err error) {
	cur, err := audit.CurrentHead(r.cfg.AuditPath)
	switch {
	case err != nil:
		return 0, false, fmt.Errorf("%w: %w", errTrailUnreadable, err)
	case cur.IsZero():
		return 0, true, nil // no sealed file: nothing recorded to lack
	}
	_, lacks, whole, err = r.settle(ctx)
	return lacks, whole, err
}

// errTrailUnreadable: the audit folder cannot be listed at all.
var errTrailUnreadable = errors.New("audit folder unreadable")

// CatchUp replays what the database lacks before the server answers its
// first request, or a retention run purges (trigger "start"): a database
// copied back by hand is behind its trail. It does nothing when the
// database is not behind. A replay that cannot complete is an error: the
// database would serve purged content. When the lease is held elsewhere
// (a run of another database sharing the trail), wait says whether to
// wait for it (a server start) or return the *LeaseHeldError.
func (m *Manager) CatchUp(ctx context.Context, wait bool) (*Result, error) {
	lacks, whole, err := m.runner.Behind(ctx)
	if errors.Is(err, errTrailUnreadable) {
		// Not a trail that says anything: the server starts as it always
		// did, and every run reports the folder (fail closed, nothing
		// deleted without a durable audit header).
		m.log.Error("retention_replay_check_failed", "err", err)
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read the audit trail after the database's head: %w", err)
	}
	if lacks == 0 && whole {
		return nil, nil
	}
	m.log.Warn("retention_database_behind_trail", "purges_lacking", lacks, "trail_whole", whole,
		"action", "replaying them before serving")
	var res Result
	for waited := false; ; waited = true {
		res, err = m.Run(ctx, RunRequest{Trigger: audit.TriggerStart})
		var held *LeaseHeldError
		if !errors.As(err, &held) || !wait {
			break
		}
		// A run of another database sharing the trail: the replay waits
		// for it, as nothing may be served before the replay.
		if !waited {
			m.log.Warn("retention_replay_waits_for_lease", "holder", held.Holder.Owner)
		}
		if err := sleep(ctx, SystemClock{}, holdRetry); err != nil {
			return nil, err
		}
	}
	if err != nil {
		return &res, err
	}
	if res.Status != audit.RunCompleted {
		return &res, fmt.Errorf("replay run %s ended %s: %s", res.RunID, res.Status, res.Error)
	}
	return &res, nil
}
