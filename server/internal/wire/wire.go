// Package wire is the JSON that leaves the process (spec §2): the HTTP
// API's answers and the command line's --json output are I-JSON (RFC
// 7493), so that JavaScript and every other JSON client reads them
// exactly. No number goes beyond ±MaxInt, and times are RFC 3339 UTC
// strings with nanoseconds, written the way audit files write them
// (audit.AppendTime). The store keeps Unix nanoseconds; Thread and Message
// are its records as the wire shows them.
package wire

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/progressdb/progressdb/audit"
	"github.com/progressdb/progressdb/server/pkg/store"
)

// MaxInt is the largest integer magnitude on the wire, 2^53−1: beyond it
// an IEEE 754 double, which JavaScript and many JSON libraries decode
// numbers into, no longer holds every integer.
const MaxInt = 1<<53 - 1

// Time is a time on the wire: an RFC 3339 UTC string with nanoseconds,
// or null for the zero Time ("none"). It embeds time.Time, so its methods
// are Time's.
type Time struct{ time.Time }

// At returns t as a wire Time.
func At(t time.Time) Time { return Time{t} }

// Nanos returns Unix nanoseconds as a wire Time; 0 (the store's "unset")
// is the zero Time, which encodes as null.
func Nanos(ns int64) Time {
	if ns == 0 {
		return Time{}
	}
	return Time{time.Unix(0, ns).UTC()}
}

// MarshalJSON writes the time as audit.AppendTime does, or null.
func (t Time) MarshalJSON() ([]byte, error) {
	if t.IsZero() {
		return []byte("null"), nil
	}
	b := make([]byte, 0, len(`""`)+len(time.RFC3339Nano))
	b = append(b, '"')
	b = audit.AppendTime(b, t.Time)
	return append(b, '"'), nil
}

// UnmarshalJSON reads what MarshalJSON writes: null or an RFC 3339 UTC
// string.
func (t *Time) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		*t = Time{}
		return nil
	}
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("time: %s: %w", b, audit.ErrTimeFormat)
	}
	v, err := audit.ParseTime(s)
	if err != nil {
		return fmt.Errorf("time: %w", err)
	}
	*t = Time{v}
	return nil
}

// Thread is a thread's metadata on the wire; deleted_ts is null unless
// the thread is deleted.
type Thread struct {
	ID        string `json:"id"`
	Title     string `json:"title"`
	Author    string `json:"author"`
	CreatedTS Time   `json:"created_ts"`
	UpdatedTS Time   `json:"updated_ts"`
	Deleted   bool   `json:"deleted"`
	DeletedTS Time   `json:"deleted_ts"`
	LegalHold bool   `json:"legal_hold"`
	// Unreadable: the thread is sealed and its creator's key is gone
	// (spec §12); title and author are shown as null.
	Unreadable bool `json:"-"`
}

// nullableThread is Thread with title and author that may be null.
type nullableThread struct {
	ID        string  `json:"id"`
	Title     *string `json:"title"`
	Author    *string `json:"author"`
	CreatedTS Time    `json:"created_ts"`
	UpdatedTS Time    `json:"updated_ts"`
	Deleted   bool    `json:"deleted"`
	DeletedTS Time    `json:"deleted_ts"`
	LegalHold bool    `json:"legal_hold"`
}

// MarshalJSON writes the thread, with null title and author when it is
// unreadable.
func (t Thread) MarshalJSON() ([]byte, error) {
	n := nullableThread{ID: t.ID, CreatedTS: t.CreatedTS, UpdatedTS: t.UpdatedTS, Deleted: t.Deleted,
		DeletedTS: t.DeletedTS, LegalHold: t.LegalHold}
	if !t.Unreadable {
		n.Title, n.Author = &t.Title, &t.Author
	}
	return json.Marshal(n)
}

// ThreadOf shows a stored thread.
func ThreadOf(t store.Thread) Thread {
	return Thread{
		ID: t.ID, Title: t.Title, Author: t.Author,
		CreatedTS: Nanos(t.CreatedTS), UpdatedTS: Nanos(t.UpdatedTS),
		Deleted: t.Deleted, DeletedTS: Nanos(t.DeletedTS), LegalHold: t.LegalHold,
		Unreadable: t.Unreadable,
	}
}

// Threads shows stored threads; never nil, so a list encodes as [].
func Threads(ts []store.Thread) []Thread {
	out := make([]Thread, len(ts))
	for i, t := range ts {
		out[i] = ThreadOf(t)
	}
	return out
}

