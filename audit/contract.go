// Package audit writes, reads and verifies retention audit files (spec §5).
// Backup tooling may import it to check what it collects.
package audit

// This file fixes the exported surface other packages build against.
// Implementations replace the bodies; signatures change only together with
// every caller.

import (
	"errors"
	"time"
)

var errTODO = errors.New("audit: not implemented yet")

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

// Footer (run) statuses.
const (
	RunCompleted   = "completed"
	RunFailed      = "failed"
	RunInterrupted = "interrupted"
	RunAborted     = "aborted"
)

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
}

// Item records what happened to one thread or message.
type Item struct {
	ItemType    string     `json:"item_type"` // "thread" | "message"
	ItemID      string     `json:"item_id"`
	ThreadID    string     `json:"thread_id"`
	DeletedAt   time.Time  `json:"deleted_at"`
	Status      string     `json:"status"`
	KeysDeleted int64      `json:"keys_deleted"`
	PurgedAt    *time.Time `json:"purged_at,omitempty"`
	Reason      string     `json:"reason,omitempty"`
	Recovered   bool       `json:"recovered,omitempty"`
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
}

// Sentinel errors.
var (
	ErrUnwritable = errors.New("audit folder not writable")
	ErrCorrupt    = errors.New("audit file does not verify")
	ErrClosed     = errors.New("audit writer closed")
)

// Writer appends one run's records to <root>/YYYY-MM/retention-<ts>-<run_id>.jsonl.inprogress.
type Writer struct{}

// Create makes the month folder (0750) and the file (0640), writes the
// header and syncs it before returning: no delete may happen before Create
// returns nil.
func Create(root, runID string, h Header) (*Writer, error) { return nil, errTODO }

// Item appends an item record (buffered until Sync).
func (w *Writer) Item(it Item) error { return errTODO }

// Sync flushes and fsyncs every record appended so far.
func (w *Writer) Sync() error { return errTODO }

// Close appends the footer, syncs, renames the file to .jsonl and syncs the
// folder. It returns the final path.
func (w *Writer) Close(f Footer) (string, error) { return "", errTODO }

// Path is the file's current path.
func (w *Writer) Path() string { return "" }

// SealAbandoned finds .inprogress files under root left by crashed runs,
// drops a torn last line, appends a footer with status "aborted" and the
// counts of the records present, and renames them. Returns the sealed paths.
// Files named in skip (the caller's own open file) are left alone.
func SealAbandoned(root string, now time.Time, skip ...string) ([]string, error) {
	return nil, errTODO
}

// Summary describes one audit file: its header and, when sealed, its footer.
type Summary struct {
	Path   string
	RunID  string
	Header Header
	Footer *Footer // nil while in progress
	Sealed bool
}

// LastRun returns the most recent run's file under root by header start
// time (sealed or not); nil, nil when there is none. Cheap: it reads only
// the newest month folders and each candidate's first and last lines.
func LastRun(root string) (*Summary, error) { return nil, errTODO }

// Problem is one verification failure, naming file and line (1-based; 0 for
// the file as a whole).
type Problem struct {
	File   string `json:"file"`
	Line   int    `json:"line"`
	Reason string `json:"reason"`
}

// Report is the result of VerifyDir.
type Report struct {
	Files      int       `json:"files"`       // sealed files checked
	Verified   int       `json:"verified"`    // sealed files that verify
	InProgress []string  `json:"in_progress"` // .inprogress files (not judged)
	Problems   []Problem `json:"problems"`
}

// VerifyFile checks one sealed file: every line is JSON with the common
// fields, seq runs 0,1,2,…, run_id is constant, prev chains (SHA-256 of the
// previous line's bytes), the header is first and the footer last, and the
// footer's counts equal the item records'. The error is a *Problem wrapped
// with ErrCorrupt.
func VerifyFile(path string) error { return errTODO }

// VerifyDir verifies every sealed file under root (recursively).
func VerifyDir(root string) (Report, error) { return Report{}, errTODO }

func (p *Problem) Error() string { return p.File + ":" + itoa(p.Line) + ": " + p.Reason }

func itoa(n int) string {
	if n == 0 {
		return "0"
	}
	var b []byte
	neg := n < 0
	if neg {
		n = -n
	}
	for n > 0 {
		b = append([]byte{byte('0' + n%10)}, b...)
		n /= 10
	}
	if neg {
		b = append([]byte{'-'}, b...)
	}
	return string(b)
}
