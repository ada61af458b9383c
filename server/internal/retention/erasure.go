package retention

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/progressdb/progressdb/audit"
	"github.com/progressdb/progressdb/server/internal/wire"
	"github.com/progressdb/progressdb/server/pkg/erase"
	"github.com/progressdb/progressdb/server/pkg/keystore"
	"github.com/progressdb/progressdb/server/pkg/store"
)

// Subject erasure (spec §12, docs/sealed-content-design.md §7). A request
// records the author in the key store (sealed under the receipt key) and
// the erasure's status in the data store, then starts a run with trigger
// erasure. Every non-dry run with sealing on looks for pending erasures
// first (subjectSource), so a run killed part way is finished by the
// next, whatever its trigger. For each author key (thread, number) found
// through the key store's author index, in thread order:
//
//  1. a held thread is listed and kept;
//  2. the messages sealed under the key (the store's key-number index)
//     are claimed (purge markers, cause subject, the erasure's ID) and
//     confirmed under the thread's lock: from then on a hold of the
//     thread is refused until their records are written;
//
// then the claims are synced (every record is owed), the author's keys
// are destroyed (synced) in every thread not held, and the claimed
// messages are purged through the deleter and recorded like every other
// purge. The key store's erase step and the data's follow at the end of
// the run; once its footer is written the erasure is completed: its
// counts are read back from the audit files, and its entry in the key
// store is deleted and erased, so the author is left nowhere but in the
// receipt's HMAC.

// TriggerErasure is the trigger of the run a subject erasure starts.
const TriggerErasure = audit.TriggerErasure

// subjectSource finishes every pending erasure. It counts nothing: what it
// purges follows the authors' keys, not an index of what is due.
type subjectSource struct{}

var _ source = subjectSource{}

func (subjectSource) cause() string                              { return audit.CauseSubject }
func (subjectSource) count(context.Context, *run) (int64, error) { return 0, nil }

func (subjectSource) scan(ctx context.Context, rn *run) error {
	if rn.dry || rn.r.keys == nil {
		return nil
	}
	ids, err := rn.r.keys.PendingErasures(ctx)
	if err != nil {
		return fmt.Errorf("list pending erasures: %w", err)
	}
	for _, id := range ids {
		if rn.stop != nil {
			return nil
		}
		if err := rn.eraseSubject(ctx, id); err != nil {
			return err
		}
	}
	return nil
}

// sourcesWith is sourcesFor with the subject source: alone in a run an
// erasure started, first in every other non-replay run when sealing is on.
func (r *Runner) sourcesWith(req RunRequest) []source {
	srcs := sourcesFor(req)
	switch {
	case r.keys == nil || audit.IsReplayTrigger(req.Trigger):
		return srcs
	case req.Trigger == TriggerErasure:
		return []source{subjectSource{}}
	}
	return append([]source{subjectSource{}}, srcs...)
}

// erasureRun is what a run did for one erasure.
type erasureRun struct {
	doc      store.Erasure
	held     map[string]bool
	finished bool // every claim purged and recorded in this run's file
}

