package store

import (
	"bytes"
)

// Key prefixes. An upper bound for "every key starting with p:" is p followed
// by ';', the byte after ':'; no ID contains either, so a thread's range never
// covers another thread's keys.
const (
	threadNS       = "thread:"
	versionNS      = "version:msg:"
	delIndexNS     = "idx:del:"
	delThreadNS    = "idx:del:t:"
	delMessageNS   = "idx:del:m:"
	liveThreadNS   = "idx:live:"
	purgeNS        = "sys:purge:"
	purgeThreadNS  = "sys:purge:t:"
	purgeMessageNS = "sys:purge:m:"
	stampNS        = "sys:stamp:"
	stampThreadNS  = "sys:stamp:t:"
	stampMessageNS = "sys:stamp:m:"
	schemaKey      = "sys:schema"

	// schemaVersion is the value of sys:schema once the indexes this
	// version keeps are built: "1" had the deletion index only, "2" adds
	// the live-thread index, "3" the live-message indexes of the retention
	// policies (idx:age, idx:cnt, thread:<tid>:count), "4" the entries of
	// soft-deleted attachments (idx:del:a:, attdeletions.go). Any other
	// value (or none) means a rebuild at open.
	schemaVersion = "4"

	metaSuffix = "meta"
	logSuffix  = "log:"

	// padWidth is the width of zero-padded numbers in keys (%020d), wide
	// enough for any non-negative int64 so byte order is numeric order.
	padWidth = 20
)

// appendPadded appends v as a 20-digit zero-padded decimal. Negative values
// are written as 0: an absurd timestamp must not break the key order.
func appendPadded(b []byte, v int64) []byte {
	if v < 0 {
		v = 0
	}
	var digits [padWidth]byte
	for i := padWidth - 1; i >= 0; i-- {
		digits[i] = byte('0' + v%10)
		v /= 10
	}
	return append(b, digits[:]...)
}

// parsePadded reads a 20-digit zero-padded decimal.
func parsePadded(b []byte) (int64, bool) {
	if len(b) != padWidth {
		return 0, false
	}
	var v int64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		d := int64(c - '0')
		if v > (1<<63-1-d)/10 {
			return 0, false
		}
		v = v*10 + d
	}
	return v, true
}

// upperBound returns the exclusive end of every key starting with prefix,
// where prefix ends in ':'.
func upperBound(prefix []byte) []byte {
	end := bytes.Clone(prefix)
	end[len(end)-1] = ';'
	return end
}

func appendThreadPrefix(b []byte, tid string) []byte {
	b = append(b, threadNS...)
	b = append(b, tid...)
	return append(b, ':')
}

// threadPrefix is thread:<tid>: — every key of the thread except its
// messages' versions.
func threadPrefix(tid string) []byte { return appendThreadPrefix(threadKeyBuf(tid, 0), tid) }

// threadKeyBuf is an empty buffer with room for a key of thread tid of up
// to more bytes after thread:<tid>:, so that building it allocates once.
func threadKeyBuf(tid string, more int) []byte {
	return make([]byte, 0, len(threadNS)+len(tid)+1+more)
}

// threadEnd is the exclusive upper bound of threadPrefix(tid).
func threadEnd(tid string) []byte {
	b := append([]byte(threadNS), tid...)
	return append(b, ';')
}

func threadMetaKey(tid string) []byte {
	return append(appendThreadPrefix(threadKeyBuf(tid, len(metaSuffix)), tid), metaSuffix...)
}

func logPrefix(tid string) []byte {
	return append(appendThreadPrefix(threadKeyBuf(tid, len(logSuffix)), tid), logSuffix...)
}

// appendLogKey appends thread:<tid>:log:<created 20d>:<mid>.
func appendLogKey(b []byte, tid string, created int64, mid string) []byte {
	b = appendThreadPrefix(b, tid)
	b = append(b, logSuffix...)
	b = appendPadded(b, created)
	b = append(b, ':')
	return append(b, mid...)
}

func logKey(tid string, created int64, mid string) []byte {
	return appendLogKey(nil, tid, created, mid)
}

