package store

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"

	"github.com/cockroachdb/pebble/v2"
)

// nullBody is the body of tombstones and of messages sent without one.
var nullBody = json.RawMessage("null")

func validateIDs(ids ...string) error {
	for _, id := range ids {
		if err := ValidateID(id); err != nil {
			return err
		}
	}
	return nil
}

// readMessage returns mid's newest version, with its creation time, which
// must belong to tid: a message reached through another thread's route
// does not exist there.
func (s *Store) readMessage(tid, mid string) (Message, error) {
	r, err := newVersionReader(s.db)
	if err != nil {
		return Message{}, err
	}
	defer r.close()
	m, err := r.latestMessage(mid)
	if err != nil {
		return Message{}, err
	}
	if m.Thread != tid {
		return Message{}, fmt.Errorf("message %s in thread %s: %w", mid, tid, ErrNotFound)
	}
	if m.CreatedTS, err = r.created(mid); err != nil {
		return Message{}, err
	}
	return m, nil
}

// liveThread returns the thread if it exists and is not deleted; a deleted
// thread takes no new messages or edits.
func (s *Store) liveThread(tid string) (Thread, error) {
	t, err := s.readThread(tid)
	if err != nil {
		return Thread{}, err
	}
	if t.Deleted {
		return Thread{}, fmt.Errorf("thread %s is deleted: %w", tid, ErrNotFound)
	}
	return t, nil
}

// putVersion writes m in the shape it has (a stamp rewrites a
// version in place: its seal, bound to the version, stays valid).
// The key and the value are built in one buffer, which the batch copies.
func putVersion(b *pebble.Batch, m Message) {
	kv := make([]byte, 0, len(versionNS)+padWidth+256+2*len(m.ID)+len(m.Thread)+len(m.Author)+len(m.Body)+len(m.Sealed))
	kv = appendVersionKey(kv, m.ID, m.Version)
	k := len(kv)
	kv = appendMessageJSON(kv, m)
	_ = b.Set(kv[:k], kv[k:], nil)
}

// writeVersion writes a new version of m: sealed under the key that sealed
// the message before (m.Key) or its author's key when the store seals,
// plain when it does not. Version 1 of a sealed message gets its entry
// in the key-number index (MessagesByKey).
func (s *Store) writeVersion(ctx context.Context, b *pebble.Batch, m *Message) error {
	m.Sealed = ""
	if s.sealer == nil {
		if err := s.refusePlain(); err != nil {
			return err
		}
		m.Key = 0
		putVersion(b, *m)
		return nil
	}
	if err := s.sealMessage(ctx, m); err != nil {
		return err
	}
	putVersion(b, *m)
	if m.Version == 1 {
		_ = b.Set(keyIndexKey(m.Thread, m.Key, m.ID), nil, nil)
	}
	return nil
}

// openForChange opens m for a change that writes a new version from it;
// ErrUnreadable when its key is gone.
func (s *Store) openForChange(ctx context.Context, m *Message) error {
	if err := s.openMessage(ctx, m); err != nil {
		return err
	}
	if m.Unreadable {
		return fmt.Errorf("message %s: %w", m.ID, ErrUnreadable)
	}
	return nil
}

