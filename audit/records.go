package audit

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// Record names (the "msg" field).
const (
	MsgHeader = "retention_audit_header"
	MsgItem   = "retention_audit_item"
	MsgFooter = "retention_audit_footer"
)

// Item statuses.
const (
	StatusPurged  = "purged"
	StatusDryRun  = "dry_run"
	StatusFailed  = "failed"
	StatusSkipped = "skipped"
	StatusStamped = "stamped"
)

// Triggers of replay runs (Header.Trigger).
const (
	TriggerRestore = "restore"
	TriggerStart   = "start"
)

// TriggerMove is the trigger of the record a cluster node leaves when one
// of its shards has moved to another node (spec §11): no items, the node
// it moved to in moved_to, and a footer saying the copy was deleted.
const TriggerMove = "move"

// TriggerFormat is the trigger of the record of a raise of the database's
// format (a feature that changes what is stored, first used): no items,
// format_from and format_to, and a footer naming the feature.
const TriggerFormat = "format"

// ReasonAbsent is the reason of a replayed item the restored database
// never held (or no longer held): nothing to purge.
const ReasonAbsent = "absent"

// Item causes: why an item was purged (or would be, or was looked at).
const (
	CauseDeleted     = "deleted"      // soft-deleted and past its period
	CauseMaxAge      = "max_age"      // a live message older than MAX_AGE
	CauseMaxMessages = "max_messages" // beyond a thread's newest MAX_MESSAGES
)

// Item types.
const (
	ItemThread  = "thread"
	ItemMessage = "message"
	// ItemAttachment is an attachment's blob (spec §16), deleted after the
	// purge of its message or thread deleted its record.
	ItemAttachment = "attachment"
)

// Footer (run) statuses.
const (
	RunCompleted   = "completed"
	RunFailed      = "failed"
	RunInterrupted = "interrupted"
	RunAborted     = "aborted"
)

// MaxLineSize is the longest line, without its newline, that the reader
// accepts and the writer produces.
const MaxLineSize = 1 << 20

// maxReason caps an item's or footer's reason so that a runaway error text
// cannot make a record unwritable (and so lose a purge's record).
const maxReason = 4096

// Header opens a run's file.
type Header struct {
	StartedAt     time.Time `json:"started_at"`
	DryRun        bool      `json:"dry_run"`
	Period        string    `json:"period"`
	MessagePeriod string    `json:"message_period"`
	Cutoff        time.Time `json:"cutoff"`
	Owner         string    `json:"owner"`
	Host          string    `json:"host"`
	PID           int       `json:"pid"`
	Epoch         int64     `json:"epoch"`
	Version       string    `json:"version"`
	BatchSize     int       `json:"batch_size"`
	// Policies in force (spec §3.1): max_age "0" and max_messages 0 are
	// off; policy_overrides is the number of threads with an override.
	// Files written before policies existed lack them.
	MaxAge          string `json:"max_age"`
	MaxMessages     int    `json:"max_messages"`
	PolicyOverrides int    `json:"policy_overrides"`
	// PrevFile is the hex SHA-256 of the last line (the footer) of the
	// previous sealed file in run order, "" for the first file. Create
	// sets it; nil only in files written before the field existed.
	PrevFile *string `json:"prev_file,omitempty"`
	// Replays of purges after a restore (spec §10): trigger "restore"
	// (progressdb restore) or "start" (a database copied back by hand,
	// caught at start), the backup restored, and whether the run went on
	// over an audit trail that does not verify after the backup's head.
	// Absent in other runs.
	// DatabaseID names the database the run purged, so that databases
	// sharing a trail tell their runs apart; absent in older files.
	DatabaseID string `json:"database_id,omitempty"`
	// OriginID names the database a restored copy came from (spec
	// §10.1): present in the runs of a copy, its restore's replay first.
	OriginID          string `json:"origin_id,omitempty"`
	Trigger           string `json:"trigger,omitempty"`
	BackupID          string `json:"backup_id,omitempty"`
	AcceptBrokenAudit bool   `json:"accept_broken_audit,omitempty"`
	// Shard is the cluster shard whose database the run purged (spec §11);
	// nil, and absent from the file, on a single node.
	Shard *int `json:"shard,omitempty"`
	// MovedTo is the node a shard moved to, in the record of the move
	// (trigger "move") left by the node it moved from.
	MovedTo string `json:"moved_to,omitempty"`
	// FormatFrom and FormatTo are the database's formats before and after
	// a raise, in its record (trigger "format").
	FormatFrom int `json:"format_from,omitempty"`
	FormatTo   int `json:"format_to,omitempty"`
}

