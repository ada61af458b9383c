package faults

import (
	"context"
	"encoding/json"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/progressdb/progressdb/server/pkg/store"
)

// Retention settings every scenario uses unless it needs a short period:
// "old" deletions lie 40 days back (due), "recent" ones one day back (not due).
const (
	period     = "30d"
	oldAge     = 40 * 24 * time.Hour
	recentAge  = 24 * time.Hour
	futureSkew = time.Hour // beyond the 5 minutes of clock skew a run tolerates
)

// fixtureSpec sizes a seeded database. Every thread holds Messages messages
// of Versions versions each.
type fixtureSpec struct {
	EligibleThreads int // soft-deleted long ago: purged with all their messages
	LiveThreads     int // each with the deleted messages below
	HeldThreads     int // soft-deleted long ago, on legal hold: kept with their messages
	RecentThreads   int // soft-deleted recently: not yet due
	Messages        int
	Versions        int

	OldDeletedMessages    int // per live thread: soft-deleted long ago, purged on their own
	RecentDeletedMessages int // per live thread: soft-deleted recently, kept

	// Records retention must handle without deleting them by mistake.
	Malformed int // threads, and messages in live threads, whose stored record does not decode: kept
	Legacy    int // threads, and messages in live threads, deleted without deleted_ts: stamped, purged a period later
	Future    int // threads, and messages in live threads, with deleted_ts an hour ahead: kept
}

// itemRef names a thread or a message.
type itemRef struct {
	kind store.ItemKind
	id   string
}

func (r itemRef) String() string { return string(r.kind) + " " + r.id }

func threadRef(id string) itemRef  { return itemRef{store.KindThread, id} }
func messageRef(id string) itemRef { return itemRef{store.KindMessage, id} }

// fixture is what was seeded: which items must go and how retention must
// treat the others.
type fixture struct {
	threadOf map[string]string // every message ID → its thread ID

	// due are the items retention must purge and record as purged:
	// eligible threads, and due messages of threads that stay.
	due map[itemRef]bool
	// Items that must stay but leave a record on their way.
	malformed map[itemRef]bool // recorded as skipped
	legacy    map[itemRef]bool // recorded as stamped, then due a period later
	future    map[itemRef]bool // recorded as skipped (clock skew)
	held      map[string]bool  // threads on legal hold
}

func newFixture() *fixture {
	return &fixture{
		threadOf:  map[string]string{},
		due:       map[itemRef]bool{},
		malformed: map[itemRef]bool{},
		legacy:    map[itemRef]bool{},
		future:    map[itemRef]bool{},
		held:      map[string]bool{},
	}
}

// mustGo reports whether ref must be gone after a completed run: it is due
// (legacy items become due once stamped), or it is a message of a thread
// that is.
func (fx *fixture) mustGo(ref itemRef) bool {
	if fx.due[ref] || fx.legacy[ref] {
		return true
	}
	if ref.kind == store.KindMessage {
		if tid, ok := fx.threadOf[ref.id]; ok {
			return fx.mustGo(threadRef(tid))
		}
	}
	return false
}

// owner names the item a key of the user namespaces belongs to (spec §2):
// version:msg:<mid>:… is message mid's; a key under thread:<tid>: whose last
// segment is one of the thread's message IDs (its log entry) is that
// message's; every other key under thread:<tid>: is the thread's. IDs
// cannot contain ':', so segments are unambiguous.
func (fx *fixture) owner(key string) (itemRef, bool) {
	if rest, ok := strings.CutPrefix(key, versionNS); ok {
		mid, _, ok := strings.Cut(rest, ":")
		return messageRef(mid), ok
	}
	if rest, ok := strings.CutPrefix(key, threadNS); ok {
		tid, tail, ok := strings.Cut(rest, ":")
		if !ok {
			return itemRef{}, false
		}
		last := tail[strings.LastIndexByte(tail, ':')+1:]
		if fx.threadOf[last] == tid {
			return messageRef(last), true
		}
		return threadRef(tid), true
	}
	return itemRef{}, false
}

// The user namespaces of spec §2; everything else is the server's own state.
const (
	threadNS  = "thread:"
	versionNS = "version:msg:"
)

// seeder builds a fixture into an open store.
type seeder struct {
	t    testing.TB
	rng  *rand.Rand
	now  time.Time
	st   *store.Store
	bulk *store.Bulk
	fx   *fixture
	ids  map[string]bool
}