// AppendMessage adds a message (version 1) to a live thread. m.ID may be
// empty. ErrNotFound for an absent or deleted thread; ErrIDUnavailable
// when the message ID is already used anywhere, or
// was used by a message whose purge is still being recorded.
func (s *Store) AppendMessage(ctx context.Context, tid string, m Message) (Message, error) {
	if err := ctx.Err(); err != nil {
		return Message{}, err
	}
	// An ID this store generates is new by construction (increasing within
	// the process, 80 random bits across processes): it needs no probe.
	generated := m.ID == ""
	if generated {
		m.ID = s.NewID()
	}
	if err := validateIDs(tid, m.ID); err != nil {
		return Message{}, err
	}
	body, err := compactBody(m.Body)
	if err != nil {
		return Message{}, err
	}
	// Message IDs are global: the message's own stripe keeps two threads
	// from claiming one ID at the same time.
	h := s.holdPair(tid, m.ID)
	defer h.release()

	// A thread an earlier append found live, with no other commit since,
	// is live still: its record is not read again (liveMemo).
	if known, epoch := s.threads.known(tid); !known {
		if _, err := s.liveThread(tid); err != nil {
			return Message{}, err
		}
		s.threads.remember(tid, epoch)
	}
	if !generated {
		if err := s.messageIDFree(m.ID); err != nil {
			// The same append sent again (a retry whose first answer was
			// lost) answers as the first did.
			if first, same := s.sameFirstVersion(ctx, tid, m.ID, m.Author, body); same {
				return first, nil
			}
			return Message{}, err
		}
	}

	now := s.now().UnixNano()
	msg := Message{ID: m.ID, Thread: tid, Author: m.Author, Body: body, TS: now, Version: 1, CreatedTS: now}
	b := s.db.NewBatch()
	if err := s.writeVersion(ctx, b, &msg); err != nil {
		_ = b.Close()
		return Message{}, fmt.Errorf("append message %s: %w", msg.ID, err)
	}
	// The log key and its value are built in one buffer, which the batch copies.
	kv := appendLogKey(make([]byte, 0, len(threadNS)+len(tid)+len(logSuffix)+padWidth+3+2*len(msg.ID)), tid, now, msg.ID)
	k := len(kv)
	kv = append(kv, msg.ID...)
	_ = b.Set(kv[:k], kv[k:], nil)
	if err := s.addLive(b, tid, msg.ID, now, +1); err != nil {
		_ = b.Close()
		return Message{}, fmt.Errorf("append message %s: %w", msg.ID, err)
	}
	if err := s.apply(ctx, write{kind: writeAppend, batch: b, held: h, answer: answer{tid: tid, mid: msg.ID, version: 1}}); err != nil {
		return Message{}, fmt.Errorf("append message %s: %w", msg.ID, err)
	}
	return msg, nil
}

// sameFirstVersion returns mid's first version when it is in thread tid
// and has this author and body: the append that made it, sent again. A
// version it cannot open (its key is gone) is never the same.
func (s *Store) sameFirstVersion(ctx context.Context, tid, mid, author string, body json.RawMessage) (Message, bool) {
	v, err := s.get(versionKey(mid, 1))
	if err != nil {
		return Message{}, false
	}
	m, err := decodeMessage(mid, 1, v)
	if err != nil || m.Thread != tid || s.openMessage(ctx, &m) != nil || m.Unreadable {
		return Message{}, false
	}
	if m.Author != author || !bytes.Equal(m.Body, body) {
		return Message{}, false
	}
	m.CreatedTS = m.TS
	return m, true
}

// messageIDFree answers ErrIDUnavailable when mid has a version (in any
// thread) or a pending purge marker. The error is the same in every case
// and names no thread: message IDs are global, and a client must not learn
// from a refusal where an ID it does not own is used.
func (s *Store) messageIDFree(mid string) error {
	used, err := s.hasRange(versionPrefix(mid), versionEnd(mid))
	if err != nil {
		return err
	}
	if !used {
		// A purged message's ID stays taken until its audit record is out.
		if used, err = s.purgeStarted(KindMessage, mid); err != nil {
			return err
		}
	}
	if used {
		return fmt.Errorf("message id %s: %w", mid, ErrIDUnavailable)
	}
	return nil
}

// GetMessage returns the latest version (a tombstone included).
func (s *Store) GetMessage(ctx context.Context, tid, mid string) (Message, error) {
	if err := ctx.Err(); err != nil {
		return Message{}, err
	}
	if err := validateIDs(tid, mid); err != nil {
		return Message{}, err
	}
	m, err := s.readMessage(tid, mid)
	if err != nil {
		return m, err
	}
	return m, s.openMessage(ctx, &m)
}