// Item records what happened to one thread or message. It holds IDs and
// timestamps only: never titles, bodies or authors.
type Item struct {
	ItemType    string     `json:"item_type"` // "thread" | "message" | "attachment"
	ItemID      string     `json:"item_id"`
	ThreadID    string     `json:"thread_id"`
	DeletedAt   time.Time  `json:"deleted_at"` // zero when unknown
	Status      string     `json:"status"`
	Cause       string     `json:"cause"` // deleted | max_age | max_messages | subject; absent in files written before policies
	KeysDeleted int64      `json:"keys_deleted"`
	PurgedAt    *time.Time `json:"purged_at,omitempty"` // only when purged
	Reason      string     `json:"reason,omitempty"`    // when skipped, failed or stamped
	Recovered   bool       `json:"recovered,omitempty"` // written by a later run
	// Replayed marks a purge repeated on a restored database: the item
	// was purged before, by the run an earlier record names (spec §10).
	Replayed bool `json:"replayed,omitempty"`
	// ErasureID names the subject erasure an item of cause subject was
	// purged for (spec §12): its receipt lists the lines that carry it.
	ErasureID string `json:"erasure_id,omitempty"`
	// Versions is the number of versions a subject erasure purged with
	// the message (its status counts them); absent when not known.
	Versions int64 `json:"versions,omitempty"`
	// Shredded: the purge destroyed the item's data keys (spec §12, a
	// thread purge of a sealing server) and the key store's erase step
	// removed them from its files before this record was written.
	Shredded bool `json:"shredded,omitempty"`
	// An attachment's message, size in bytes and hex SHA-256 (spec §16);
	// SHA256 is absent when a shredded thread's key no longer opens it.
	MessageID string `json:"message_id,omitempty"`
	Size      *int64 `json:"size,omitempty"`
	SHA256    string `json:"sha256,omitempty"`
	// Orphan: an attachment's blob that no record named (an upload killed
	// before its record was written), removed after the grace period;
	// Blob is the object removed (the blob, or an upload's leftover),
	// and Size and SHA256 are those of its bytes as stored.
	Orphan bool   `json:"orphan,omitempty"`
	Blob   string `json:"blob,omitempty"`
	// Upload is the ID of an orphan S3 multipart upload that was aborted
	// (Blob its object's name; no size or digest: it never completed).
	Upload string `json:"upload,omitempty"`
}

// Footer closes a run's file.
type Footer struct {
	FinishedAt  time.Time `json:"finished_at"`
	Status      string    `json:"status"`
	Reason      string    `json:"reason,omitempty"`
	Scanned     int64     `json:"scanned"`
	Eligible    int64     `json:"eligible"`
	Purged      int64     `json:"purged"`
	Failed      int64     `json:"failed"`
	Skipped     int64     `json:"skipped"`
	Stamped     int64     `json:"stamped"`
	KeysDeleted int64     `json:"keys_deleted"`
	DurationMS  int64     `json:"duration_ms"`
	// Erased is true when the run's erase step made everything it purged
	// unrecoverable from the data directory; EraseMS is how long it took.
	Erased  bool  `json:"erased"`
	EraseMS int64 `json:"erase_ms"`
	// KeystoreErased is true when the key store holds no destroyed key in
	// any of its files at the end of the run (spec §12); absent without
	// sealing.
	KeystoreErased bool `json:"keystore_erased,omitempty"`
	// Replicas, on a replicated shard (spec §15) when the run erased:
	// which replicas had erased its purges when the leader wrote the
	// footer. Absent elsewhere.
	Replicas *ReplicaErasures `json:"replicas,omitempty"`

	// Export (spec §3.3), present when the run exported: the number of
	// records in its export file, the file's path and its SHA-256.
	Exported     *int64 `json:"exported,omitempty"`
	ExportFile   string `json:"export_file,omitempty"`
	ExportSHA256 string `json:"export_sha256,omitempty"`

	// Signature is the base64 ed25519 signature of the footer's chain
	// hash (see Options.SigningKey); empty when files are not signed.
	Signature string `json:"signature,omitempty"`
}