// eraseSubject works on erasure id: claims, key destruction, purges.
func (rn *run) eraseSubject(ctx context.Context, id string) error {
	r := rn.r
	author, err := r.keys.ErasureAuthor(ctx, id)
	if errors.Is(err, keystore.ErrNoErasure) {
		return nil // completed meanwhile
	}
	if err != nil {
		return err
	}
	doc, err := r.st.GetErasure(ctx, id)
	switch {
	case errors.Is(err, store.ErrNotFound):
		// Killed between the key store's entry and the status: the entry
		// is the request.
		doc = store.Erasure{ID: id, Subject: r.keys.Subject(author), RequestedAt: rn.at.UnixNano()}
	case err != nil:
		return err
	}
	doc.Status, doc.Error = ErasureRunning, ""
	if !slices.Contains(doc.RunIDs, rn.id) {
		doc.RunIDs = append(doc.RunIDs, rn.id)
	}
	er := &erasureRun{doc: doc, held: make(map[string]bool)}
	for _, tid := range doc.HeldThreads {
		er.held[tid] = true
	}
	if rn.erasures == nil {
		rn.erasures = make(map[string]*erasureRun)
	}
	rn.erasures[id] = er
	if err := r.st.PutErasure(ctx, er.doc); err != nil {
		return err
	}
	r.log.Info("retention_erasure_started", "run_id", rn.id, "erasure_id", id, "subject", doc.Subject)

	refs, err := r.keys.AuthorKeys(ctx, author)
	if err != nil {
		return fmt.Errorf("erasure %s: author keys: %w", id, err)
	}
	slices.SortFunc(refs, func(a, b keystore.KeyRef) int {
		if a.Thread != b.Thread {
			return strings.Compare(a.Thread, b.Thread)
		}
		return int(a.Number) - int(b.Number)
	})

	// Claims, confirmed thread by thread.
	var confirmed []store.PurgeMarker
	for _, ref := range refs {
		if err := rn.checkpoint(ctx); err != nil {
			rn.halt(err)
			return nil
		}
		if er.held[ref.Thread] {
			continue
		}
		t, err := r.st.GetThread(ctx, ref.Thread)
		switch {
		case errors.Is(err, store.ErrNotFound):
			continue // purged: its key goes below, it has nothing left
		case err != nil && !errors.Is(err, store.ErrMalformed):
			return err
		case err == nil && t.LegalHold:
			rn.holdFor(er, id, ref.Thread)
			continue
		}
		mids, err := r.st.MessagesByKey(ctx, ref.Thread, ref.Number)
		if err != nil {
			return fmt.Errorf("erasure %s: messages of thread %s: %w", id, ref.Thread, err)
		}
		for _, mid := range mids {
			if er.held[ref.Thread] {
				break // claims made before are given back at their confirmation
			}
			m, err := r.st.BeginSubjectPurge(ctx, store.PurgeMarker{Kind: store.KindMessage, ID: mid,
				ThreadID: ref.Thread, RunID: rn.id, Cause: audit.CauseSubject, ErasureID: id})
			switch {
			case errors.Is(err, store.ErrLegalHold):
				rn.holdFor(er, id, ref.Thread)
				continue
			case errors.Is(err, store.ErrNotEligible):
				continue // gone, or claimed already (recovery finishes it)
			case err != nil:
				return fmt.Errorf("erasure %s: %w", id, err)
			}
			rn.claims.taken++
			m, ok := rn.confirm(ctx, m, erasedItem(m))
			switch {
			case ok:
				confirmed = append(confirmed, m)
			case rn.stop != nil:
				return nil
			default:
				rn.holdFor(er, id, ref.Thread) // given back: a hold won
			}
		}
	}

	// Every record is owed before a key goes.
	if err := r.st.Sync(ctx); err != nil {
		return atStage(stageSync, fmt.Errorf("sync store: %w", err))
	}
	if err := rn.destroyKeys(ctx, er, author, refs); err != nil {
		return err
	}

	for _, m := range confirmed {
		if rn.stop != nil {
			break
		}
		rn.deleteItem(ctx, m, erasedItem(m))
	}
	rn.flush(ctx)
	er.finished = rn.stop == nil
	er.doc.MessagesPurged, er.doc.VersionsPurged = rn.erasedSoFar(id, er.doc)
	if err := r.st.PutErasure(ctx, er.doc); err != nil {
		return err
	}
	return nil
}

// destroyKeys destroys the author's keys in every thread not held, with
// the threads written down first so that a run killed in between counts
// the keys that went.
func (rn *run) destroyKeys(ctx context.Context, er *erasureRun, author string, refs []keystore.KeyRef) error {
	r := rn.r
	listed := make(map[string]bool, len(refs))
	for _, ref := range refs {
		listed[ref.Thread] = true
	}
	for _, tid := range er.doc.Destroying {
		if !listed[tid] {
			er.doc.KeysDestroyed++ // destroyed by the killed run
		}
	}
	er.doc.Destroying = er.doc.Destroying[:0]
	for _, ref := range refs {
		if !er.held[ref.Thread] {
			er.doc.Destroying = append(er.doc.Destroying, ref.Thread)
		}
	}
	if err := r.st.PutErasure(ctx, er.doc); err != nil {
		return err
	}
	destroyed, kept, err := r.keys.DestroyAuthor(ctx, author, func(tid string) (bool, error) {
		if er.held[tid] {
			return true, nil
		}
		// A hold set since the claims: only a thread without confirmed
		// claims can be held now.
		t, err := r.st.GetThread(ctx, tid)
		if errors.Is(err, store.ErrNotFound) || errors.Is(err, store.ErrMalformed) {
			return false, nil
		}
		return err == nil && t.LegalHold, err
	})
	if err != nil {
		return atStage(stagePurge, fmt.Errorf("erasure %s: destroy keys: %w", er.doc.ID, err))
	}
	for _, ref := range kept {
		rn.holdFor(er, er.doc.ID, ref.Thread)
	}
	er.doc.KeysDestroyed += int64(len(destroyed))
	er.doc.Destroying = nil
	r.log.Info("retention_erasure_keys_destroyed", "run_id", rn.id, "erasure_id", er.doc.ID,
		"keys_destroyed", len(destroyed), "held_threads", len(er.doc.HeldThreads))
	return r.st.PutErasure(ctx, er.doc)
}

