package audit

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
)

// Reader reads an audit file one record at a time, holding one line in
// memory at most (MaxLineSize bytes). It does not check the chain between
// lines; VerifyFile does. A Reader is not safe for concurrent use.
type Reader struct {
	name   string
	closer io.Closer
	lines  lineReader
	line   int   // lines read so far
	err    error // io.EOF or a read error: every later Next returns it
	// only, when set, makes Next pass over every line after the first
	// that does not contain it without decoding it (Find's search).
	only []byte
}

// Open opens the audit file at path for reading. Anything but a regular
// file (a FIFO, a device, a symbolic link) is refused without blocking.
func Open(path string) (*Reader, error) {
	f, err := openRegular(path, os.O_RDONLY)
	if err != nil {
		return nil, fmt.Errorf("audit: %w", err)
	}
	r := NewReader(f, path)
	r.closer = f
	return r, nil
}

// NewReader reads audit records from src; name is used in problems.
func NewReader(src io.Reader, name string) *Reader {
	return &Reader{name: name, lines: lineReader{br: bufio.NewReaderSize(src, 64<<10)}}
}

// Next returns the next record, or io.EOF after the last one. A line that
// cannot be decoded yields a *Problem (wrapping ErrCorrupt) naming it, and
// the following call moves on to the next line; read errors end the stream.
// A last line without a newline is a torn write and reported as such.
func (r *Reader) Next() (Record, error) {
	if r.err != nil {
		return Record{}, r.err
	}
	raw, newline, tooLong, err := r.lines.next()
	for err == nil && r.only != nil && r.line > 0 && newline && !tooLong && !bytes.Contains(raw, r.only) {
		r.line++
		raw, newline, tooLong, err = r.lines.next()
	}
	if err != nil {
		if !errors.Is(err, io.EOF) {
			err = fmt.Errorf("audit: read %s: %w", r.name, err)
		}
		r.err = err
		return Record{}, err
	}
	r.line++
	switch {
	case tooLong:
		return Record{}, r.problem("line longer than " + strconv.Itoa(MaxLineSize) + " bytes")
	case !newline:
		return Record{}, r.problem("last line has no newline (torn write)")
	}
	rec, reason := parseLine(bytes.Clone(raw))
	rec.Line = r.line
	if reason != "" {
		return rec, r.problem(reason)
	}
	return rec, nil
}

// Close closes the file opened by Open.
func (r *Reader) Close() error {
	if r.closer == nil {
		return nil
	}
	return r.closer.Close()
}

func (r *Reader) problem(reason string) *Problem {
	return &Problem{File: r.name, Line: r.line, Reason: reason}
}

// lineReader splits a stream into lines, keeping at most MaxLineSize bytes
// of one line in memory.
type lineReader struct {
	br     *bufio.Reader
	buf    []byte
	offset int64 // bytes consumed so far, newlines included
}

// next returns the next line without its newline (valid until the next
// call) and whether a newline ended it. A line longer than MaxLineSize is
// consumed up to its end and reported by tooLong instead. At the end of
// the stream err is io.EOF.
func (lr *lineReader) next() (line []byte, newline, tooLong bool, err error) {
	lr.buf = lr.buf[:0]
	for {
		chunk, err := lr.br.ReadSlice('\n')
		lr.offset += int64(len(chunk))
		if !tooLong && len(lr.buf)+len(chunk) > MaxLineSize+1 {
			tooLong, lr.buf = true, lr.buf[:0]
		}
		if !tooLong {
			lr.buf = append(lr.buf, chunk...)
		}
		switch {
		case err == nil:
			if tooLong {
				return nil, true, true, nil
			}
			return lr.buf[:len(lr.buf)-1], true, false, nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case errors.Is(err, io.EOF):
			if !tooLong && len(lr.buf) == 0 {
				return nil, false, false, io.EOF
			}
			return lr.buf, false, tooLong, nil
		default:
			return nil, false, false, err
		}
	}
}
