package audit

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// ExportReader reads an export file one record at a time and, within a
// record, one message at a time, so that a record of any size is read in
// bounded memory (one message's versions). Not safe for concurrent use.
type ExportReader struct {
	name    string
	f       *os.File
	zr      *gzip.Reader
	dec     *json.Decoder
	record  int  // records begun so far
	inMsgs  bool // positioned inside the current record's messages
	inAtts  bool // positioned inside the current record's attachments
	pending bool // the current record is not all read
	err     error
}

// OpenExport opens a sealed (or in-progress) export file for reading.
func OpenExport(path string) (*ExportReader, error) {
	// O_NONBLOCK: a named pipe at the path must be refused, not waited on.
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, fmt.Errorf("audit: %w", err)
	}
	if err := checkRegular(f, path); err != nil {
		f.Close()
		return nil, err
	}
	zr, err := gzip.NewReader(bufio.NewReaderSize(f, 64<<10))
	if err != nil {
		f.Close()
		return nil, &Problem{File: path, Reason: "not a gzip file: " + err.Error()}
	}
	dec := json.NewDecoder(zr)
	dec.UseNumber()
	return &ExportReader{name: path, f: f, zr: zr, dec: dec}, nil
}

// checkRegular refuses to read anything but a regular file (a FIFO would
// block the reader forever).
func checkRegular(f *os.File, path string) error {
	info, err := f.Stat()
	if err != nil {
		return fmt.Errorf("audit: %w", err)
	}
	if !info.Mode().IsRegular() {
		return &Problem{File: path, Reason: "not a regular file"}
	}
	return nil
}

// Close closes the file.
func (r *ExportReader) Close() error { return r.f.Close() }

// Next returns the head and thread metadata of the next record, or io.EOF
// after the last one; its messages follow through NextMessage (those not
// read are skipped). A record that cannot be decoded yields a *Problem
// naming it; the reader cannot go on after that.
func (r *ExportReader) Next() (ExportHead, json.RawMessage, error) {
	if r.err != nil {
		return ExportHead{}, nil, r.err
	}
	for r.pending {
		if _, err := r.NextAttachment(); err != nil && !errors.Is(err, io.EOF) {
			return ExportHead{}, nil, err
		}
	}
	if !r.dec.More() {
		if _, err := r.dec.Token(); !errors.Is(err, io.EOF) {
			return ExportHead{}, nil, r.problem("not a record", err)
		}
		r.err = io.EOF
		return ExportHead{}, nil, io.EOF
	}
	r.record++
	if err := r.delim('{'); err != nil {
		return ExportHead{}, nil, err
	}
	var h ExportHead
	var thread json.RawMessage
	for {
		if !r.dec.More() {
			return h, thread, r.problem("record without messages", nil)
		}
		key, err := r.key()
		if err != nil {
			return h, thread, err
		}
		var dst any
		switch key {
		case "item_type":
			dst = &h.ItemType
		case "item_id":
			dst = &h.ItemID
		case "thread_id":
			dst = &h.ThreadID
		case "cause":
			dst = &h.Cause
		case "exported_at":
			dst = &h.ExportedAt
		case "recovered":
			dst = &h.Recovered
		case "thread":
			dst = &thread
		case "messages":
			if err := r.delim('['); err != nil {
				return h, thread, err
			}
			if !validItemType(h.ItemType) || h.ItemID == "" {
				return h, thread, r.problem(fmt.Sprintf("bad head (item_type %q, item_id %q)", h.ItemType, h.ItemID), nil)
			}
			r.inMsgs, r.pending = true, true
			return h, thread, nil
		default:
			var skip json.RawMessage
			dst = &skip
		}
		if err := r.dec.Decode(dst); err != nil {
			return h, thread, r.problem("field "+key, err)
		}
	}
}

