package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	apispec "github.com/progressdb/progressdb/api"
	"github.com/progressdb/progressdb/server/internal/retention"
	"github.com/progressdb/progressdb/server/pkg/store"
)

// The closed list of codes is the enum of the Error schema, in the same
// order, and each code is explained there.
func TestErrorCodesAreTheDescriptions(t *testing.T) {
	var doc struct {
		Components struct {
			Schemas struct {
				Error struct {
					Required   []string `yaml:"required"`
					Properties struct {
						Code struct {
							Enum        []string `yaml:"enum"`
							Description string   `yaml:"description"`
						} `yaml:"code"`
					} `yaml:"properties"`
				} `yaml:"Error"`
			} `yaml:"schemas"`
		} `yaml:"components"`
	}
	if err := yaml.Unmarshal(apispec.OpenAPI(), &doc); err != nil {
		t.Fatal(err)
	}
	e := doc.Components.Schemas.Error
	if !slices.Contains(e.Required, "code") {
		t.Errorf("%s: components.schemas.Error does not require code", specFile)
	}
	var codes []string
	for _, c := range Codes() {
		codes = append(codes, string(c))
		if !strings.Contains(e.Properties.Code.Description, "- `"+string(c)+"`: ") {
			t.Errorf("%s: the Error schema's code description does not explain %s", specFile, c)
		}
	}
	if !slices.Equal(codes, e.Properties.Code.Enum) {
		t.Errorf("%s: components.schemas.Error.properties.code.enum is\n  %v\nwant the server's codes (api.Codes)\n  %v", specFile, e.Properties.Code.Enum, codes)
	}
}

// Every class of error the handlers return maps to its status and code by
// value (classify is the one place that does it).
func TestClassifyGivesEachErrorItsCode(t *testing.T) {
	wrap := func(err error) error { return fmt.Errorf("doing something: %w", err) }
	for _, c := range []struct {
		err    error
		status int
		code   Code
	}{
		{wrap(store.ErrNotFound), 404, CodeNotFound},
		{wrap(store.ErrInvalidID), 400, CodeInvalidID},
		{wrap(store.ErrInvalidCursor), 400, CodeInvalidCursor},
		{wrap(store.ErrInvalidArgument), 400, CodeInvalidField},
		{wrap(store.ErrExists), 409, CodeAlreadyExists},
		{wrap(store.ErrPurgeInProgress), 409, CodePurgeInProgress},
		{wrap(store.ErrIDUnavailable), 409, CodeIDUnavailable},
		{wrap(store.ErrLegalHold), 409, CodeLegalHold},
		{wrap(store.ErrFenced), 503, CodeShardUnavailable},
		{wrap(store.ErrNotLeader), 503, CodeShardUnavailable},
		{wrap(store.ErrProposalDropped), 503, CodeShardUnavailable},
		{wrap(fmt.Errorf("%w: %w", store.ErrAmbiguous, context.DeadlineExceeded)), 503, CodeShardUnavailable},
		{wrap(store.ErrMalformed), 500, CodeInternal},
		{wrap(&retention.LeaseHeldError{Holder: retention.LeaseInfo{Owner: "other"}}), 409, CodeLeaseHeld},
		{wrap(retention.ErrLeaseHeld), 409, CodeLeaseHeld},
		{wrap(retention.ErrPaused), 409, CodeRetentionPaused},
		{wrap(retention.ErrDisabled), 409, CodeRetentionDisabled},
		{wrap(retention.ErrClosed), 503, CodeUnavailable},
		{wrap(context.Canceled), 503, CodeUnavailable},
		{wrap(context.DeadlineExceeded), 503, CodeUnavailable},
		{&runFailedError{err: errors.New("disk full"), result: retention.Result{RunID: "r1"}}, 500, CodeRunFailed},
		{errors.New("anything else"), 500, CodeInternal},
		{errRouteNotFound, 404, CodeRouteNotFound},
		{errMissingToken, 401, CodeUnauthorized},
		{errWrongToken, 401, CodeUnauthorized},
		{errAdminDisabled, 403, CodeAdminDisabled},
		{errNoRetention, 503, CodeNotConfigured},
		{errNoBackups, 503, CodeNotConfigured},
		{errPauseNotInCluster, 503, CodeNotConfigured},
		{errNotInCluster, 404, CodeNotACluster},
		{bodyTooLarge(10), 413, CodeBodyTooLarge},
		{statusError{421, CodeMisdirected}, 421, CodeMisdirected},
		{wrap(statusError{503, CodeShardUnavailable}), 503, CodeShardUnavailable},
	} {
		status, body := classify(c.err)
		if status != c.status || body.Code != c.code || body.Error == "" {
			t.Errorf("%v: %d %+v, want %d %s", c.err, status, body, c.status, c.code)
		}
		if !slices.Contains(Codes(), body.Code) {
			t.Errorf("%v: code %q is not in the list", c.err, body.Code)
		}
	}
}