// holdFor lists a held thread once per erasure and records it skipped.
func (rn *run) holdFor(er *erasureRun, id, tid string) {
	if er.held[tid] {
		return
	}
	er.held[tid] = true
	er.doc.HeldThreads = append(er.doc.HeldThreads, tid)
	rn.journal.scanned++
	rn.record(audit.Item{ItemType: audit.ItemThread, ItemID: tid, ThreadID: tid, Status: audit.StatusSkipped,
		Cause: audit.CauseSubject, Reason: reasonLegalHold, ErasureID: id})
}

// erasedItem is the audit record of a subject claim.
func erasedItem(m store.PurgeMarker) audit.Item {
	return audit.Item{ItemType: audit.ItemMessage, ItemID: m.ID, ThreadID: m.ThreadID, DeletedAt: unixTime(m.DeletedTS),
		Cause: audit.CauseSubject, ErasureID: m.ErasureID, Versions: m.Versions}
}

// erasedSoFar is the erasure's purged messages and versions: the runs
// before this one from their sealed files, this one's from its tally.
func (rn *run) erasedSoFar(id string, doc store.Erasure) (messages, versions int64) {
	before := slices.DeleteFunc(slices.Clone(doc.RunIDs), func(s string) bool { return s == rn.id })
	n, v, err := audit.CountErased(rn.r.cfg.AuditPath, before, id)
	if err != nil {
		rn.r.log.Warn("retention_erasure_count_failed", "run_id", rn.id, "erasure_id", id, "err", err)
	}
	c := rn.journal.erased[id]
	return n + c.messages, v + c.versions
}

// erasedCount is what a run recorded purged for one erasure.
type erasedCount struct{ messages, versions int64 }

// eraseKeyStore is the key store's erase step: the keys destroyed and the
// erasures completed are removed from its files.
func (rn *run) eraseKeyStore(ctx context.Context) error {
	if rn.r.keys == nil || rn.dry {
		return nil
	}
	res, err := rn.r.keys.Erase(ctx, erase.Options{})
	if err != nil {
		return fmt.Errorf("erase key store: %w", err)
	}
	if !res.Nothing {
		rn.r.log.Info("retention_keystore_erased", "run_id", rn.id, "full", res.Full)
	}
	return nil
}

// completeErasures runs once the run's footer is written: an erasure this
// run finished is completed (counts read back from the sealed files, its
// key-store entry deleted and erased); one it worked on and did not
// finish says so in its status.
func (rn *run) completeErasures(ctx context.Context, status, reason string) {
	r := rn.r
	ctx = context.WithoutCancel(ctx)
	for id, er := range rn.erasures {
		doc := er.doc
		switch {
		case er.finished && status == audit.RunCompleted:
			n, v, err := audit.CountErased(r.cfg.AuditPath, doc.RunIDs, id)
			if err != nil {
				r.log.Error("retention_erasure_count_failed", "run_id", rn.id, "erasure_id", id, "err", err)
				continue // the next run completes it
			}
			doc.MessagesPurged, doc.VersionsPurged = n, v
			doc.Status, doc.CompletedAt = ErasureCompleted, r.now().UTC().UnixNano()
		case status == audit.RunFailed:
			doc.Status, doc.Error = ErasureFailed, "run "+rn.id+" failed: "+reason
		default:
			continue // interrupted: running, and the next run resumes it
		}
		if err := r.st.PutErasure(ctx, doc); err != nil {
			r.log.Error("retention_erasure_status_failed", "run_id", rn.id, "erasure_id", id, "err", err)
			continue
		}
		if doc.Status != ErasureCompleted {
			continue
		}
		if err := r.keys.CompleteErasure(ctx, id); err != nil {
			r.log.Error("retention_erasure_complete_failed", "run_id", rn.id, "erasure_id", id, "err", err)
			continue
		}
		r.log.Info("retention_erasure_completed", "run_id", rn.id, "erasure_id", id, "keys_destroyed", doc.KeysDestroyed,
			"messages_purged", doc.MessagesPurged, "versions_purged", doc.VersionsPurged, "held_threads", len(doc.HeldThreads))
	}
	if len(rn.erasures) > 0 {
		// The completed erasures' authors leave the key store's files.
		if err := rn.eraseKeyStore(ctx); err != nil {
			r.metrics.countError(stageErase)
			r.log.Error("retention_keystore_erase_failed", "run_id", rn.id, "err", err)
		}
	}
}