// NextMessage returns the current record's next message, or io.EOF after
// its last one.
func (r *ExportReader) NextMessage() (ExportMessage, error) {
	if r.err != nil {
		return ExportMessage{}, r.err
	}
	if !r.pending {
		return ExportMessage{}, io.EOF
	}
	if r.inMsgs && r.dec.More() {
		var m ExportMessage
		if err := r.dec.Decode(&m); err != nil {
			return m, r.problem("message", err)
		}
		return m, nil
	}
	if !r.inMsgs {
		return ExportMessage{}, io.EOF // in its attachments
	}
	if err := r.delim(']'); err != nil {
		return ExportMessage{}, err
	}
	r.inMsgs = false
	if err := r.rest(); err != nil {
		return ExportMessage{}, err
	}
	return ExportMessage{}, io.EOF
}

// rest reads the record's fields after its messages: at "attachments" it
// stops inside that array for NextAttachment; fields it does not know are
// skipped; at the record's end the record is done.
func (r *ExportReader) rest() error {
	for r.dec.More() {
		key, err := r.key()
		if err != nil {
			return err
		}
		if key == "attachments" && !r.inAtts {
			if err := r.delim('['); err != nil {
				return err
			}
			r.inAtts = true
			return nil
		}
		var skip json.RawMessage
		if err := r.dec.Decode(&skip); err != nil {
			return r.problem("field "+key, err)
		}
	}
	if err := r.delim('}'); err != nil {
		return err
	}
	r.pending = false
	return nil
}

// ReadRecord reads the next whole record into memory (tests and small
// files; large threads call Next and NextMessage instead).
func (r *ExportReader) ReadRecord() (ExportRecord, error) {
	h, thread, err := r.Next()
	if err != nil {
		return ExportRecord{}, err
	}
	rec := ExportRecord{ExportHead: h, Thread: thread, Messages: []ExportMessage{}}
	for {
		m, err := r.NextMessage()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return rec, err
		}
		rec.Messages = append(rec.Messages, m)
	}
	for {
		a, err := r.NextAttachment()
		if errors.Is(err, io.EOF) {
			return rec, nil
		}
		if err != nil {
			return rec, err
		}
		rec.Attachments = append(rec.Attachments, a)
	}
}

func (r *ExportReader) key() (string, error) {
	tok, err := r.dec.Token()
	if err != nil {
		return "", r.problem("key", err)
	}
	key, ok := tok.(string)
	if !ok {
		return "", r.problem(fmt.Sprintf("key is %v", tok), nil)
	}
	return key, nil
}

func (r *ExportReader) delim(want json.Delim) error {
	tok, err := r.dec.Token()
	if err != nil {
		return r.problem(fmt.Sprintf("want %q", want), err)
	}
	if tok != want {
		return r.problem(fmt.Sprintf("want %q, got %v", want, tok), nil)
	}
	return nil
}

// problem stops the reader with a *Problem naming the record (Line is the
// record's number: records are lines).
func (r *ExportReader) problem(what string, err error) error {
	reason := what
	if err != nil {
		reason += ": " + err.Error()
	}
	p := &Problem{File: r.name, Line: r.record, Reason: reason}
	r.err = p
	return p
}

// ExportCheck is what VerifyExport found in an export file.
type ExportCheck struct {
	SHA256  string // hex SHA-256 of the file's bytes
	Records int64  // complete records (lines)
}

// ScanExport reads an export file once: it hashes its bytes and counts the
// records its gzip members decompress to, checking every member's CRC and
// that the data ends with a complete line. A file that is not that is a
// *Problem.
func ScanExport(path string) (ExportCheck, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return ExportCheck{}, fmt.Errorf("audit: %w", err)
	}
	defer f.Close()
	if err := checkRegular(f, path); err != nil {
		return ExportCheck{}, err
	}
	sum := sha256.New()
	zr, err := gzip.NewReader(bufio.NewReaderSize(io.TeeReader(f, sum), 64<<10))
	if err != nil {
		return ExportCheck{}, &Problem{File: path, Reason: "not a gzip file: " + err.Error()}
	}
	var c ExportCheck
	buf := make([]byte, 64<<10)
	last := byte('\n')
	for {
		n, err := zr.Read(buf)
		if n > 0 {
			c.Records += int64(bytes.Count(buf[:n], []byte{'\n'}))
			last = buf[n-1]
		}
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return c, &Problem{File: path, Line: int(c.Records) + 1, Reason: "does not decompress: " + err.Error()}
		}
	}
	if last != '\n' {
		return c, &Problem{File: path, Line: int(c.Records) + 1, Reason: "last record has no newline (torn write)"}
	}
	c.SHA256 = hex.EncodeToString(sum.Sum(nil))
	return c, nil
}