// ReplicaErasures are a replicated shard's replicas, by Raft replica ID
// (cluster status names their nodes), as the leader knew them when it
// wrote a run's footer: those that reported the erase of the last purge
// it applied, and those that still owed it (down, behind, or not
// reported in time; each erases when it catches up).
type ReplicaErasures struct {
	Erased  []uint64 `json:"erased"`
	Pending []uint64 `json:"pending"`
}

// Sentinel errors.
var (
	ErrUnwritable    = errors.New("audit folder not writable")
	ErrCorrupt       = errors.New("audit file does not verify")
	ErrClosed        = errors.New("audit writer closed")
	ErrInvalidRunID  = errors.New("invalid run ID (want ^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$)")
	ErrInvalidRecord = errors.New("invalid audit record")
)

// Problem is one verification failure, naming file and line (1-based; 0 for
// the file as a whole). It wraps ErrCorrupt.
type Problem struct {
	File   string `json:"file"`
	Line   int    `json:"line"`
	Reason string `json:"reason"`
}

func (p *Problem) Error() string {
	if p.Line == 0 {
		return p.File + ": " + p.Reason
	}
	return p.File + ":" + strconv.Itoa(p.Line) + ": " + p.Reason
}

// Unwrap lets errors.Is(err, ErrCorrupt) hold for every Problem.
func (p *Problem) Unwrap() error { return ErrCorrupt }

// Record is one decoded line. Exactly one of Header, Item and Footer is set,
// according to Msg.
type Record struct {
	Msg   string
	Time  time.Time // when the line was written
	RunID string
	Seq   int64
	Prev  string // hex SHA-256 of the previous line; "" on the header
	Raw   []byte // the line's exact bytes, without the newline
	Line  int    // 1-based line number in the file

	Header *Header
	Item   *Item
	Footer *Footer
}

// lineHash is the value the next line carries in prev.
func lineHash(raw []byte) string {
	sum := sha256.Sum256(raw)
	return hex.EncodeToString(sum[:])
}

// encodeLine renders one line (without newline): the envelope keys in their
// fixed order followed by the fields of body, which must encode as a JSON
// object.
func encodeLine(msg string, at time.Time, runID string, seq int64, prev string, body any) ([]byte, error) {
	fields, err := json.Marshal(body)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrInvalidRecord, msg, err)
	}
	if len(fields) < 2 || fields[0] != '{' {
		return nil, fmt.Errorf("%w: %s does not encode as an object", ErrInvalidRecord, msg)
	}
	b := make([]byte, 0, len(fields)+160)
	b = append(b, `{"msg":`...)
	b = appendString(b, msg)
	b = append(b, `,"time":"`...)
	b = AppendTime(b, at)
	b = append(b, `","run_id":`...)
	b = appendString(b, runID)
	b = append(b, `,"seq":`...)
	b = strconv.AppendInt(b, seq, 10)
	b = append(b, `,"prev":"`...)
	b = append(b, prev...)
	b = append(b, '"')
	if len(fields) > 2 { // not "{}"
		b = append(b, ',')
	}
	b = append(b, fields[1:]...)
	if len(b) > MaxLineSize {
		return nil, fmt.Errorf("%w: %s line is %d bytes, longer than %d", ErrInvalidRecord, msg, len(b), MaxLineSize)
	}
	return b, nil
}

// AppendTime appends t as audit files write every time: RFC 3339 in UTC
// ("Z"), with nanoseconds (trailing zeros dropped), e.g.
// 2026-11-24T16:40:19.123456789Z. The HTTP API and the command line's
// --json output write times the same way (spec §2).
func AppendTime(b []byte, t time.Time) []byte {
	return t.UTC().AppendFormat(b, time.RFC3339Nano)
}

