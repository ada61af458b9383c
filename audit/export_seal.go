package audit

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/progressdb/progressdb/server/pkg/durable"
)

// SealAbandonedExports finds export files under root left .inprogress by
// crashed runs, cuts a torn last record off and renames them to .jsonl.gz.
// A file without a single complete record is removed: no item was deleted
// on its account. Returns the sealed paths. Files named in skip (the
// caller's own open file) are left alone.
//
// Only a torn tail is cut: the bytes after the last complete gzip member
// end early (a write cut short) or are zeros (blocks allocated but never
// written). A file damaged anywhere else is renamed to .jsonl.gz.corrupt
// and reported as a *Problem; other files are still sealed.
//
// The caller must hold the retention lease, so that no live run's file is
// sealed.
func SealAbandonedExports(root string, skip ...string) ([]string, error) {
	paths, err := ExportsInProgress(root)
	return sealEach(paths, err, skip, sealExport)
}

// ExportsInProgress lists the export files under root still named
// .inprogress: a live run's, or those a crash left for sealing.
func ExportsInProgress(root string) ([]string, error) {
	return monthFiles(root, func(name string) bool {
		return strings.HasPrefix(name, exportPrefix) && strings.HasSuffix(name, extExportInProgress)
	})
}

// sealExport seals one abandoned export and returns its final path, or ""
// when it held no complete record and was removed.
func sealExport(path string) (string, error) {
	final, f, err := openToSeal(path)
	if err != nil {
		return "", err
	}
	m, err := scanMembers(f)
	if err != nil {
		f.Close()
		return "", fmt.Errorf("audit: seal %s: %w", path, err)
	}
	if m.bad != "" && !m.tornTail {
		f.Close()
		return "", quarantineExport(path, m)
	}
	if m.records == 0 {
		f.Close()
		if err := os.Remove(path); err != nil {
			return "", fmt.Errorf("audit: seal %s: %w", path, err)
		}
		return "", durable.SyncDir(filepath.Dir(path))
	}
	if m.bad != "" {
		err = f.Truncate(m.goodEnd)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = renameNew(path, final)
	}
	if err == nil {
		err = durable.SyncDir(filepath.Dir(path))
	}
	if err != nil {
		return "", fmt.Errorf("audit: seal %s: %w", path, err)
	}
	return final, nil
}

func quarantineExport(path string, m members) error {
	corrupt := strings.TrimSuffix(path, extExportInProgress) + extExportCorrupt
	if err := renameNew(path, corrupt); err != nil {
		return fmt.Errorf("audit: set aside %s: %w", path, err)
	}
	if err := durable.SyncDir(filepath.Dir(path)); err != nil {
		return fmt.Errorf("audit: set aside %s: %w", path, err)
	}
	return &Problem{File: corrupt, Line: int(m.records) + 1,
		Reason: m.bad + ", and data follows it: set aside instead of sealed"}
}

// members is what scanMembers learned about an export file.
type members struct {
	records  int64  // records (lines) in complete members
	goodEnd  int64  // offset just past the last complete member
	bad      string // why the data after goodEnd is not a complete member
	tornTail bool   // that data is a torn write that may be cut off
}

// scanMembers walks the gzip members of r one by one; each must be a
// complete member (CRC and length checked) of whole lines.
func scanMembers(f *os.File) (members, error) {
	c := &byteCounter{br: bufio.NewReaderSize(f, 64<<10)}
	var m members
	zr, err := gzip.NewReader(c)
	for err == nil {
		zr.Multistream(false)
		var n int64
		n, err = readMember(zr)
		if err != nil {
			break
		}
		m.records += n
		m.goodEnd = c.n
		err = zr.Reset(c)
	}
	if errors.Is(err, io.EOF) {
		return m, nil // ended after a complete member (or empty)
	}
	m.bad = "record " + fmt.Sprint(m.records+1) + ": " + err.Error()
	if errors.Is(err, io.ErrUnexpectedEOF) {
		m.tornTail = true
		return m, nil
	}
	zeros, rerr := onlyZeros(io.NewSectionReader(f, m.goodEnd, 1<<62))
	if rerr != nil {
		return m, rerr
	}
	m.tornTail = zeros
	return m, nil
}

// readMember decompresses one member and checks it holds complete lines.
func readMember(zr *gzip.Reader) (int64, error) {
	buf := make([]byte, 32<<10)
	lines, last := 0, byte(0)
	for {
		n, err := zr.Read(buf)
		if n > 0 {
			lines += bytes.Count(buf[:n], []byte{'\n'})
			last = buf[n-1]
		}
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return 0, err
		}
	}
	if lines == 0 || last != '\n' {
		return 0, fmt.Errorf("gzip member does not end with a complete line")
	}
	return int64(lines), nil
}

func onlyZeros(r io.Reader) (bool, error) {
	buf := make([]byte, 32<<10)
	for {
		n, err := r.Read(buf)
		for _, b := range buf[:n] {
			if b != 0 {
				return false, nil
			}
		}
		if errors.Is(err, io.EOF) {
			return true, nil
		}
		if err != nil {
			return false, err
		}
	}
}

// byteCounter counts the bytes the gzip reader consumes; as an
// io.ByteReader it keeps the reader from reading ahead, so the count is
// where a member ends.
type byteCounter struct {
	br *bufio.Reader
	n  int64
}

func (c *byteCounter) Read(p []byte) (int, error) {
	n, err := c.br.Read(p)
	c.n += int64(n)
	return n, err
}

func (c *byteCounter) ReadByte() (byte, error) {
	b, err := c.br.ReadByte()
	if err == nil {
		c.n++
	}
	return b, err
}