// Message is one version of a message on the wire; deleted_ts is null
// unless the version is a tombstone. created_ts is the message's first
// version's ts, the same in every version; ts is this version's.
type Message struct {
	ID        string          `json:"id"`
	Thread    string          `json:"thread"`
	Author    string          `json:"author"`
	Body      json.RawMessage `json:"body"`
	CreatedTS Time            `json:"created_ts"`
	TS        Time            `json:"ts"`
	Version   int64           `json:"version"`
	Deleted   bool            `json:"deleted"`
	DeletedTS Time            `json:"deleted_ts"`
	// Unreadable: the version is sealed and its key is gone (spec §12);
	// author and body are shown as null.
	Unreadable bool `json:"-"`
}

// nullableMessage is Message with an author that may be null.
type nullableMessage struct {
	ID        string          `json:"id"`
	Thread    string          `json:"thread"`
	Author    *string         `json:"author"`
	Body      json.RawMessage `json:"body"`
	CreatedTS Time            `json:"created_ts"`
	TS        Time            `json:"ts"`
	Version   int64           `json:"version"`
	Deleted   bool            `json:"deleted"`
	DeletedTS Time            `json:"deleted_ts"`
}

// MarshalJSON writes the version, with null author and body when it is
// unreadable.
func (m Message) MarshalJSON() ([]byte, error) {
	n := nullableMessage{ID: m.ID, Thread: m.Thread, Body: m.Body, CreatedTS: m.CreatedTS, TS: m.TS,
		Version: m.Version, Deleted: m.Deleted, DeletedTS: m.DeletedTS}
	if m.Unreadable {
		n.Body = nil
	} else {
		n.Author = &m.Author
	}
	return json.Marshal(n)
}

// MessageOf shows a stored message version.
func MessageOf(m store.Message) Message {
	return Message{
		ID: m.ID, Thread: m.Thread, Author: m.Author, Body: m.Body,
		CreatedTS: Nanos(m.CreatedTS), TS: Nanos(m.TS), Version: m.Version,
		Deleted: m.Deleted, DeletedTS: Nanos(m.DeletedTS), Unreadable: m.Unreadable,
	}
}

// Messages shows stored message versions; never nil.
func Messages(ms []store.Message) []Message {
	out := make([]Message, len(ms))
	for i, m := range ms {
		out[i] = MessageOf(m)
	}
	return out
}

// AppendMessage appends m as json.Marshal(MessageOf(m)) writes it, byte
// for byte, without reflection: a page of messages through encoding/json
// called Time's MarshalJSON twice per message and re-scanned what it
// returned, and answers to reads cost 15% more CPU for it. The body is
// trusted to be valid JSON (the store checks it on the way in).
func AppendMessage(b []byte, m store.Message) ([]byte, error) {
	b = append(b, `{"id":`...)
	b = AppendString(b, m.ID)
	b = append(b, `,"thread":`...)
	b = AppendString(b, m.Thread)
	b = append(b, `,"author":`...)
	if m.Unreadable {
		b = append(b, "null"...) // sealed, its key gone: the body is empty too
	} else {
		b = AppendString(b, m.Author)
	}
	b = append(b, `,"body":`...)
	b, err := appendRaw(b, m.Body)
	if err != nil {
		return nil, fmt.Errorf("message %s body: %w", m.ID, err)
	}
	b = append(b, `,"created_ts":`...)
	b = appendNanos(b, m.CreatedTS)
	b = append(b, `,"ts":`...)
	b = appendNanos(b, m.TS)
	b = append(b, `,"version":`...)
	b = strconv.AppendInt(b, m.Version, 10)
	b = append(b, `,"deleted":`...)
	b = strconv.AppendBool(b, m.Deleted)
	b = append(b, `,"deleted_ts":`...)
	b = appendNanos(b, m.DeletedTS)
	return append(b, '}'), nil
}

// AppendMessages appends ms as a JSON array the way json.Marshal(Messages(ms))
// writes it.
func AppendMessages(b []byte, ms []store.Message) ([]byte, error) {
	b = append(b, '[')
	for i, m := range ms {
		if i > 0 {
			b = append(b, ',')
		}
		var err error
		if b, err = AppendMessage(b, m); err != nil {
			return nil, err
		}
	}
	return append(b, ']'), nil
}