// seedFixture creates the database at dbPath, fills it as spec says and
// closes it. IDs, titles and bodies come from rng, so a seed reproduces the
// fixture. IDs use the whole alphabet ('.', '_', '-') and some threads and
// messages that stay have IDs that extend the ID of one that goes ("t1" and
// "t1.x"), so a prefix that covered too much would show.
func seedFixture(t testing.TB, dbPath string, spec fixtureSpec, rng *rand.Rand) *fixture {
	t.Helper()
	st := openStore(t, dbPath)
	s := &seeder{t: t, rng: rng, now: time.Now(), st: st, bulk: st.NewBulk(), fx: newFixture(), ids: map[string]bool{}}

	old := func() int64 { return s.now.Add(-oldAge - time.Duration(rng.IntN(240))*time.Hour).UnixNano() }
	recent := s.now.Add(-recentAge).UnixNano()
	ahead := s.now.Add(futureSkew).UnixNano()

	for range spec.EligibleThreads {
		tid := s.thread(s.id("t"), old(), false, spec.Messages, spec.Versions)
		s.fx.due[threadRef(tid)] = true
		// Half of them also have a deleted message, which goes with the thread.
		if rng.IntN(2) == 0 {
			s.message(tid, s.id("m"), spec.Versions, old())
		}
		// A live neighbour whose ID extends this one's.
		if rng.IntN(4) == 0 {
			s.liveThread(s.neighbour(tid), spec)
		}
	}
	for range spec.LiveThreads {
		s.liveThread(s.id("t"), spec)
	}
	for range spec.HeldThreads {
		tid := s.thread(s.id("h"), old(), true, spec.Messages, spec.Versions)
		s.message(tid, s.id("m"), spec.Versions, old()) // a hold covers the thread's messages
		s.fx.held[tid] = true
	}
	for range spec.RecentThreads {
		s.thread(s.id("r"), recent, false, spec.Messages, spec.Versions)
	}
	for range spec.Future {
		s.fx.future[threadRef(s.thread(s.id("f"), ahead, false, 2, 1))] = true
		tid := s.liveThread(s.id("t"), fixtureSpec{Messages: 1, Versions: 1})
		s.fx.future[messageRef(s.message(tid, s.id("m"), 1, ahead))] = true
	}
	for range spec.Legacy {
		s.fx.legacy[threadRef(s.thread(s.id("l"), 0, false, 2, 2))] = true
		tid := s.liveThread(s.id("t"), fixtureSpec{Messages: 1, Versions: 1})
		s.fx.legacy[messageRef(s.message(tid, s.id("m"), 2, 0))] = true
	}
	var broken []itemRef
	for range spec.Malformed {
		tid := s.thread(s.id("x"), old(), false, 2, 1)
		s.message(tid, s.id("m"), 1, old()) // its thread's record is what is broken
		live := s.liveThread(s.id("t"), fixtureSpec{Messages: 1, Versions: 1})
		broken = append(broken, threadRef(tid), messageRef(s.message(live, s.id("m"), 2, old())))
	}
	if err := s.bulk.Close(); err != nil {
		t.Fatalf("seed: close bulk: %v", err)
	}
	if len(broken) > 0 {
		// Half the records break before the deletion index is rebuilt (a
		// legacy database: they are indexed at time 0), half after (they keep
		// the entry of the record they were).
		s.corrupt(broken[:len(broken)/2])
		if _, err := st.RebuildDeletionIndex(context.Background()); err != nil {
			t.Fatalf("seed: rebuild deletion index: %v", err)
		}
		s.corrupt(broken[len(broken)/2:])
	}
	if err := st.Close(); err != nil {
		t.Fatalf("seed: close store: %v", err)
	}
	return s.fx
}

// liveThread seeds a thread that stays, with the deleted messages spec asks for.
func (s *seeder) liveThread(tid string, spec fixtureSpec) string {
	s.thread(tid, -1, false, spec.Messages, spec.Versions)
	for range spec.OldDeletedMessages {
		mid := s.message(tid, s.id("m"), spec.Versions, s.now.Add(-oldAge).UnixNano())
		s.fx.due[messageRef(mid)] = true
		if s.rng.IntN(4) == 0 {
			s.message(tid, s.neighbour(mid), spec.Versions, -1)
		}
	}
	for range spec.RecentDeletedMessages {
		s.message(tid, s.id("m"), spec.Versions, s.now.Add(-recentAge).UnixNano())
	}
	return tid
}

// thread seeds a thread with messages live messages. deletedTS < 0 leaves
// it live; 0 deletes it without a deletion time (legacy data).
func (s *seeder) thread(tid string, deletedTS int64, hold bool, messages, versions int) string {
	created := s.now.Add(-oldAge * 2).UnixNano()
	th := store.Thread{
		ID:        tid,
		Title:     s.text("title"),
		Author:    s.text("author"),
		CreatedTS: created,
		UpdatedTS: created,
		LegalHold: hold,
	}
	if deletedTS >= 0 {
		th.Deleted, th.DeletedTS = true, deletedTS
	}
	if err := s.bulk.PutThread(th); err != nil {
		s.t.Fatalf("seed: put thread %s: %v", tid, err)
	}
	for range messages {
		s.message(tid, s.id("m"), versions, -1)
	}
	return tid
}

// message seeds a message of versions live versions, followed by a
// tombstone when deletedTS >= 0 (0: no deletion time, legacy data).
func (s *seeder) message(tid, mid string, versions int, deletedTS int64) string {
	s.fx.threadOf[mid] = tid
	ts := s.now.Add(-oldAge*2 + time.Duration(s.rng.IntN(1_000_000))*time.Millisecond).UnixNano()
	var vs []store.Message
	for v := 1; v <= versions; v++ {
		body, _ := json.Marshal(map[string]string{"text": s.text("body")})
		vs = append(vs, store.Message{ID: mid, Thread: tid, Author: s.text("author"), Body: body,
			TS: ts + int64(v), Version: int64(v)})
	}
	if deletedTS >= 0 {
		last := vs[len(vs)-1]
		last.Version++
		last.TS++
		last.Deleted, last.DeletedTS = true, deletedTS
		vs = append(vs, last)
	}
	if err := s.bulk.PutMessage(vs); err != nil {
		s.t.Fatalf("seed: put message %s: %v", mid, err)
	}
	return mid
}

