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
}

// ThreadOf shows a stored thread.
func ThreadOf(t store.Thread) Thread {
	return Thread{
		ID: t.ID, Title: t.Title, Author: t.Author,
		CreatedTS: Nanos(t.CreatedTS), UpdatedTS: Nanos(t.UpdatedTS),
		Deleted: t.Deleted, DeletedTS: Nanos(t.DeletedTS), LegalHold: t.LegalHold,
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
// unless the version is a tombstone.
type Message struct {
	ID        string          `json:"id"`
	Thread    string          `json:"thread"`
	Author    string          `json:"author"`
	Body      json.RawMessage `json:"body"`
	TS        Time            `json:"ts"`
	Version   int64           `json:"version"`
	Deleted   bool            `json:"deleted"`
	DeletedTS Time            `json:"deleted_ts"`
}

// MessageOf shows a stored message version.
func MessageOf(m store.Message) Message {
	return Message{
		ID: m.ID, Thread: m.Thread, Author: m.Author, Body: m.Body,
		TS: Nanos(m.TS), Version: m.Version,
		Deleted: m.Deleted, DeletedTS: Nanos(m.DeletedTS),
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

// ErrNotIJSON is wrapped by CheckIJSON's errors.
var ErrNotIJSON = errors.New("not I-JSON (RFC 7493)")

// CheckIJSON reports whether data, one JSON value, is I-JSON as far as a
// client can be hurt: no number beyond ±MaxInt (a client would read
// another number) and no object with a repeated name (clients keep
// different ones). The error names the first problem and where it is, as
// a JSON pointer.
func CheckIJSON(data []byte) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var walk func(ptr string) error
	walk = func(ptr string) error {
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		switch v := tok.(type) {
		case json.Number:
			if !inRange(v) {
				return fmt.Errorf("%w: %s: the number %s is beyond ±(2^53−1)", ErrNotIJSON, where(ptr), v)
			}
		case json.Delim:
			switch v {
			case '{':
				seen := make(map[string]bool)
				for dec.More() {
					k, err := dec.Token()
					if err != nil {
						return err
					}
					name, _ := k.(string)
					if seen[name] {
						return fmt.Errorf("%w: %s: the name %q is repeated", ErrNotIJSON, where(ptr), name)
					}
					seen[name] = true
					if err := walk(ptr + "/" + escapePointer(name)); err != nil {
						return err
					}
				}
				_, err = dec.Token() // '}'
				return err
			case '[':
				for i := 0; dec.More(); i++ {
					if err := walk(fmt.Sprintf("%s/%d", ptr, i)); err != nil {
						return err
					}
				}
				_, err = dec.Token() // ']'
				return err
			}
		}
		return nil
	}
	return walk("")
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
		return false // beyond the double range, or an integer beyond int64
	}
	return f >= -MaxInt && f <= MaxInt
}

func where(ptr string) string {
	if ptr == "" {
		return "the value"
	}
	return ptr
}

// escapePointer escapes a name for a JSON pointer (RFC 6901).
var escapePointer = strings.NewReplacer("~", "~0", "/", "~1").Replace