// ErrTimeFormat is returned by ParseTime for text that is not an RFC 3339
// UTC time.
var ErrTimeFormat = errors.New(`not an RFC 3339 UTC time (like "2026-11-24T16:40:19.123456789Z")`)

// ParseTime reads a time written by AppendTime: RFC 3339 ending in "Z",
// fractional seconds optional.
func ParseTime(s string) (time.Time, error) {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil || !strings.HasSuffix(s, "Z") {
		return time.Time{}, fmt.Errorf("%q: %w", s, ErrTimeFormat)
	}
	return t.UTC(), nil
}

// appendString appends s as a JSON string, escaped the way encoding/json
// escapes it.
func appendString(b []byte, s string) []byte {
	q, _ := json.Marshal(s) // a string always encodes
	return append(b, q...)
}

// parseLine decodes one line and checks its envelope: the first keys are
// msg, time, run_id, seq and prev in that order, time is RFC 3339 UTC, seq
// is a non-negative integer, and msg names a known record. It returns a
// plain reason on failure; callers add file and line.
func parseLine(raw []byte) (Record, string) {
	rec := Record{Raw: raw}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return rec, "not a JSON object"
	}
	// Every line starts with these keys, in this order.
	envelope := [...]string{"msg", "time", "run_id", "seq", "prev"}
	var values [len(envelope)]any
	for i, want := range envelope {
		key, err := dec.Token()
		if err != nil {
			return rec, "not valid JSON"
		}
		if key != want {
			return rec, fmt.Sprintf("key %d is %v, want %q", i+1, describeToken(key), want)
		}
		if values[i], err = dec.Token(); err != nil {
			return rec, "not valid JSON"
		}
	}
	var ok bool
	if rec.Msg, ok = values[0].(string); !ok {
		return rec, "msg is not a string"
	}
	stamp, ok := values[1].(string)
	if !ok {
		return rec, "time is not a string"
	}
	t, err := ParseTime(stamp)
	if err != nil {
		return rec, fmt.Sprintf("time %q is not RFC 3339 UTC", stamp)
	}
	rec.Time = t
	if rec.RunID, ok = values[2].(string); !ok {
		return rec, "run_id is not a string"
	}
	num, ok := values[3].(json.Number)
	if !ok {
		return rec, "seq is not a number"
	}
	if rec.Seq, err = num.Int64(); err != nil || rec.Seq < 0 {
		return rec, fmt.Sprintf("seq %s is not a non-negative integer", num)
	}
	if rec.Prev, ok = values[4].(string); !ok {
		return rec, "prev is not a string"
	}

	if reason := checkKeys(dec, rec.Msg); reason != "" {
		return rec, reason
	}

	// The typed decode also rejects anything after the object.
	switch rec.Msg {
	case MsgHeader:
		rec.Header = new(Header)
		err = json.Unmarshal(raw, rec.Header)
	case MsgItem:
		rec.Item = new(Item)
		err = json.Unmarshal(raw, rec.Item)
	case MsgFooter:
		rec.Footer = new(Footer)
		err = json.Unmarshal(raw, rec.Footer)
	}
	if err != nil {
		rec.Header, rec.Item, rec.Footer = nil, nil, nil
		return rec, fmt.Sprintf("%s: %v", rec.Msg, err)
	}
	return rec, ""
}