// EditMessage appends a new version with body; ErrNotFound if the message or
// its thread is deleted.
func (s *Store) EditMessage(ctx context.Context, tid, mid string, body json.RawMessage) (Message, error) {
	if err := ctx.Err(); err != nil {
		return Message{}, err
	}
	if err := validateIDs(tid, mid); err != nil {
		return Message{}, err
	}
	body, err := compactBody(body)
	if err != nil {
		return Message{}, err
	}
	h := s.hold(tid)
	defer h.release()

	if _, err := s.liveThread(tid); err != nil {
		return Message{}, err
	}
	m, err := s.changeableMessage(ctx, tid, mid, "edit")
	if err != nil {
		return Message{}, err
	}
	m.Body, m.TS = body, s.now().UnixNano()
	m.Version++
	b := s.db.NewBatch()
	if err := s.writeVersion(ctx, b, &m); err != nil {
		_ = b.Close()
		return Message{}, fmt.Errorf("edit message %s: %w", mid, err)
	}
	if err := s.apply(ctx, write{kind: writeUser, batch: b, held: h}); err != nil {
		return Message{}, fmt.Errorf("edit message %s: %w", mid, err)
	}
	return m, nil
}

// changeableMessage returns message mid (opened) when it is live and no
// policy purge has claimed it (a claimed message takes no new versions
// or attachments); verb names the change in the errors.
func (s *Store) changeableMessage(ctx context.Context, tid, mid, verb string) (Message, error) {
	m, err := s.readMessage(tid, mid)
	if err != nil {
		return Message{}, err
	}
	if m.Deleted {
		return Message{}, fmt.Errorf("message %s is deleted: %w", mid, ErrNotFound)
	}
	if err := s.refuseClaimed(mid, verb); err != nil {
		return Message{}, err
	}
	if err := s.openForChange(ctx, &m); err != nil {
		return Message{}, fmt.Errorf("%s message %s: %w", verb, mid, err)
	}
	return m, nil
}

// DeleteMessage appends a tombstone version; repeated delete keeps the first.
// The tombstone and the deletion index entry are one batch. The tombstone
// carries no body; a restore brings back the last live one.
func (s *Store) DeleteMessage(ctx context.Context, tid, mid string) (Message, error) {
	if err := ctx.Err(); err != nil {
		return Message{}, err
	}
	if err := validateIDs(tid, mid); err != nil {
		return Message{}, err
	}
	h := s.hold(tid)
	defer h.release()

	m, err := s.readMessage(tid, mid)
	if err != nil {
		return m, err
	}
	if m.Deleted {
		return m, s.openMessage(ctx, &m)
	}
	// A thread being purged takes no new versions: the purge would miss them.
	if started, err := s.purgeStarted(KindThread, tid); err != nil {
		return Message{}, err
	} else if started {
		return Message{}, fmt.Errorf("delete message %s: %w", mid, ErrPurgeInProgress)
	}
	if err := s.refuseClaimed(mid, "delete"); err != nil {
		return Message{}, err
	}
	// The tombstone keeps the message's author, sealed like the rest.
	if err := s.openForChange(ctx, &m); err != nil {
		return Message{}, fmt.Errorf("delete message %s: %w", mid, err)
	}
	now := s.now().UnixNano()
	m.Body, m.TS, m.Deleted, m.DeletedTS = nullBody, now, true, now
	m.Version++
	b := s.db.NewBatch()
	if err := s.writeVersion(ctx, b, &m); err != nil {
		_ = b.Close()
		return Message{}, fmt.Errorf("delete message %s: %w", mid, err)
	}
	_ = b.Set(deletionKey(KindMessage, indexTS(now), mid), []byte(tid), nil)
	if err := s.liveChange(b, tid, mid, -1); err != nil {
		_ = b.Close()
		return Message{}, fmt.Errorf("delete message %s: %w", mid, err)
	}
	if err := s.apply(ctx, write{kind: writeUser, batch: b, held: h}); err != nil {
		return Message{}, fmt.Errorf("delete message %s: %w", mid, err)
	}
	return m, nil
}