// statusError is a StatusError as the cluster's router raises them.
type statusError struct {
	status int
	code   Code
}

func (e statusError) Error() string   { return http.StatusText(e.status) }
func (e statusError) HTTPStatus() int { return e.status }
func (e statusError) ErrorCode() Code { return e.code }

// Every class of error, answered by a real server, carries its code (and
// the description, checked on every answer, lists it).
func TestErrorAnswersCarryTheirCode(t *testing.T) {
	e := newEnv(t, Options{APIKey: "key"})
	e.bearer = "key"
	e.createThread(t, "t1")
	e.appendMessage(t, "t1", "m1", `1`)
	big := `{"title":"` + strings.Repeat("x", DefaultMaxBodyBytes) + `","author":"ann"}`
	for _, c := range []struct {
		method, path, body string
		auth               string // "-": none
		status             int
		code               Code
	}{
		{"GET", "/v1/threads/bad:id", "", "", 400, CodeInvalidID},
		{"GET", "/v1/threads//messages", "", "", 400, CodeInvalidID},
		{"POST", "/v1/threads", `{"id":"a:b","title":"x","author":"y"}`, "", 400, CodeInvalidID},
		{"GET", "/v1/threads?cursor=zzz", "", "", 400, CodeInvalidCursor},
		{"POST", "/v1/threads", `{"title":"x"`, "", 400, CodeInvalidJSON},
		{"POST", "/v1/threads", `{"title":"x","author":"y","color":"red"}`, "", 400, CodeInvalidJSON},
		{"POST", "/v1/threads", `[1]`, "", 400, CodeInvalidJSON},
		{"POST", "/v1/threads", "{\"title\":\"\xff\",\"author\":\"y\"}", "", 400, CodeInvalidJSON},
		{"POST", "/v1/threads", `{"author":"y"}`, "", 400, CodeInvalidField},
		{"POST", "/v1/threads/t1/messages", `{"author":"y","body":{"n":9007199254740993}}`, "", 400, CodeInvalidField},
		{"GET", "/v1/threads?limit=0", "", "", 400, CodeInvalidParameter},
		{"GET", "/v1/threads/t1?include_deleted=maybe", "", "", 400, CodeInvalidParameter},
		{"GET", "/v1/threads", "", "-", 401, CodeUnauthorized},
		{"GET", "/v1/threads", "", "Bearer wrong", 401, CodeUnauthorized},
		{"GET", "/admin/retention", "", "", 403, CodeAdminDisabled},
		{"GET", "/v1/threads/nope", "", "", 404, CodeNotFound},
		{"GET", "/v1/threads/t1/messages/nope", "", "", 404, CodeNotFound},
		{"GET", "/v2/anything", "", "", 404, CodeRouteNotFound},
		{"PUT", "/v1/threads", "", "", 405, CodeMethodNotAllowed},
		{"POST", "/v1/threads", `{"id":"t1","title":"x","author":"y"}`, "", 409, CodeAlreadyExists},
		{"POST", "/v1/threads/t1/messages", `{"id":"m1","author":"y","body":1}`, "", 409, CodeIDUnavailable},
		{"POST", "/v1/threads", big, "", 413, CodeBodyTooLarge},
	} {
		auth := "Bearer key"
		switch c.auth {
		case "-":
			auth = ""
		case "":
		default:
			auth = c.auth
		}
		r := e.send(t, c.method, c.path, c.body, auth)
		if r.status != c.status {
			t.Errorf("%s %s: %d, want %d: %s", c.method, c.path, r.status, c.status, r.body)
			continue
		}
		if code := r.errorCode(t); code != c.code {
			t.Errorf("%s %s: code %q, want %q: %s", c.method, c.path, code, c.code, r.body)
		}
		if c.status == 413 && !strings.Contains(r.errorText(t), fmt.Sprint(DefaultMaxBodyBytes)) {
			t.Errorf("413 does not name the limit (%d bytes): %s", DefaultMaxBodyBytes, r.body)
		}
	}
}

// noLease is a replicated store's group in which this replica does not
// lead.
type noLease struct{}

func (noLease) Lease() uint64 { return 0 }
func (noLease) Propose(store.Command) <-chan error {
	panic("a write was proposed without a lease")
}

// A replicated shard's store that does not lead refuses a write: 503
// naming the shard as unavailable, with Retry-After (which both clients
// honour), and nothing written.
func TestNotLeaderAnswersRetryAfter(t *testing.T) {
	e := newEnv(t, Options{})
	e.store.Replicate(noLease{})
	r := e.expect(t, "POST", "/v1/threads", `{"id":"t1","title":"x","author":"y"}`, 503)
	if r.header.Get("Retry-After") == "" || !strings.Contains(string(r.body), string(CodeShardUnavailable)) {
		t.Fatalf("answered %v %s", r.header, r.body)
	}
	e.store.Replicate(nil)
	e.expect(t, "GET", "/v1/threads/t1", "", 404)
}
