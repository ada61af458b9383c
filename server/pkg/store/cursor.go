package store

import (
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"strconv"
)

// ErrInvalidCursor refuses a cursor that no listing of this kind handed
// out (spec §7): a client must restart from the first page, never take an
// empty page for the end.
var ErrInvalidCursor = errors.New("invalid cursor")

// A cursor is where a listing resumes: the last position of a page, so that
// a cursor stays good as items come and go (past the end it gives an empty
// page). On the wire it is unpadded base64url of
//
//	version (1 byte) | kind (1 byte) | position | CRC-32C (4 bytes)
//
// where the checksum covers the listing's scope (the thread, or the thread
// and message) as well, so that a made-up, cut or mistyped cursor, or one
// from another listing, is recognised as not issued here. It is no secret:
// nothing is gained by forging one that a listing could have handed out.
const cursorVersion = 1

// Kinds of cursor, one per listing.
const (
	cursorThreads  = 't' // position: the last thread ID
	cursorMessages = 'm' // position: the last log suffix (creation time, ID)
	cursorVersions = 'v' // position: the last version number, decimal
)

var cursorTable = crc32.MakeTable(crc32.Castagnoli)

func cursorSum(scope string, head []byte) uint32 {
	sum := crc32.Update(0, cursorTable, []byte(scope))
	sum = crc32.Update(sum, cursorTable, []byte{0})
	return crc32.Update(sum, cursorTable, head)
}

func encodeCursor(kind byte, scope string, pos []byte) string {
	b := make([]byte, 0, 2+len(pos)+4)
	b = append(b, cursorVersion, kind)
	b = append(b, pos...)
	b = binary.BigEndian.AppendUint32(b, cursorSum(scope, b))
	return base64.RawURLEncoding.EncodeToString(b)
}

// decodeCursor returns the position of a cursor of kind for scope.
func decodeCursor(kind byte, scope, c string) ([]byte, error) {
	b, err := base64.RawURLEncoding.DecodeString(c)
	if err != nil || len(b) < 2+1+4 || b[0] != cursorVersion || b[1] != kind {
		return nil, cursorError(c)
	}
	head, sum := b[:len(b)-4], binary.BigEndian.Uint32(b[len(b)-4:])
	if cursorSum(scope, head) != sum {
		return nil, cursorError(c)
	}
	return head[2:], nil
}

func cursorError(c string) error {
	if len(c) > 64 {
		c = c[:64] + "…"
	}
	return fmt.Errorf("%w: %q was not handed out by this listing: start again from the first page (no cursor)", ErrInvalidCursor, c)
}

// ThreadCursor is the cursor of a thread listing that resumes after thread
// tid: what ListThreads hands out, and what a merged listing of many
// stores hands out for its own pages.
func ThreadCursor(tid string) string { return encodeCursor(cursorThreads, "", []byte(tid)) }

// ThreadCursorID returns the thread ID a thread listing's cursor resumes
// after; ErrInvalidCursor when it is not such a cursor.
func ThreadCursorID(c string) (string, error) {
	pos, err := decodeCursor(cursorThreads, "", c)
	if err != nil {
		return "", err
	}
	if ValidateID(string(pos)) != nil {
		return "", cursorError(c)
	}
	return string(pos), nil
}

func messageCursor(tid string, suffix []byte) string {
	return encodeCursor(cursorMessages, tid, suffix)
}

// messageCursorSuffix returns the log suffix a message cursor resumes after.
func messageCursorSuffix(tid, c string) ([]byte, error) {
	pos, err := decodeCursor(cursorMessages, tid, c)
	if err != nil {
		return nil, err
	}
	if _, _, ok := parseLogSuffix(pos); !ok {
		return nil, cursorError(c)
	}
	return pos, nil
}

func versionCursor(tid, mid string, version int64) string {
	return encodeCursor(cursorVersions, tid+"/"+mid, strconv.AppendInt(nil, version, 10))
}

// versionCursorNumber returns the version a version cursor resumes after.
func versionCursorNumber(tid, mid, c string) (int64, error) {
	pos, err := decodeCursor(cursorVersions, tid+"/"+mid, c)
	if err != nil {
		return 0, err
	}
	v, err := strconv.ParseInt(string(pos), 10, 64)
	if err != nil || v < 1 {
		return 0, cursorError(c)
	}
	return v, nil
}
