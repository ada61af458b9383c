package raftnet

import (
	"bytes"
	"errors"
	"io"
	"testing"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

func testFrame(t testing.TB) []byte {
	var recs [][]byte
	for g, typ := range []raftpb.MessageType{raftpb.MessageType_MsgApp, raftpb.MessageType_MsgHeartbeatResp} {
		r, err := appendRecord(nil, uint64(g), &raftpb.Message{Type: typ.Enum(), From: new(uint64(1)), To: new(uint64(2)),
			Entries: []*raftpb.Entry{{Index: new(uint64(7)), Data: []byte("x")}}})
		if err != nil {
			t.Fatal(err)
		}
		recs = append(recs, r)
	}
	return frameOf(recs)
}

// A frame reads back as the records written, each message whole.
func TestFrameRoundTrip(t *testing.T) {
	body, err := readFrame(bytes.NewReader(testFrame(t)), DefaultMaxFrame)
	if err != nil {
		t.Fatal(err)
	}
	recs, err := decodeFrame(body)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 2 || recs[1].group != 1 || recs[1].msg.GetType() != raftpb.MessageType_MsgHeartbeatResp ||
		recs[0].msg.GetEntries()[0].GetIndex() != 7 {
		t.Fatalf("read back %v", recs)
	}
}

// Whatever a stream holds, reading and decoding it answers a frame, the
// end of the stream or an error: never a panic, never a frame over the
// cap.
func FuzzReadFrame(f *testing.F) {
	good := testFrame(f)
	f.Add(good)
	f.Add(good[:len(good)-3])
	f.Add([]byte{0, 0, 0, 0})
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 1})
	f.Add(append([]byte{0, 0, 0, 3}, 1, 0x80, 0x80))
	hup, _ := proto.Marshal(&raftpb.Message{Type: raftpb.MessageType_MsgHup.Enum(), From: new(uint64(1)), To: new(uint64(2))})
	f.Add(frameOf([][]byte{append([]byte{1, byte(len(hup))}, hup...)}))
	f.Fuzz(func(t *testing.T, stream []byte) {
		const max = 1 << 16
		r := bytes.NewReader(stream)
		for {
			body, err := readFrame(r, max)
			if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, ErrBadFrame) {
				return
			}
			if err != nil {
				t.Fatalf("unexpected error %v", err)
			}
			if len(body) > max {
				t.Fatalf("a frame of %d bytes over the cap", len(body))
			}
			if _, err := decodeFrame(body); err != nil && !errors.Is(err, ErrBadFrame) {
				t.Fatalf("a decode error that is not ErrBadFrame: %v", err)
			}
		}
	})
}