// parseLogSuffix splits "<ts 20d>:<id>", the tail of a log key after
// thread:<tid>:log: (also the ListMessages cursor). Deletion index keys end
// the same way.
func parseLogSuffix(b []byte) (ts int64, id string, ok bool) {
	if len(b) < padWidth+2 || b[padWidth] != ':' {
		return 0, "", false
	}
	ts, ok = parsePadded(b[:padWidth])
	if !ok {
		return 0, "", false
	}
	id = string(b[padWidth+1:])
	if ValidateID(id) != nil {
		return 0, "", false
	}
	return ts, id, true
}

// parseThreadKey returns the thread ID of a key under thread: and the rest
// of the key after thread:<tid>:.
func parseThreadKey(key []byte) (tid string, rest []byte, ok bool) {
	if !bytes.HasPrefix(key, []byte(threadNS)) {
		return "", nil, false
	}
	k := key[len(threadNS):]
	i := bytes.IndexByte(k, ':')
	if i <= 0 {
		return "", nil, false
	}
	return string(k[:i]), k[i+1:], true
}

func appendVersionPrefix(b []byte, mid string) []byte {
	b = append(b, versionNS...)
	b = append(b, mid...)
	return append(b, ':')
}

func versionPrefix(mid string) []byte { return appendVersionPrefix(nil, mid) }

func versionEnd(mid string) []byte {
	b := append([]byte(versionNS), mid...)
	return append(b, ';')
}

// appendVersionKey appends version:msg:<mid>:<version 20d>.
func appendVersionKey(b []byte, mid string, version int64) []byte {
	return appendPadded(appendVersionPrefix(b, mid), version)
}

func versionKey(mid string, version int64) []byte {
	return appendVersionKey(nil, mid, version)
}

// parseVersionKey returns the message ID and version number of a version key.
func parseVersionKey(key []byte) (mid string, version int64, ok bool) {
	if !bytes.HasPrefix(key, []byte(versionNS)) {
		return "", 0, false
	}
	k := key[len(versionNS):]
	i := bytes.IndexByte(k, ':')
	if i <= 0 {
		return "", 0, false
	}
	version, ok = parsePadded(k[i+1:])
	if !ok {
		return "", 0, false
	}
	return string(k[:i]), version, true
}

func deletionPrefix(kind ItemKind) []byte {
	if kind == KindThread {
		return []byte(delThreadNS)
	}
	return []byte(delMessageNS)
}

// appendDeletionKey appends idx:del:<t|m>:<deleted_ts 20d>:<id>.
func appendDeletionKey(b []byte, kind ItemKind, deletedTS int64, id string) []byte {
	if kind == KindThread {
		b = append(b, delThreadNS...)
	} else {
		b = append(b, delMessageNS...)
	}
	b = appendPadded(b, deletedTS)
	b = append(b, ':')
	return append(b, id...)
}

func deletionKey(kind ItemKind, deletedTS int64, id string) []byte {
	return appendDeletionKey(nil, kind, deletedTS, id)
}

// indexTS is the time under which a deleted item is indexed: its deleted_ts,
// or 0 when that is missing or negative (legacy data, stamped by retention).
func indexTS(deletedTS int64) int64 { return max(deletedTS, 0) }

// parseDeletionKey reads the time and ID of an index key of kind.
func parseDeletionKey(kind ItemKind, key []byte) (ts int64, id string, ok bool) {
	p := deletionPrefix(kind)
	if !bytes.HasPrefix(key, p) {
		return 0, "", false
	}
	ts, id, ok = parseLogSuffix(key[len(p):])
	return ts, id, ok
}

// liveThreadKey is idx:live:<tid>: — the live-thread index, which lists
// threads that are not soft-deleted. The trailing ':' makes its keys sort
// exactly as thread:<tid>: does, so listings page in the same order.
func liveThreadKey(tid string) []byte {
	b := append([]byte(liveThreadNS), tid...)
	return append(b, ':')
}

// liveThreadEnd is the key just past every live-thread key of tid; a
// listing resumes there after cursor tid.
func liveThreadEnd(tid string) []byte {
	b := append([]byte(liveThreadNS), tid...)
	return append(b, ';')
}

func purgeKey(kind ItemKind, id string) []byte {
	if kind == KindThread {
		return append([]byte(purgeThreadNS), id...)
	}
	return append([]byte(purgeMessageNS), id...)
}

func stampKey(kind ItemKind, id string) []byte {
	if kind == KindThread {
		return append([]byte(stampThreadNS), id...)
	}
	return append([]byte(stampMessageNS), id...)
}
