package raftnet

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// A stream is a sequence of frames: a 4-byte big-endian length, then that
// many bytes of records, each a uvarint group, a uvarint length and a
// protobuf raftpb.Message. One frame carries the messages of many groups
// for one peer.
const frameHeader = 4

// ErrBadFrame reports a frame the receiver refuses (too large, empty,
// undecodable, or holding a message no peer may send); the stream that
// carried it is closed.
var ErrBadFrame = errors.New("bad raft frame")

// record is one message of a frame, for its group.
type record struct {
	group uint64
	msg   *raftpb.Message
}

// appendRecord encodes m for group as one record.
func appendRecord(b []byte, group uint64, m *raftpb.Message) ([]byte, error) {
	data, err := proto.Marshal(m)
	if err != nil {
		return b, fmt.Errorf("encode raft message: %w", err)
	}
	b = binary.AppendUvarint(b, group)
	b = binary.AppendUvarint(b, uint64(len(data)))
	return append(b, data...), nil
}

// frameOf puts the encoded records into one frame, written in one Write.
func frameOf(records [][]byte) []byte {
	n := 0
	for _, r := range records {
		n += len(r)
	}
	f := binary.BigEndian.AppendUint32(make([]byte, 0, frameHeader+n), uint32(n))
	for _, r := range records {
		f = append(f, r...)
	}
	return f
}

// readFrame reads the next frame's records, refusing one over max bytes
// before reading it. io.EOF: the stream ended between frames.
func readFrame(r io.Reader, max int) ([]byte, error) {
	var h [frameHeader]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return nil, err
	}
	n := binary.BigEndian.Uint32(h[:])
	switch {
	case n == 0:
		return nil, fmt.Errorf("%w: empty", ErrBadFrame)
	case uint64(n) > uint64(max):
		return nil, fmt.Errorf("%w: %d bytes, more than the %d allowed", ErrBadFrame, n, max)
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(r, body); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return nil, fmt.Errorf("frame of %d bytes: %w", n, err)
	}
	return body, nil
}

// decodeFrame decodes and checks every record of a frame: a frame is
// delivered whole or not at all.
func decodeFrame(body []byte) ([]record, error) {
	var out []record
	for len(body) > 0 {
		group, n := binary.Uvarint(body)
		if n <= 0 {
			return nil, fmt.Errorf("%w: record %d: bad group number", ErrBadFrame, len(out))
		}
		body = body[n:]
		size, n := binary.Uvarint(body)
		if n <= 0 || size > uint64(len(body)-n) {
			return nil, fmt.Errorf("%w: record %d: bad length", ErrBadFrame, len(out))
		}
		body = body[n:]
		m := &raftpb.Message{}
		if err := proto.Unmarshal(body[:size], m); err != nil {
			return nil, fmt.Errorf("%w: record %d: %w", ErrBadFrame, len(out), err)
		}
		if err := check(m); err != nil {
			return nil, fmt.Errorf("%w: record %d: %w", ErrBadFrame, len(out), err)
		}
		out = append(out, record{group: group, msg: m})
		body = body[size:]
	}
	return out, nil
}

// check refuses what no peer sends: a message without both ends, or one
// of raft's local kinds (a tick, a report), which only a replica's own
// node may hand its RawNode.
func check(m *raftpb.Message) error {
	switch {
	case m.GetTo() == 0 || m.GetFrom() == 0:
		return fmt.Errorf("message %s from %d to %d: both ends must be replicas", m.GetType(), m.GetFrom(), m.GetTo())
	case raft.IsLocalMsg(m.GetType()):
		return fmt.Errorf("message %s is local to a node", m.GetType())
	}
	return nil
}