// checkKeys reads the rest of a line's object after the envelope and checks
// its keys: every field the record type requires is there, no key appears
// twice (encoding/json matches keys case-insensitively, so neither may
// differ only in case), and no key carries content the audit must never
// hold.
func checkKeys(dec *json.Decoder, msg string) string {
	var required []string
	switch msg {
	case MsgHeader:
		required = []string{"started_at", "dry_run", "period", "message_period", "cutoff",
			"owner", "host", "pid", "epoch", "version", "batch_size"}
	case MsgItem:
		required = []string{"item_type", "item_id", "thread_id", "deleted_at", "status", "keys_deleted"}
	case MsgFooter:
		required = []string{"finished_at", "status", "scanned", "eligible", "purged", "failed",
			"skipped", "stamped", "keys_deleted", "duration_ms"}
	default:
		return fmt.Sprintf("unknown msg %q", msg)
	}
	seen := map[string]bool{"msg": true, "time": true, "run_id": true, "seq": true, "prev": true}
	present := make(map[string]bool)
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return "not valid JSON"
		}
		key, _ := tok.(string)
		folded := strings.ToLower(key)
		if seen[folded] {
			return fmt.Sprintf("key %q appears twice", key)
		}
		seen[folded] = true
		present[key] = true
		switch folded {
		case "title", "body", "author":
			return fmt.Sprintf("key %q: audit records hold IDs and timestamps only", key)
		}
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			return "not valid JSON"
		}
	}
	if tok, err := dec.Token(); err != nil || tok != json.Delim('}') {
		return "not valid JSON"
	}
	for _, key := range required {
		if !present[key] {
			return fmt.Sprintf("%s lacks %q", msg, key)
		}
	}
	return ""
}

func describeToken(tok json.Token) string {
	if s, ok := tok.(string); ok {
		return strconv.Quote(s)
	}
	return fmt.Sprintf("%v", tok)
}

// validRunID reports whether id matches ^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$.
func validRunID(id string) bool {
	if len(id) == 0 || len(id) > 128 {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		alnum := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
		if !alnum && (i == 0 || c != '.' && c != '_' && c != '-') {
			return false
		}
	}
	return true
}

func validItemType(s string) bool { return s == ItemThread || s == ItemMessage || s == ItemAttachment }

func validItemStatus(s string) bool {
	switch s {
	case StatusPurged, StatusDryRun, StatusFailed, StatusSkipped, StatusStamped:
		return true
	}
	return false
}

func validCause(s string) bool {
	switch s {
	case CauseDeleted, CauseMaxAge, CauseMaxMessages, CauseSubject:
		return true
	}
	return false
}

func validRunStatus(s string) bool {
	switch s {
	case RunCompleted, RunFailed, RunInterrupted, RunAborted:
		return true
	}
	return false
}

// truncateReason shortens s to at most maxReason bytes on a rune boundary.
func truncateReason(s string) string {
	if len(s) <= maxReason {
		return s
	}
	cut := maxReason
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut]
}

// tally sums the item records of one file; footers must agree with it.
type tally struct {
	items, purged, failed, skipped, stamped, dryRun, keys int64
}

func (t *tally) add(it *Item) {
	t.items++
	t.keys += it.KeysDeleted
	switch it.Status {
	case StatusPurged:
		t.purged++
	case StatusFailed:
		t.failed++
	case StatusSkipped:
		t.skipped++
	case StatusStamped:
		t.stamped++
	case StatusDryRun:
		t.dryRun++
	}
}

// footer returns a footer carrying the tally's counts: every item was
// scanned; purged, failed and dry-run items were eligible.
func (t tally) footer() Footer {
	return Footer{
		Scanned:     t.items,
		Eligible:    t.purged + t.failed + t.dryRun,
		Purged:      t.purged,
		Failed:      t.failed,
		Skipped:     t.skipped,
		Stamped:     t.stamped,
		KeysDeleted: t.keys,
	}
}

// mismatch names the first footer count that disagrees with the items, or
// returns "".
func (t tally) mismatch(f *Footer) string {
	checks := []struct {
		name        string
		footer, sum int64
	}{
		{"purged", f.Purged, t.purged},
		{"failed", f.Failed, t.failed},
		{"skipped", f.Skipped, t.skipped},
		{"stamped", f.Stamped, t.stamped},
		{"keys_deleted", f.KeysDeleted, t.keys},
	}
	for _, c := range checks {
		if c.footer != c.sum {
			return fmt.Sprintf("footer %s is %d, items sum to %d", c.name, c.footer, c.sum)
		}
	}
	if f.Eligible < t.purged+t.failed {
		return fmt.Sprintf("footer eligible is %d, less than purged+failed (%d)", f.Eligible, t.purged+t.failed)
	}
	return ""
}