// garbage are stored records that cannot be decoded.
var garbage = [][]byte{
	[]byte("{"),
	[]byte(""),
	{0x00, 0xff, 0xfe, 0x01},
	[]byte(`{"deleted":"yes"}`),
	[]byte(`[]`),
	[]byte(`{"id":7,"deleted":true}`),
	[]byte(`"thread"`),
}

// corrupt overwrites the record of each item: a thread's metadata, a
// message's latest version.
func (s *seeder) corrupt(refs []itemRef) {
	b := s.st.NewBulk()
	for _, ref := range refs {
		key := []byte(threadNS + ref.id + ":meta") // spec §2 names this key
		if ref.kind == store.KindMessage {
			key = s.lastKey(versionNS + ref.id + ":")
		}
		if err := b.PutRaw(key, garbage[s.rng.IntN(len(garbage))]); err != nil {
			s.t.Fatalf("seed: corrupt %s: %v", ref, err)
		}
		s.fx.malformed[ref] = true
	}
	if err := b.Close(); err != nil {
		s.t.Fatalf("seed: close bulk: %v", err)
	}
}

// lastKey returns the last key under prefix.
func (s *seeder) lastKey(prefix string) []byte {
	it, err := s.st.DB().NewIter(&pebble.IterOptions{LowerBound: []byte(prefix), UpperBound: prefixEnd(prefix)})
	if err != nil {
		s.t.Fatalf("seed: iterate %s: %v", prefix, err)
	}
	defer it.Close()
	if !it.Last() {
		s.t.Fatalf("seed: no key under %s", prefix)
	}
	return append([]byte(nil), it.Key()...)
}

const idAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-"

// id returns a new unique ID: prefix, then random characters of the whole
// alphabet.
func (s *seeder) id(prefix string) string {
	for {
		b := []byte(prefix)
		for range 3 + s.rng.IntN(8) {
			b = append(b, idAlphabet[s.rng.IntN(len(idAlphabet))])
		}
		if id := string(b); !s.ids[id] {
			s.ids[id] = true
			return id
		}
	}
}

// neighbour returns a new unique ID that extends id.
func (s *seeder) neighbour(id string) string {
	for _, suffix := range []string{".x", "0", "-1", "_", "." + s.id("")} {
		if n := id + suffix; len(n) <= 128 && !s.ids[n] {
			s.ids[n] = true
			return n
		}
	}
	return s.id("n")
}

var words = []string{"retention", "ünïcode", "日本語", "backup", "purge", "thread", "lease", "audit", "ok", "🙂"}

func (s *seeder) text(kind string) string {
	var b strings.Builder
	b.WriteString(kind)
	for range 1 + s.rng.IntN(6) {
		b.WriteByte(' ')
		b.WriteString(words[s.rng.IntN(len(words))])
	}
	return b.String()
}

// dbState is what a database holds, read with the store while no process
// has it open.
type dbState struct {
	keys    map[string]string // every key of the user namespaces, with its value
	pending []store.PurgeMarker
}

// snapshotLive reads every key and value of the user namespaces (thread:
// and version:msg:) and the pending purge markers.
func snapshotLive(t testing.TB, dbPath string) dbState {
	t.Helper()
	st := openStore(t, dbPath)
	defer func() {
		if err := st.Close(); err != nil {
			t.Fatalf("close store: %v", err)
		}
	}()
	state := dbState{keys: map[string]string{}}
	for _, ns := range []string{threadNS, versionNS} {
		it, err := st.DB().NewIter(&pebble.IterOptions{LowerBound: []byte(ns), UpperBound: prefixEnd(ns)})
		if err != nil {
			t.Fatalf("iterate %s: %v", ns, err)
		}
		for ok := it.First(); ok; ok = it.Next() {
			state.keys[string(it.Key())] = string(it.Value())
		}
		if err := it.Close(); err != nil {
			t.Fatalf("iterate %s: %v", ns, err)
		}
	}
	var err error
	if state.pending, err = st.PendingPurges(context.Background()); err != nil {
		t.Fatalf("pending purges: %v", err)
	}
	return state
}

func openStore(t testing.TB, dbPath string) *store.Store {
	t.Helper()
	st, err := store.Open(dbPath, store.Options{})
	if err != nil {
		t.Fatalf("open store %s: %v", dbPath, err)
	}
	return st
}

// prefixEnd is the exclusive upper bound of the keys starting with prefix.
func prefixEnd(prefix string) []byte {
	end := []byte(prefix)
	for i := len(end) - 1; i >= 0; i-- {
		if end[i] < 0xff {
			end[i]++
			return end[:i+1]
		}
	}
	return nil
}
