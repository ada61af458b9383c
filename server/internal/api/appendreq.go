package api

import (
	"encoding/json"
	"net/http"
)

// appendRequest is the body of POST /v1/threads/{tid}/messages.
type appendRequest struct {
	ID     string          `json:"id"`
	Author string          `json:"author"`
	Body   json.RawMessage `json:"body"`
}

// decodeAppend reads an append's body. The shape clients send (an object
// naming id, author and body at most once each, the first two plain
// strings) is read in one pass after json.Valid; anything else goes
// through decodeJSON, whose encoding/json answers it and names any
// problem. Every write comes here, and encoding/json's decoder, its
// reflection and its second scan of the value were a tenth of a write's
// CPU in the HTTP layer.
func (s *server) decodeAppend(w http.ResponseWriter, r *http.Request, req *appendRequest) error {
	data, err := s.readBody(w, r)
	if err != nil {
		return err
	}
	if fastAppendRequest(data, req) {
		return nil
	}
	*req = appendRequest{}
	return decodeJSON(data, req, false)
}

// fastAppendRequest decodes data into req when it has the common shape,
// exactly as decodeJSON would, and reports whether it did; req.Body then
// points into data. It gives up (false) on anything else: invalid JSON,
// other names (encoding/json also matches them without regard to case),
// repeated names, escapes in names or in id and author, and values of
// other types.
func fastAppendRequest(data []byte, req *appendRequest) bool {
	if !json.Valid(data) {
		return false
	}
	// data is one valid JSON value from here on.
	i := skipSpace(data, 0)
	if data[i] != '{' {
		return false
	}
	i = skipSpace(data, i+1)
	var seenID, seenAuthor, seenBody bool
	for data[i] != '}' {
		name, next, ok := plainString(data, i)
		if !ok {
			return false
		}
		i = skipSpace(data, skipSpace(data, next)+1) // past ':'
		switch string(name) {
		case "id", "author":
			v, next, ok := plainString(data, i)
			if !ok {
				return false
			}
			if string(name) == "id" {
				if seenID {
					return false
				}
				seenID, req.ID = true, string(v)
			} else {
				if seenAuthor {
					return false
				}
				seenAuthor, req.Author = true, string(v)
			}
			i = next
		case "body":
			if seenBody {
				return false
			}
			end := skipValue(data, i)
			seenBody, req.Body = true, data[i:end:end]
			i = end
		default:
			return false
		}
		if i = skipSpace(data, i); data[i] == ',' {
			i = skipSpace(data, i+1)
		}
	}
	return true // json.Valid: only space can follow the object's end
}

func skipSpace(data []byte, i int) int {
	for i < len(data) {
		switch data[i] {
		case ' ', '\t', '\n', '\r':
			i++
		default:
			return i
		}
	}
	return i
}

// plainString returns the contents of the string at data[i] when it has
// no escapes, and the index after it.
func plainString(data []byte, i int) ([]byte, int, bool) {
	if data[i] != '"' {
		return nil, 0, false
	}
	for j := i + 1; j < len(data); j++ {
		switch data[j] {
		case '\\':
			return nil, 0, false
		case '"':
			return data[i+1 : j], j + 1, true
		}
	}
	return nil, 0, false
}

// skipValue returns the index after the valid JSON value at data[i].
func skipValue(data []byte, i int) int {
	depth, inString := 0, false
	for ; i < len(data); i++ {
		c := data[i]
		if inString {
			switch c {
			case '\\':
				i++
			case '"':
				inString = false
				if depth == 0 {
					return i + 1
				}
			}
			continue
		}
		switch c {
		case '"':
			inString = true
		case '{', '[':
			depth++
		case '}', ']':
			if depth == 0 {
				return i // the end of the enclosing object
			}
			if depth--; depth == 0 {
				return i + 1
			}
		case ',', ' ', '\t', '\n', '\r':
			if depth == 0 {
				return i
			}
		}
	}
	return i
}
