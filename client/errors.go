package client

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// APIError is every answer of the server outside 2xx: its status and the
// code of the Error schema, which callers branch on (never on Message).
// Use errors.As, or the helpers CodeOf and HasCode.
type APIError struct {
	// Status is the HTTP status code.
	Status int
	// Code is one of the ErrorCode constants ("" when the answer was not
	// the server's JSON, e.g. a proxy's page).
	Code ErrorCode
	// Message is the server's text, for people.
	Message string
	// RetryAfter is the server's Retry-After, 0 when absent.
	RetryAfter time.Duration
	// RequestID is the answer's X-Request-ID, the key of the server's log
	// lines about the request.
	RequestID string
	// Detail is the whole error answer: Holder (lease_held), Paused
	// (retention_paused), Result (run_failed).
	Detail *Error
}

func (e *APIError) Error() string {
	if e.Code == "" {
		return fmt.Sprintf("progressdb: HTTP %d: %s", e.Status, e.Message)
	}
	return fmt.Sprintf("progressdb: %s (HTTP %d): %s", e.Code, e.Status, e.Message)
}

// CodeOf returns the code of the APIError in err's chain, or "" when
// there is none (a network error, a canceled context).
func CodeOf(err error) ErrorCode {
	var e *APIError
	if errors.As(err, &e) {
		return e.Code
	}
	return ""
}

// HasCode reports whether err's chain holds an APIError with one of codes.
func HasCode(err error, codes ...ErrorCode) bool {
	c := CodeOf(err)
	if c == "" {
		return false
	}
	for _, want := range codes {
		if c == want {
			return true
		}
	}
	return false
}

// IsNotFound reports whether err is the server's not_found.
func IsNotFound(err error) bool { return HasCode(err, ErrorCodeNotFound) }

// IsRetryable reports whether err is an answer the server says may be
// tried again later (503, 421), after the client's own retries ran out.
func IsRetryable(err error) bool {
	var e *APIError
	return errors.As(err, &e) && retryableStatus(e.Status)
}

// newAPIError reads an answer outside 2xx. A body that is not the Error
// schema keeps its first line as the message.
func newAPIError(res *http.Response, body []byte) *APIError {
	e := &APIError{Status: res.StatusCode, RequestID: res.Header.Get("X-Request-ID")}
	e.RetryAfter, _ = retryAfter(res.Header, time.Now())
	var detail Error
	if json.Unmarshal(body, &detail) == nil && detail.Code != "" {
		e.Code, e.Message, e.Detail = detail.Code, detail.Error, &detail
		return e
	}
	msg, _, _ := strings.Cut(strings.TrimSpace(string(body)), "\n")
	if msg == "" {
		msg = http.StatusText(res.StatusCode)
	}
	e.Message = msg
	return e
}

// retryAfter reads Retry-After: seconds, or an HTTP date.
func retryAfter(h http.Header, now time.Time) (time.Duration, bool) {
	v := strings.TrimSpace(h.Get("Retry-After"))
	if v == "" {
		return 0, false
	}
	if n, err := strconv.ParseInt(v, 10, 64); err == nil && n >= 0 {
		// Past a day it is no pause worth waiting for; the cap keeps the
		// Duration from overflowing.
		return time.Duration(min(n, 86400)) * time.Second, true
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(t.Sub(now), 0), true
	}
	return 0, false
}
