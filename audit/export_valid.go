package audit

import "bytes"

// validJSON reports whether b is exactly one JSON value, surrounding
// whitespace allowed: what json.Valid reports, several times faster. Every
// stored version passes through it on its way into an export record, and
// json.Valid was half the cost of exporting (FuzzValidJSON holds the two
// to the same answers). oneLine is false when b holds a line break (only
// whitespace can: strings cannot).
func validJSON(b []byte) (valid, oneLine bool) {
	return validValue(b), bytes.IndexByte(b, '\n') < 0 && bytes.IndexByte(b, '\r') < 0
}

func validValue(b []byte) bool {
	i := skipSpace(b, 0)
	// Containers open on a stack; bit set: object, clear: array.
	var stack []bool
	var small [64]bool
	stack = small[:0]
	for {
		// A value at b[i].
		if i >= len(b) {
			return false
		}
		switch c := b[i]; {
		case c == '{':
			if len(stack) >= maxDepth {
				return false
			}
			i = skipSpace(b, i+1)
			if i < len(b) && b[i] == '}' {
				i++
				break
			}
			stack = append(stack, true)
			var ok bool
			if i, ok = objectKey(b, i); !ok {
				return false
			}
			continue
		case c == '[':
			if len(stack) >= maxDepth {
				return false
			}
			i = skipSpace(b, i+1)
			if i < len(b) && b[i] == ']' {
				i++
				break
			}
			stack = append(stack, false)
			continue
		case c == '"':
			var ok bool
			if i, ok = scanString(b, i); !ok {
				return false
			}
		case c == '-' || c >= '0' && c <= '9':
			var ok bool
			if i, ok = scanNumber(b, i); !ok {
				return false
			}
		case c == 't':
			if !hasWord(b, i, "true") {
				return false
			}
			i += 4
		case c == 'f':
			if !hasWord(b, i, "false") {
				return false
			}
			i += 5
		case c == 'n':
			if !hasWord(b, i, "null") {
				return false
			}
			i += 4
		default:
			return false
		}
		// After a value: close containers, or go on to the next element.
		for {
			i = skipSpace(b, i)
			if len(stack) == 0 {
				return i == len(b)
			}
			if i >= len(b) {
				return false
			}
			object := stack[len(stack)-1]
			switch {
			case b[i] == ',' && object:
				var ok bool
				if i, ok = objectKey(b, skipSpace(b, i+1)); !ok {
					return false
				}
			case b[i] == ',':
				i = skipSpace(b, i+1)
			case b[i] == '}' && object, b[i] == ']' && !object:
				stack = stack[:len(stack)-1]
				i++
				continue
			default:
				return false
			}
			break
		}
	}
}

// maxDepth is encoding/json's nesting limit.
const maxDepth = 10000

// objectKey reads `"key" :` at b[i] and returns the index after the colon
// and its spaces.
func objectKey(b []byte, i int) (int, bool) {
	if i >= len(b) || b[i] != '"' {
		return i, false
	}
	i, ok := scanString(b, i)
	if !ok {
		return i, false
	}
	i = skipSpace(b, i)
	if i >= len(b) || b[i] != ':' {
		return i, false
	}
	return skipSpace(b, i+1), true
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\n' || b[i] == '\r' || b[i] == '\t') {
		i++
	}
	return i
}

func hasWord(b []byte, i int, w string) bool {
	return len(b)-i >= len(w) && string(b[i:i+len(w)]) == w
}

// scanString reads the string opening at b[i] and returns the index after
// it. Control characters must be escaped; other bytes, valid UTF-8 or not,
// are accepted, as encoding/json accepts them.
func scanString(b []byte, i int) (int, bool) {
	for i++; i < len(b); i++ {
		for i < len(b) && plainByte[b[i]] {
			i++
		}
		if i >= len(b) {
			break
		}
		switch c := b[i]; {
		case c == '"':
			return i + 1, true
		case c < 0x20:
			return i, false
		case c == '\\':
			i++
			if i >= len(b) {
				return i, false
			}
			switch b[i] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			case 'u':
				if len(b)-i < 5 || !isHex(b[i+1]) || !isHex(b[i+2]) || !isHex(b[i+3]) || !isHex(b[i+4]) {
					return i, false
				}
				i += 4
			default:
				return i, false
			}
		}
	}
	return i, false
}

// plainByte marks the bytes that stand for themselves in a string.
var plainByte = func() (t [256]bool) {
	for c := 0x20; c < 256; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

func isHex(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}

// scanNumber reads -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)? at b[i].
func scanNumber(b []byte, i int) (int, bool) {
	if b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && b[i] >= '1' && b[i] <= '9':
		i = digits(b, i)
	default:
		return i, false
	}
	if i < len(b) && b[i] == '.' {
		j := digits(b, i+1)
		if j == i+1 {
			return j, false
		}
		i = j
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		j := digits(b, i)
		if j == i {
			return j, false
		}
		i = j
	}
	return i, true
}

func digits(b []byte, i int) int {
	for i < len(b) && b[i] >= '0' && b[i] <= '9' {
		i++
	}
	return i
}