// erasureStatus renders a stored erasure for the API.
func erasureStatus(e store.Erasure) ErasureStatus {
	st := ErasureStatus{ErasureID: e.ID, Status: e.Status, Subject: e.Subject, RequestedAt: wire.Nanos(e.RequestedAt),
		KeysDestroyed: e.KeysDestroyed, VersionsPurged: e.VersionsPurged, MessagesPurged: e.MessagesPurged,
		HeldThreads: e.HeldThreads, RunIDs: e.RunIDs, Error: e.Error}
	if e.CompletedAt > 0 {
		st.CompletedAt = wire.Nanos(e.CompletedAt)
	}
	if st.HeldThreads == nil {
		st.HeldThreads = []string{}
	}
	if st.RunIDs == nil {
		st.RunIDs = []string{}
	}
	return st
}

var _ Erasures = (*Manager)(nil)

// errSealingOff: the runner has no key store. The API answers 409
// sealing_disabled before it asks (it is given no Erasures then).
var errSealingOff = errors.New("subject erasure needs sealing: PROGRESSDB_KEK is not set")

// Request records an erasure of author and starts its run (trigger
// erasure) at once, under the lease; it answers once the run holds the
// lease. A run going, a lease held elsewhere, or a pause refuses it, and
// nothing is recorded.
func (m *Manager) Request(ctx context.Context, author string) (ErasureAccepted, error) {
	if m.runner.keys == nil {
		return ErasureAccepted{}, errSealingOff
	}
	id := NewErasureID()
	runID, err := m.record(ctx, id, author, m.runner.now().UTC(), false)
	if err != nil {
		return ErasureAccepted{}, err
	}
	return ErasureAccepted{ErasureID: id, RunID: runID}, nil
}

// NewErasureID is a new erasure's ID: 16 hex digits, on one node or a
// cluster alike.
func NewErasureID() string { return randomHex(8) }

var _ ShardEraser = (*Manager)(nil)

// Adopt implements ShardEraser: a shard's part of a cluster's erasure
// runs as Request's does, under the cluster's erasure ID. While a run of
// this database goes it only answers the status (the worker asks again:
// a run going may have begun before the erasure was recorded).
func (m *Manager) Adopt(ctx context.Context, id, author string, requestedAt time.Time) (ErasureStatus, error) {
	r := m.runner
	if r.keys == nil {
		return ErasureStatus{}, errSealingOff
	}
	doc, err := r.st.GetErasure(ctx, id)
	switch {
	case err == nil && doc.Status == ErasureCompleted:
		return erasureStatus(doc), nil
	case err != nil && !errors.Is(err, store.ErrNotFound):
		return ErasureStatus{}, err
	case len(r.slot) > 0:
		// A run goes: this erasure's, or one that began before it; asked
		// again, it is started once that run ends.
		if err != nil {
			return ErasureStatus{ErasureID: id, Status: ErasurePending}, nil
		}
		return erasureStatus(doc), nil
	}
	if _, err := m.record(ctx, id, author, requestedAt, true); err != nil {
		return ErasureStatus{}, err
	}
	return m.Erasure(ctx, id)
}

// RunEnded implements ShardEraser.
func (m *Manager) RunEnded() <-chan struct{} { return m.runner.RunEnded() }