// VerifyExport checks an export file against what an audit footer says of
// it: its SHA-256 and its number of records.
func VerifyExport(path, wantSHA256 string, wantRecords int64) error {
	c, err := ScanExport(path)
	if err != nil {
		return err
	}
	if c.SHA256 != wantSHA256 {
		return &Problem{File: path, Reason: fmt.Sprintf("SHA-256 is %s, the audit footer says %s", c.SHA256, wantSHA256)}
	}
	if c.Records != wantRecords {
		return &Problem{File: path, Reason: fmt.Sprintf("holds %d records, the audit footer says %d", c.Records, wantRecords)}
	}
	return nil
}

// ExportReport is the result of VerifyExportDir.
type ExportReport struct {
	Root     string    `json:"root"`
	Files    int       `json:"files"`    // sealed export files checked
	Verified int       `json:"verified"` // sealed export files that decompress whole
	Problems []Problem `json:"problems"`
}

// VerifyExportDir checks every file under an export root: each sealed
// export must decompress whole (every gzip member's CRC, complete lines);
// an export left in progress is a problem unless it is live (the name of
// the live run's export, "" when none), as are files set aside as corrupt
// and anything that is not an export. Hashes and counts are checked
// against the audit footers by VerifyFile; this finds exports no footer
// names (those of aborted runs) and damage to them.
func VerifyExportDir(root, live string) (ExportReport, error) {
	rep := ExportReport{Root: root, Problems: []Problem{}}
	info, err := os.Stat(root)
	if err != nil {
		return rep, fmt.Errorf("audit: %w", err)
	}
	if !info.IsDir() {
		return rep, fmt.Errorf("audit: %s is not a folder", root)
	}
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		name := d.Name()
		switch {
		case err != nil:
			rep.Problems = append(rep.Problems, Problem{File: path, Reason: "cannot read: " + err.Error()})
		case d.IsDir():
		case !d.Type().IsRegular():
			rep.Problems = append(rep.Problems, Problem{File: path, Reason: "not a regular file"})
		case strings.HasPrefix(name, exportPrefix) && strings.HasSuffix(name, extExport):
			rep.Files++
			if _, err := ScanExport(path); err != nil {
				var p *Problem
				if !errors.As(err, &p) {
					p = &Problem{File: path, Reason: err.Error()}
				}
				rep.Problems = append(rep.Problems, *p)
			} else {
				rep.Verified++
			}
		case strings.HasPrefix(name, exportPrefix) && strings.HasSuffix(name, extExportInProgress):
			if name != live {
				rep.Problems = append(rep.Problems, Problem{File: path,
					Reason: "export left in progress by a run that is not live (the next start seals it)"})
			}
		case strings.HasSuffix(name, extExportCorrupt):
			rep.Problems = append(rep.Problems, Problem{File: path, Reason: "export set aside as damaged when it was sealed"})
		default:
			rep.Problems = append(rep.Problems, Problem{File: path, Reason: "not an export file"})
		}
		return nil
	})
	if err != nil {
		return rep, fmt.Errorf("audit: walk %s: %w", root, err)
	}
	return rep, nil
}

// LiveExportName is the name the export of the run whose audit file is
// auditPath has while it is in progress.
func LiveExportName(auditPath string) string {
	base := filepath.Base(auditPath)
	stem, ok := strings.CutSuffix(strings.TrimSuffix(base, suffixInProgress), extSealed)
	if !ok || !strings.HasPrefix(stem, filePrefix) {
		return ""
	}
	return exportPrefix + strings.TrimPrefix(stem, filePrefix) + extExportInProgress
}