// RestoreMessage appends a live version carrying the last live body;
// ErrPurgeInProgress once the message's (or its thread's) purge began. The
// version and the removal of the index entry are one batch.
func (s *Store) RestoreMessage(ctx context.Context, tid, mid string) (Message, error) {
	if err := ctx.Err(); err != nil {
		return Message{}, err
	}
	if err := validateIDs(tid, mid); err != nil {
		return Message{}, err
	}
	h := s.hold(tid)
	defer h.release()

	for _, p := range []struct {
		kind ItemKind
		id   string
	}{{KindMessage, mid}, {KindThread, tid}} {
		if started, err := s.purgeStarted(p.kind, p.id); err != nil {
			return Message{}, err
		} else if started {
			return Message{}, fmt.Errorf("restore message %s: %w", mid, ErrPurgeInProgress)
		}
	}

	r, err := newVersionReader(s.db)
	if err != nil {
		return Message{}, err
	}
	defer r.close()
	tomb, err := r.latestMessage(mid)
	if err != nil {
		return Message{}, err
	}
	if tomb.Thread != tid {
		return Message{}, fmt.Errorf("message %s in thread %s: %w", mid, tid, ErrNotFound)
	}
	if tomb.CreatedTS, err = r.created(mid); err != nil {
		return Message{}, err
	}
	if !tomb.Deleted {
		return tomb, s.openMessage(ctx, &tomb)
	}
	live, ok, err := r.lastLive(mid)
	if err != nil {
		return Message{}, err
	}
	m := tomb
	if err := s.openForChange(ctx, &m); err != nil {
		return Message{}, fmt.Errorf("restore message %s: %w", mid, err)
	}
	m.Body = nullBody
	if ok {
		if err := s.openForChange(ctx, &live); err != nil {
			return Message{}, fmt.Errorf("restore message %s: %w", mid, err)
		}
		m.Body, m.Author = live.Body, live.Author
	}
	m.TS, m.Deleted, m.DeletedTS = s.now().UnixNano(), false, 0
	m.Version = tomb.Version + 1

	b := s.db.NewBatch()
	if err := s.writeVersion(ctx, b, &m); err != nil {
		_ = b.Close()
		return Message{}, fmt.Errorf("restore message %s: %w", mid, err)
	}
	_ = b.Delete(deletionKey(KindMessage, indexTS(tomb.DeletedTS), mid), nil)
	if err := s.liveChange(b, tid, mid, +1); err != nil {
		_ = b.Close()
		return Message{}, fmt.Errorf("restore message %s: %w", mid, err)
	}
	if err := s.apply(ctx, write{kind: writeUser, batch: b, held: h, answer: answer{tid: tid, mid: mid, version: m.Version}}); err != nil {
		return Message{}, fmt.Errorf("restore message %s: %w", mid, err)
	}
	return m, nil
}

// ListMessages lists the latest version of each message in thread order
// (creation time, then ID). The cursor holds the last log position returned.
// Messages whose latest version cannot be read are left out.
func (s *Store) ListMessages(ctx context.Context, tid string, o ListOptions) ([]Message, string, error) {
	if err := ValidateID(tid); err != nil {
		return nil, "", err
	}
	limit, err := o.limit()
	if err != nil {
		return nil, "", err
	}
	var after []byte
	if o.Cursor != "" {
		if after, err = messageCursorSuffix(tid, o.Cursor); err != nil {
			return nil, "", err
		}
	}

	// One snapshot for the log and the versions: a consistent page.
	snap := s.db.NewSnapshot()
	defer snap.Close()
	if found, err := hasKey(snap, threadMetaKey(tid)); err != nil {
		return nil, "", err
	} else if !found {
		return nil, "", fmt.Errorf("thread %s: %w", tid, ErrNotFound)
	}

	prefix := logPrefix(tid)
	logIt, err := snap.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: upperBound(prefix)})
	if err != nil {
		return nil, "", fmt.Errorf("list messages of %s: %w", tid, err)
	}
	defer logIt.Close()
	r, err := newVersionReader(snap)
	if err != nil {
		return nil, "", err
	}
	defer r.close()

	var pos bool
	if after == nil {
		pos = logIt.First()
	} else {
		// Just past the cursor's key.
		pos = logIt.SeekGE(append(append(prefix, after...), 0))
	}
	var (
		out  []Message
		last []byte
	)
	for n := 0; pos; pos, n = logIt.Next(), n+1 {
		if n%256 == 0 {
			if err := ctx.Err(); err != nil {
				return nil, "", err
			}
		}
		suffix := logIt.Key()[len(prefix):]
		created, mid, ok := parseLogSuffix(suffix)
		if !ok {
			continue
		}
		m, err := r.latestMessage(mid)
		if err != nil || m.Thread != tid || (m.Deleted && !o.IncludeDeleted) {
			continue
		}
		// The log entry is keyed by the first version's ts.
		m.CreatedTS = created
		if len(out) == limit {
			return out, messageCursor(tid, last), nil
		}
		if err := s.openMessage(ctx, &m); err != nil {
			return nil, "", err
		}
		out = append(out, m)
		last = append(last[:0], suffix...)
	}
	if err := logIt.Error(); err != nil {
		return nil, "", fmt.Errorf("list messages of %s: %w", tid, err)
	}
	return out, "", nil
}

