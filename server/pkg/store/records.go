package store

import (
	"encoding/json"
	"fmt"
)

// decodeThread reads a thread's metadata stored under thread:<tid>:meta.
// A record that is not JSON of the right shape, or that names another
// thread, is ErrMalformed: callers report it and never delete it.
func decodeThread(tid string, data []byte) (Thread, error) {
	t, ok := fastThread(data)
	if !ok {
		if err := json.Unmarshal(data, &t); err != nil {
			return Thread{}, fmt.Errorf("thread %s metadata: %w: %w", tid, ErrMalformed, err)
		}
	}
	switch t.ID {
	case "":
		t.ID = tid // older records did not repeat the ID
	case tid:
	default:
		return Thread{}, fmt.Errorf("thread %s metadata: %w: names thread %q", tid, ErrMalformed, t.ID)
	}
	return t, nil
}

// decodeMessage reads one stored version of message mid. The record must
// name its thread: that is how a route's thread ID is checked.
func decodeMessage(mid string, version int64, data []byte) (Message, error) {
	m, ok := fastMessage(data)
	if !ok {
		if err := json.Unmarshal(data, &m); err != nil {
			return Message{}, fmt.Errorf("message %s version %d: %w: %w", mid, version, ErrMalformed, err)
		}
	}
	switch m.ID {
	case "":
		m.ID = mid
	case mid:
	default:
		return Message{}, fmt.Errorf("message %s version %d: %w: names message %q", mid, version, ErrMalformed, m.ID)
	}
	if m.Thread == "" {
		return Message{}, fmt.Errorf("message %s version %d: %w: no thread", mid, version, ErrMalformed)
	}
	m.Version = version // the key is authoritative: edits number from it
	return m, nil
}

func encode(v any) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("encode record: %w", err)
	}
	return b, nil
}
