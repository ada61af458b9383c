package audit

import (
	"fmt"
	"time"
)

// chain follows a file's records in order and checks the rules every
// prefix of a valid file keeps: the header first, seq counting up from 0,
// one run_id, prev chaining each line to the one before, well-formed
// fields, and nothing after the footer. Whether the file is complete and
// its counts add up is the verifier's business.
type chain struct {
	records  int64  // records accepted so far
	lastHash string // lineHash of the last accepted line
	header   *Header
	runID    string
	footer   *Footer
	tally    tally
}

// fault is a rule a record breaks. link marks a prev that does not match
// the line before: the change may be on either of the two lines.
type fault struct {
	reason string
	link   bool
}

// accept checks rec against the records before it and, when it passes,
// makes it part of the chain.
func (c *chain) accept(rec *Record) *fault {
	if f := c.place(rec); f != nil {
		return f
	}
	if reason := checkFields(rec); reason != "" {
		return &fault{reason: reason}
	}
	switch {
	case rec.Header != nil:
		c.header, c.runID = rec.Header, rec.RunID
	case rec.Item != nil:
		c.tally.add(rec.Item)
	case rec.Footer != nil:
		c.footer = rec.Footer
	}
	c.records++
	c.lastHash = lineHash(rec.Raw)
	return nil
}

// place checks where rec stands: its kind, seq, run_id and prev.
func (c *chain) place(rec *Record) *fault {
	if c.records == 0 {
		switch {
		case rec.Msg != MsgHeader:
			return &fault{reason: fmt.Sprintf("first record is %s, want %s", rec.Msg, MsgHeader)}
		case rec.Seq != 0:
			return &fault{reason: fmt.Sprintf("header seq is %d, want 0", rec.Seq)}
		case rec.Prev != "":
			return &fault{reason: "header prev is not empty"}
		case !validRunID(rec.RunID):
			return &fault{reason: fmt.Sprintf("run_id %q: %v", rec.RunID, ErrInvalidRunID)}
		}
		return nil
	}
	switch {
	case c.footer != nil:
		return &fault{reason: "record after the footer"}
	case rec.Msg == MsgHeader:
		return &fault{reason: "second header"}
	case rec.Seq != c.records:
		return &fault{reason: fmt.Sprintf("seq is %d, want %d (a line is missing, repeated or out of order)", rec.Seq, c.records)}
	case rec.RunID != c.runID:
		return &fault{reason: fmt.Sprintf("run_id is %q, want %q", rec.RunID, c.runID)}
	case rec.Prev != c.lastHash:
		return &fault{reason: "prev does not match the SHA-256 of the line before", link: true}
	}
	return nil
}

// checkFields checks the values of a record's own fields.
func checkFields(rec *Record) string {
	switch {
	case rec.Header != nil:
		h := rec.Header
		if !isUTC(h.StartedAt) || !isUTC(h.Cutoff) {
			return "header times are not UTC"
		}
	case rec.Item != nil:
		it := rec.Item
		switch {
		case !validItemType(it.ItemType):
			return fmt.Sprintf("item_type %q is not thread, message or attachment", it.ItemType)
		case !validItemStatus(it.Status):
			return fmt.Sprintf("item status %q is unknown", it.Status)
		case it.Cause != "" && !validCause(it.Cause):
			return fmt.Sprintf("item cause %q is unknown", it.Cause)
		case (it.PurgedAt != nil) != (it.Status == StatusPurged):
			return "purged_at must be present exactly when status is purged"
		case !isUTC(it.DeletedAt) || it.PurgedAt != nil && !isUTC(*it.PurgedAt):
			return "item times are not UTC"
		}
	case rec.Footer != nil:
		f := rec.Footer
		switch {
		case !validRunStatus(f.Status):
			return fmt.Sprintf("footer status %q is unknown", f.Status)
		case !isUTC(f.FinishedAt):
			return "footer time is not UTC"
		}
	}
	return ""
}

func isUTC(t time.Time) bool { return t.Location() == time.UTC }
