package audit

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/progressdb/progressdb/server/pkg/durable"
)

// A replicated shard's trail (docs/replication-design.md §10) is written
// by every replica from its group's log: the leader's Writer (with
// Options.Replicate) encodes each line as always, with the leader's clock
// and signing key, but hands the lines to its group as FileOps instead of
// writing them; every replica, the leader included, writes them with
// ApplyFileOp when it applies the command. The bytes come from the log,
// so every replica's file is the same, byte for byte.

// FileOp is one change of a run's file: lines appended in seq order and,
// when Seal, the file renamed to its sealed name after them.
type FileOp struct {
	// Name is the file's sealed name relative to the trail's root
	// (YYYY-MM/retention-<ts>-<run_id>.jsonl).
	Name string `json:"name"`
	// Seq is the seq of Lines[0].
	Seq int64 `json:"seq"`
	// Lines are whole lines, without their newline.
	Lines [][]byte `json:"lines"`
	Seal  bool     `json:"seal,omitempty"`
}

// ErrFileOp reports a FileOp that cannot be applied to the trail as it
// is: a bad name, a gap in the lines, a file damaged before its end.
var ErrFileOp = errors.New("audit file operation refused")

// ErrFileMissing: the lines continue a file this trail does not hold
// (a replica restored from a snapshot taken while the run was going):
// nothing was written.
var ErrFileMissing = errors.New("audit file to continue is missing")

// Encode returns op as a command carries it.
func (op FileOp) Encode() ([]byte, error) { return json.Marshal(op) }

// DecodeFileOp reads an encoded FileOp.
func DecodeFileOp(b []byte) (FileOp, error) {
	var op FileOp
	if err := json.Unmarshal(b, &op); err != nil {
		return op, fmt.Errorf("audit: %w: %w", ErrFileOp, err)
	}
	return op, nil
}

// ApplyFileOp writes op into the trail at root: the lines the file does
// not hold yet are appended and synced (a re-apply after a crash writes
// none twice: the file's good lines say where it stands, and a torn
// last line of a crashed append is cut first), then the file is sealed
// when op says so. A file already sealed is complete: nothing is
// written.
func ApplyFileOp(root string, op FileOp) error {
	month, name, ok := strings.Cut(op.Name, "/")
	if !ok || !isMonthDir(month) || !isAuditName(name, extSealed) || strings.ContainsAny(name, `/\`) || op.Seq < 0 {
		return fmt.Errorf("audit: %w: name %q, seq %d", ErrFileOp, op.Name, op.Seq)
	}
	dir := filepath.Join(root, month)
	final := filepath.Join(dir, name)
	if _, err := os.Lstat(final); err == nil {
		return nil
	} else if !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("audit: %w", err)
	}
	path := final + suffixInProgress
	if _, err := os.Lstat(path); errors.Is(err, fs.ErrNotExist) && op.Seq > 0 {
		return fmt.Errorf("audit: %w: %s", ErrFileMissing, path)
	}
	created, err := makeDirs(dir)
	if err != nil {
		return fmt.Errorf("audit: %w: create %s: %w", ErrUnwritable, dir, err)
	}
	if err := appendLines(path, op); err != nil {
		return err
	}
	for _, d := range created {
		if err := durable.SyncDir(filepath.Dir(d)); err != nil {
			return fmt.Errorf("audit: %w", err)
		}
	}
	if !op.Seal {
		return nil
	}
	if err := renameNew(path, final); err != nil {
		return fmt.Errorf("audit: seal %s: %w", path, err)
	}
	if err := durable.SyncDir(dir); err != nil {
		return fmt.Errorf("audit: seal %s: %w", path, err)
	}
	return nil
}

// appendLines appends the lines of op that path lacks, synced; the
// file and its folder entry are made when missing.
func appendLines(path string, op FileOp) error {
	_, statErr := os.Lstat(path)
	fresh := errors.Is(statErr, fs.ErrNotExist)
	var f *os.File
	var err error
	if fresh {
		f, err = os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, fileMode)
		if err == nil {
			err = f.Chmod(fileMode)
		}
	} else {
		f, err = openRegular(path, os.O_RDWR)
	}
	if err != nil {
		return fmt.Errorf("audit: %w: %w", ErrUnwritable, err)
	}
	defer f.Close()
	s, err := scanPrefix(f, path)
	if err != nil {
		return fmt.Errorf("audit: read %s: %w", path, err)
	}
	if s.bad != nil && !s.badIsLast {
		return fmt.Errorf("audit: %w: %s is damaged at line %d: %s", ErrFileOp, path, s.bad.Line, s.bad.Reason)
	}
	next, end := s.chain.records, s.goodEnd
	if op.Seq > next {
		return fmt.Errorf("audit: %w: %s holds %d lines, the next ones given start at %d", ErrFileOp, path, next, op.Seq)
	}
	var buf []byte
	for i, line := range op.Lines {
		if op.Seq+int64(i) >= next {
			buf = append(append(buf, line...), '\n')
		}
	}
	if s.bad != nil {
		err = f.Truncate(end) // a crashed append's torn line
	}
	if err == nil && len(buf) > 0 {
		_, err = f.WriteAt(buf, end)
	}
	if err == nil {
		err = f.Sync()
	}
	if err == nil && fresh {
		err = durable.SyncDir(filepath.Dir(path))
	}
	if err != nil {
		return fmt.Errorf("audit: %w: write %s: %w", ErrUnwritable, path, err)
	}
	return nil
}

// sealReplicated seals an abandoned file of a replicated trail through
// o.Replicate: the aborted footer is encoded here, from this replica's
// copy (the same on every replica at this point of the log), and every
// replica appends it and seals. A file without a header or damaged
// before its end is left as it is and reported: setting it aside here
// alone would make this replica's trail differ from the others'.
func sealReplicated(path string, now time.Time, o Options) (string, error) {
	final := strings.TrimSuffix(path, suffixInProgress)
	f, err := openRegular(path, os.O_RDONLY)
	if err != nil {
		return "", fmt.Errorf("audit: seal %s: %w", path, err)
	}
	s, err := scanPrefix(f, path)
	_ = f.Close()
	if err != nil {
		return "", fmt.Errorf("audit: seal %s: %w", path, err)
	}
	if s.chain.header == nil || s.bad != nil && !s.badIsLast {
		p := &Problem{File: path, Reason: "no valid header, or damaged before its end: left in progress"}
		if s.bad != nil {
			p.Line, p.Reason = s.bad.Line, s.bad.Reason+": left in progress"
		}
		return "", p
	}
	op := FileOp{Name: filepath.Base(filepath.Dir(path)) + "/" + filepath.Base(final), Seq: s.chain.records, Seal: true}
	if s.chain.footer == nil {
		footer := s.chain.tally.footer()
		footer.FinishedAt = now.UTC()
		footer.Status = RunAborted
		footer.Reason = abandonedReason
		footer.DurationMS = max(0, now.Sub(s.chain.header.StartedAt).Milliseconds())
		line, err := encodeFooter(now, s.chain.runID, s.chain.records, s.chain.lastHash, footer, o.SigningKey)
		if err != nil {
			return "", fmt.Errorf("audit: seal %s: %w", path, err)
		}
		op.Lines = [][]byte{line}
	}
	if err := o.Replicate(op); err != nil {
		return "", fmt.Errorf("audit: seal %s: %w", path, err)
	}
	return final, nil
}