// AppendString appends s as encoding/json writes a string: printable ASCII
// that needs no escape as it is, anything else through encoding/json
// (HTML characters, control characters, U+2028, invalid UTF-8).
func AppendString(b []byte, s string) []byte {
	for i := range len(s) {
		if c := s[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			q, _ := json.Marshal(s) // a string always encodes
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

// appendRaw appends a raw JSON value as encoding/json writes a
// json.RawMessage: null when empty, compacted, with <, >, & and U+2028/9
// escaped in strings. Most bodies need none of that and are copied; the
// others go through encoding/json.
func appendRaw(b []byte, raw json.RawMessage) ([]byte, error) {
	if len(raw) == 0 {
		return append(b, "null"...), nil
	}
	inString := false
	for i := 0; i < len(raw); i++ {
		switch c := raw[i]; {
		case c == '<' || c == '>' || c == '&' || c == 0xe2: // 0xe2: U+2028 and U+2029 start with it
			return appendRawSlow(b, raw)
		case inString && c == '\\':
			i++
		case c == '"':
			inString = !inString
		case !inString && (c == ' ' || c == '\t' || c == '\n' || c == '\r'):
			return appendRawSlow(b, raw)
		}
	}
	return append(b, raw...), nil
}

func appendRawSlow(b []byte, raw json.RawMessage) ([]byte, error) {
	q, err := json.Marshal(raw)
	if err != nil {
		return nil, err
	}
	return append(b, q...), nil
}

// appendNanos appends Unix nanoseconds as Nanos(ns) encodes.
func appendNanos(b []byte, ns int64) []byte {
	if ns == 0 {
		return append(b, "null"...)
	}
	b = append(b, '"')
	b = audit.AppendTime(b, time.Unix(0, ns))
	return append(b, '"')
}

// ErrNotIJSON is wrapped by CheckIJSON's errors.
var ErrNotIJSON = errors.New("not I-JSON (RFC 7493)")

// CheckIJSON reports whether data, one JSON value, is I-JSON as far as a
// client can be hurt: no number beyond ±MaxInt (a client would read
// another number) and no object with a repeated name (clients keep
// different ones). The error names the first problem and where it is, as
// a JSON pointer. Every message body goes through it, so it is one pass
// over the bytes that allocates only for objects and for numbers it
// cannot judge at a glance.
func CheckIJSON(data []byte) error {
	c := checker{data: data}
	if err := c.value(); err != nil {
		return err
	}
	if c.space(); c.i != len(c.data) {
		return c.syntax()
	}
	return nil
}

// checker walks one JSON text; path is where it is, for errors.
type checker struct {
	data []byte
	i    int
	path []segment
}

type segment struct {
	key []byte // nil: an array index
	idx int
}

func (c *checker) space() {
	for c.i < len(c.data) {
		switch c.data[c.i] {
		case ' ', '\t', '\n', '\r':
			c.i++
		default:
			return
		}
	}
}

func (c *checker) syntax() error {
	return fmt.Errorf("%w: invalid JSON at byte %d", ErrNotIJSON, c.i)
}

func (c *checker) fail(what string) error {
	return fmt.Errorf("%w: %s: %s", ErrNotIJSON, c.where(), what)
}

// where is the current path as a JSON pointer (RFC 6901).
func (c *checker) where() string {
	if len(c.path) == 0 {
		return "the value"
	}
	var b strings.Builder
	for _, s := range c.path {
		b.WriteByte('/')
		if s.key == nil {
			b.WriteString(strconv.Itoa(s.idx))
		} else {
			b.WriteString(escapePointer(string(s.key)))
		}
	}
	return b.String()
}

func (c *checker) value() error {
	c.space()
	if c.i >= len(c.data) {
		return c.syntax()
	}
	switch b := c.data[c.i]; {
	case b == '{':
		return c.object()
	case b == '[':
		return c.array()
	case b == '"':
		_, err := c.str()
		return err
	case b == '-' || '0' <= b && b <= '9':
		return c.number()
	case b == 't':
		return c.literal("true")
	case b == 'f':
		return c.literal("false")
	case b == 'n':
		return c.literal("null")
	}
	return c.syntax()
}

func (c *checker) literal(lit string) error {
	if !bytes.HasPrefix(c.data[c.i:], []byte(lit)) {
		return c.syntax()
	}
	c.i += len(lit)
	return nil
}

// str reads a string and returns its value: the raw bytes unless it has
// escapes.
func (c *checker) str() ([]byte, error) {
	start := c.i
	escaped := false
	for c.i++; c.i < len(c.data); c.i++ {
		switch c.data[c.i] {
		case '\\':
			escaped = true
			c.i++
		case '"':
			c.i++
			if !escaped {
				return c.data[start+1 : c.i-1], nil
			}
			var s string
			if err := json.Unmarshal(c.data[start:c.i], &s); err != nil {
				return nil, c.syntax()
			}
			return []byte(s), nil
		}
	}
	return nil, c.syntax()
}

// number checks one number. Without an exponent and with at most 15
// digits before the point it is below 10^15 < 2^53; anything else is
// parsed.
func (c *checker) number() error {
	start := c.i
	digits, point, exp := 0, false, false
scan:
	for ; c.i < len(c.data); c.i++ {
		switch b := c.data[c.i]; {
		case '0' <= b && b <= '9':
			if !point && !exp {
				digits++
			}
		case b == '.':
			point = true
		case b == 'e' || b == 'E':
			exp = true
		case b == '-' || b == '+':
		default:
			break scan
		}
	}
	if digits <= 15 && !exp {
		return nil
	}
	n := json.Number(c.data[start:c.i])
	if !inRange(n) {
		return c.fail("the number " + string(n) + " is beyond ±(2^53−1)")
	}
	return nil
}

// object checks an object's members and that no name comes twice.
func (c *checker) object() error {
	c.i++ // '{'
	var names [][]byte
	var many map[string]bool // once there are too many names to compare
	c.space()
	if c.i < len(c.data) && c.data[c.i] == '}' {
		c.i++
		return nil
	}
	for {
		c.space()
		if c.i >= len(c.data) || c.data[c.i] != '"' {
			return c.syntax()
		}
		name, err := c.str()
		if err != nil {
			return err
		}
		if repeated(name, &names, &many) {
			return c.fail(fmt.Sprintf("the name %q is repeated", name))
		}
		if c.space(); c.i >= len(c.data) || c.data[c.i] != ':' {
			return c.syntax()
		}
		c.i++
		c.path = append(c.path, segment{key: name})
		if err := c.value(); err != nil {
			return err
		}
		c.path = c.path[:len(c.path)-1]
		if end, err := c.next('}'); end || err != nil {
			return err
		}
	}
}

// repeated records name and reports whether it was there already.
func repeated(name []byte, names *[][]byte, many *map[string]bool) bool {
	if *many != nil {
		if (*many)[string(name)] {
			return true
		}
		(*many)[string(name)] = true
		return false
	}
	for _, n := range *names {
		if bytes.Equal(n, name) {
			return true
		}
	}
	*names = append(*names, name)
	if len(*names) > 16 {
		*many = make(map[string]bool, 2*len(*names))
		for _, n := range *names {
			(*many)[string(n)] = true
		}
	}
	return false
}

func (c *checker) array() error {
	c.i++ // '['
	c.space()
	if c.i < len(c.data) && c.data[c.i] == ']' {
		c.i++
		return nil
	}
	for idx := 0; ; idx++ {
		c.path = append(c.path, segment{idx: idx})
		if err := c.value(); err != nil {
			return err
		}
		c.path = c.path[:len(c.path)-1]
		if end, err := c.next(']'); end || err != nil {
			return err
		}
	}
}

// next reads what follows a member or an element: a comma before the
// next one, or closing, which ends the object or array.
func (c *checker) next(closing byte) (end bool, err error) {
	if c.space(); c.i >= len(c.data) {
		return false, c.syntax()
	}
	switch c.data[c.i] {
	case ',':
		c.i++
		return false, nil
	case closing:
		c.i++
		return true, nil
	}
	return false, c.syntax()
}

// inRange reports whether a JSON number's magnitude is at most MaxInt.
// Integers are compared exactly; other numbers as doubles, which is how
// the clients the rule protects read them.
func inRange(n json.Number) bool {
	if i, err := n.Int64(); err == nil {
		return i >= -MaxInt && i <= MaxInt
	}
	f, err := n.Float64()
	if err != nil {
		return false // beyond the double range
	}
	return f >= -MaxInt && f <= MaxInt
}

// escapePointer escapes a name for a JSON pointer (RFC 6901).
var escapePointer = strings.NewReplacer("~", "~0", "/", "~1").Replace
