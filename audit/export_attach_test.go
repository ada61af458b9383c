package audit

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Records carry their items' attachments after their messages, bytes
// exact whatever their size (several copy chunks, none, gone), and a
// reader that skips a record's attachments lands on the next record.
func TestExportAttachmentsRoundTrip(t *testing.T) {
	big := make([]byte, 3*attachChunk+17)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range big {
		big[i] = byte(rng.Uint32())
	}
	meta := func(id, mid string, size int64) AttachmentMeta {
		return AttachmentMeta{ID: id, Thread: "t1", Message: mid, Size: size, SHA256: "ab", ContentType: "image/png",
			Filename: "a \"b\".png", CreatedTS: 1 << 60}
	}
	recs := testRecords()
	recs[0].Attachments = []ExportAttachment{
		{AttachmentMeta: meta("a1", "m1", int64(len(big))), Data: big},
		{AttachmentMeta: meta("a2", "m2", 0), Data: []byte{}},
		{AttachmentMeta: meta("a3", "m2", 5), Data: nil}, // its blob was gone
	}
	recs[1].Attachments = []ExportAttachment{{AttachmentMeta: meta("a9", "m9", 3), Data: []byte("abc")}}
	sealed := meta("a4", "m4", 9)
	sealed.SHA256, sealed.ContentType, sealed.Filename, sealed.Key, sealed.Sealed = "", "", "", 2, "c2VhbGVk"
	recs = append(recs, ExportRecord{
		ExportHead:  ExportHead{ItemType: ItemAttachment, ItemID: "a4", ThreadID: "t1", Cause: "deleted", ExportedAt: fixedStart},
		Thread:      recs[0].Thread,
		Messages:    []ExportMessage{},
		Attachments: []ExportAttachment{{AttachmentMeta: sealed}},
	})

	root := filepath.Join(t.TempDir(), "exports")
	w, err := NewExportWriter(root, "run1", fixedStart)
	if err != nil {
		t.Fatal(err)
	}
	for _, rec := range recs {
		writeRecord(t, w, rec)
	}
	sum, err := w.Close()
	if err != nil {
		t.Fatal(err)
	}
	got := readRecords(t, sum.Path)
	sameRecords(t, got, recs)
	if !bytes.Equal(got[0].Attachments[0].Data, big) || got[0].Attachments[1].Data == nil || got[0].Attachments[2].Data != nil {
		t.Fatal("attachment bytes, an empty file or a missing blob not read back as written")
	}
	if err := VerifyExport(sum.Path, sum.SHA256, int64(len(recs))); err != nil {
		t.Fatal(err)
	}

	// Every line is one JSON object, as zcat | jq reads it.
	f, err := os.Open(sum.Path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(zr)
	sc.Buffer(nil, 1<<20)
	sc.Scan()
	var line struct {
		Attachments []struct {
			Data *string `json:"data"`
		} `json:"attachments"`
	}
	if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
		t.Fatalf("first line: %v", err)
	}
	if d, _ := base64.StdEncoding.DecodeString(*line.Attachments[0].Data); !bytes.Equal(d, big) {
		t.Fatal("the line's base64 is not the attachment's bytes")
	}

	// Next skips a record's unread messages and attachments.
	r, err := OpenExport(sum.Path)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var ids []string
	for {
		h, _, err := r.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, h.ItemID)
		if h.ItemID == "m9" {
			// Attachments asked for first: the messages are skipped.
			if a, err := r.NextAttachment(); err != nil || string(a.Data) != "abc" {
				t.Fatalf("m9's attachment = %+v, %v", a, err)
			}
		}
	}
	if want := "t1 m9 t3 a4"; strings.Join(ids, " ") != want {
		t.Fatalf("records %q, want %q", strings.Join(ids, " "), want)
	}
}
