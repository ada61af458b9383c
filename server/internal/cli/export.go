package cli

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"

	"github.com/progressdb/progressdb/audit"
)

// exportRead prints the records of an export file as JSON lines, all of
// them or those of one item, streaming: a record of any size passes
// through bounded memory. Exit 0 when records were printed (or, without
// --item, the file is read to its end), 1 when the file cannot be read or
// the item has no record in it.
func (e env) exportRead(_ context.Context, args []string) int {
	fs := flag.NewFlagSet("export read", flag.ContinueOnError)
	item := fs.String("item", "", "print only the records of this thread, message or attachment ID")
	if !e.parseFlags(fs, args, true) {
		return exitUsage
	}
	if fs.NArg() != 1 {
		fmt.Fprintln(e.stderr, "usage: progressdb export read FILE [--item ID]")
		return exitUsage
	}
	path := fs.Arg(0)
	r, err := audit.OpenExport(path)
	if err != nil {
		fmt.Fprintf(e.stderr, "progressdb export read: %v\n", err)
		return exitFailed
	}
	defer r.Close()
	out := bufio.NewWriterSize(e.stdout, 64<<10)
	defer out.Flush()
	found := 0
	for {
		h, thread, err := r.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err == nil && *item != "" && h.ItemID != *item {
			continue // Next skips its messages
		}
		if err == nil {
			err = copyRecord(out, r, h, thread)
		}
		if err != nil {
			out.Flush()
			fmt.Fprintf(e.stderr, "progressdb export read: %v\n", err)
			return exitFailed
		}
		found++
	}
	if *item != "" && found == 0 {
		out.Flush()
		fmt.Fprintf(e.stderr, "progressdb export read: no record of item %q in %s\n", *item, path)
		return exitFailed
	}
	return exitOK
}

// copyRecord re-encodes the record r is positioned on, message by message.
func copyRecord(out *bufio.Writer, r *audit.ExportReader, h audit.ExportHead, thread []byte) error {
	enc, err := audit.NewRecordEncoder(out, h)
	if err != nil {
		return err
	}
	if err := enc.Thread(thread); err != nil {
		return err
	}
	for {
		m, err := r.NextMessage()
		if errors.Is(err, io.EOF) {
			return copyAttachments(enc, r)
		}
		if err != nil {
			return err
		}
		if err := enc.Message(m.ID); err != nil {
			return err
		}
		for _, v := range m.Versions {
			if err := enc.Version(v); err != nil {
				return err
			}
		}
	}
}

// copyAttachments re-encodes the record's attachments, then ends it.
func copyAttachments(enc *audit.RecordEncoder, r *audit.ExportReader) error {
	for {
		a, err := r.NextAttachment()
		if errors.Is(err, io.EOF) {
			return enc.End()
		}
		if err != nil {
			return err
		}
		var data io.Reader
		if a.Data != nil {
			data = bytes.NewReader(a.Data)
		}
		if err := enc.Attachment(a.AttachmentMeta, data); err != nil {
			return err
		}
	}
}