// record starts a run with trigger erasure and, under its lease, records
// erasure id of author: the key store's entry (the request: a run
// finishes every one it finds) and the status, each unless there already
// (adopt) or completed meanwhile. It returns the run's ID.
func (m *Manager) record(ctx context.Context, id, author string, requestedAt time.Time, adopt bool) (string, error) {
	r := m.runner
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return "", ErrClosed
	}
	rn, _, err := r.begin(ctx, RunRequest{Trigger: TriggerErasure})
	if err != nil {
		return "", err
	}
	if r.fenced {
		ctx = store.WithEpoch(ctx, rn.lease.info().Epoch)
	}
	doc, err := r.st.GetErasure(ctx, id)
	known := err == nil
	switch {
	case err != nil && !errors.Is(err, store.ErrNotFound):
		rn.release()
		return "", err
	case known && (!adopt || doc.Status == ErasureCompleted):
		rn.release()
		if !adopt {
			return "", fmt.Errorf("record erasure %s: the ID is taken", id)
		}
		return rn.id, nil // completed by the run that just ended
	}
	_, err = r.keys.ErasureAuthor(ctx, id)
	switch {
	case errors.Is(err, keystore.ErrNoErasure):
		err = r.keys.PutErasure(ctx, id, author)
	case err != nil:
	}
	if err != nil {
		rn.release()
		return "", fmt.Errorf("record erasure: %w", err)
	}
	if !known {
		doc = store.Erasure{ID: id, Status: ErasurePending, Subject: r.keys.Subject(author), RequestedAt: requestedAt.UnixNano()}
		if !adopt {
			// A request with an Idempotency-Key keeps its answer in this
			// commit: sent again, it answers the same and erases nothing more.
			_ = store.SetAnswer(ctx, ErasureAccepted{ErasureID: id, RunID: rn.id})
		}
		if err := r.st.PutErasure(ctx, doc); err != nil {
			err = fmt.Errorf("record erasure: %w", err)
			if cerr := r.keys.CompleteErasure(context.WithoutCancel(ctx), id); cerr != nil {
				err = errors.Join(err, cerr) // the next run performs it
			}
			rn.release()
			return "", err
		}
	}
	r.log.Info("retention_erasure_requested", "erasure_id", id, "run_id", rn.id, "subject", doc.Subject, "adopted", adopt)
	m.background(rn, TriggerErasure) // its failure shows in the erasure's status too
	return rn.id, nil
}

// Erasure reads an erasure's status (store.ErrNotFound when unknown).
func (m *Manager) Erasure(ctx context.Context, id string) (ErasureStatus, error) {
	e, err := m.runner.st.GetErasure(ctx, id)
	if err != nil {
		return ErasureStatus{}, err
	}
	return erasureStatus(e), nil
}

// Receipt builds a completed erasure's receipt from its status and the
// audit files of its runs.
func (m *Manager) Receipt(ctx context.Context, id string) (audit.Receipt, error) {
	r := m.runner
	e, err := r.st.GetErasure(ctx, id)
	if err != nil {
		return audit.Receipt{}, err
	}
	if e.Status != ErasureCompleted {
		return audit.Receipt{}, fmt.Errorf("erasure %s is %s: %w", id, e.Status, ErrErasureIncomplete)
	}
	if r.auditOpts.SigningKey == nil {
		return audit.Receipt{}, fmt.Errorf("erasure %s: this server has no PROGRESSDB_AUDIT_SIGNING_KEY, so no receipt of it could be verified; "+
			"set it to an ed25519 private key (PEM) and restart: %w", id, ErrReceiptUnsigned)
	}
	dbID, err := r.st.DatabaseID(ctx, false)
	if err != nil {
		return audit.Receipt{}, err
	}
	rc := audit.Receipt{Format: audit.ReceiptFormat, ErasureID: id, RequestedAt: unixTime(e.RequestedAt),
		CompletedAt: unixTime(e.CompletedAt), Subject: e.Subject, DatabaseID: dbID,
		Items: []audit.ReceiptItem{}, HeldThreads: e.HeldThreads, Audit: []audit.ReceiptFile{}}
	if rc.HeldThreads == nil {
		rc.HeldThreads = []string{}
	}
	if err := audit.AddReceiptFiles(&rc, r.cfg.AuditPath, e.RunIDs); err != nil {
		return audit.Receipt{}, fmt.Errorf("erasure %s: receipt: %w", id, err)
	}
	for _, f := range rc.Audit {
		if f.Signature == "" {
			return audit.Receipt{}, fmt.Errorf("erasure %s: its audit file %s was written without PROGRESSDB_AUDIT_SIGNING_KEY, "+
				"so its footer is unsigned and no receipt of it could be verified: %w", id, f.File, ErrReceiptUnsigned)
		}
	}
	return rc, nil
}