// ListVersions returns every version of mid, oldest first. ErrNotFound when
// it has none or belongs to another thread. It holds them all in memory:
// the API pages through ScanVersions instead.
func (s *Store) ListVersions(ctx context.Context, tid, mid string) ([]Message, error) {
	var out []Message
	_, err := s.ScanVersions(ctx, tid, mid, ListOptions{Limit: math.MaxInt}, func(m Message) error {
		out = append(out, m)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// ScanVersions calls fn with the versions of mid, oldest first, one at a
// time, so a caller can stream them: at most o.Limit (default 100, at most
// 1000, unlimited for in-process callers passing math.MaxInt), after the
// version o.Cursor holds. It returns the cursor of the next page, "" when
// there is none. ErrNotFound when mid has no version at all or belongs to
// another thread; that is known before fn is first called.
func (s *Store) ScanVersions(ctx context.Context, tid, mid string, o ListOptions, fn func(Message) error) (string, error) {
	if err := ctx.Err(); err != nil {
		return "", err
	}
	if err := validateIDs(tid, mid); err != nil {
		return "", err
	}
	limit := o.Limit
	if limit != math.MaxInt {
		var err error
		if limit, err = o.limit(); err != nil {
			return "", err
		}
	}
	var after int64 = -1
	if o.Cursor != "" {
		v, err := versionCursorNumber(tid, mid, o.Cursor)
		if err != nil {
			return "", err
		}
		after = v
	}
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: versionPrefix(mid), UpperBound: versionEnd(mid)})
	if err != nil {
		return "", fmt.Errorf("list versions of %s: %w", mid, err)
	}
	defer it.Close()

	// The first version names the thread: a message of another thread is
	// not found, whatever page is asked for.
	if !it.First() {
		if err := it.Error(); err != nil {
			return "", fmt.Errorf("list versions of %s: %w", mid, err)
		}
		return "", fmt.Errorf("message %s: %w", mid, ErrNotFound)
	}
	first, err := s.versionAt(it, mid)
	if err != nil {
		return "", err
	}
	if first.Thread != tid {
		return "", fmt.Errorf("message %s in thread %s: %w", mid, tid, ErrNotFound)
	}
	valid := true
	if after >= 0 {
		valid = it.SeekGE(versionKey(mid, after+1))
	}
	n, last := 0, int64(0)
	for ; valid; valid = it.Next() {
		if n == limit {
			// Another version follows the full page: the cursor is the
			// last version returned.
			return versionCursor(tid, mid, last), nil
		}
		if n%ctxCheckEvery == 0 {
			if err := ctx.Err(); err != nil {
				return "", err
			}
		}
		m, err := s.versionAt(it, mid)
		if err != nil {
			return "", err
		}
		m.CreatedTS = first.TS
		if err := s.openMessage(ctx, &m); err != nil {
			return "", err
		}
		if err := fn(m); err != nil {
			return "", err
		}
		n, last = n+1, m.Version
	}
	if err := it.Error(); err != nil {
		return "", fmt.Errorf("list versions of %s: %w", mid, err)
	}
	return "", nil
}

// versionAt decodes the version at the iterator.
func (s *Store) versionAt(it *pebble.Iterator, mid string) (Message, error) {
	value, err := it.ValueAndErr()
	if err != nil {
		return Message{}, fmt.Errorf("list versions of %s: %w", mid, err)
	}
	_, version, _ := parseVersionKey(it.Key())
	return decodeMessage(mid, version, value)
}

// refuseClaimed answers ErrPurgeInProgress once a purge has claimed mid.
func (s *Store) refuseClaimed(mid, op string) error {
	started, err := s.purgeStarted(KindMessage, mid)
	if err != nil {
		return err
	}
	if started {
		return fmt.Errorf("%s message %s: %w", op, mid, ErrPurgeInProgress)
	}
	return nil
}
