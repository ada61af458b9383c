package api

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"

	"github.com/progressdb/progressdb/server/internal/retention"
	"github.com/progressdb/progressdb/server/internal/wire"
)

// retentionStatus answers GET /admin/retention.
func (s *server) retentionStatus(w http.ResponseWriter, r *http.Request) error {
	if s.cluster != nil {
		st, err := s.cluster.RetentionStatus(r)
		if err != nil {
			return err
		}
		return s.writeJSON(w, r, http.StatusOK, st)
	}
	if s.retention == nil {
		return errNoRetention
	}
	st, err := s.retention.Status(r.Context())
	if err != nil {
		return err
	}
	return s.writeJSON(w, r, http.StatusOK, st)
}

// retentionRun answers POST /admin/retention/run {dry_run?}. By default it
// waits for the run and answers its result; ?wait=false starts it in the
// background and answers the run ID.
func (s *server) retentionRun(w http.ResponseWriter, r *http.Request) error {
	if s.retention == nil && s.cluster == nil {
		return errNoRetention
	}
	var req struct {
		DryRun bool `json:"dry_run"`
	}
	if err := s.decodeBody(w, r, &req, true); err != nil {
		return err
	}
	wait, err := boolParam(r, "wait", true)
	if err != nil {
		return err
	}
	run := retention.RunRequest{DryRun: req.DryRun, Trigger: "admin"}
	if s.cluster != nil {
		status, body, err := s.cluster.RetentionRun(r, run, wait)
		if err != nil {
			return err
		}
		return s.writeJSON(w, r, status, body)
	}

	if !wait {
		id, err := s.retention.Start(r.Context(), run)
		if err != nil {
			return err
		}
		return s.writeJSON(w, r, http.StatusAccepted, map[string]string{"run_id": id})
	}

	// A client that hangs up does not stop the run (a proxy timeout must
	// not interrupt a purge); a shutdown does, at the next batch boundary,
	// and the client still gets the interrupted run's result.
	res, err := s.retention.Run(r.Context(), run)
	switch {
	case err == nil:
		return s.writeJSON(w, r, http.StatusOK, res)
	case errors.Is(err, retention.ErrLeaseHeld), errors.Is(err, retention.ErrDisabled), errors.Is(err, retention.ErrPaused):
		return err
	case res.RunID != "":
		return &runFailedError{err: err, result: res}
	default:
		return err
	}
}

// setLegalHold answers PUT /admin/threads/{tid}/legal_hold {legal_hold}.
// Holds are a compliance action, so they sit behind the admin token.
func (s *server) setLegalHold(w http.ResponseWriter, r *http.Request) error {
	tid, err := pathID(r, "tid", "thread id")
	if err != nil {
		return err
	}
	var req struct {
		LegalHold *bool `json:"legal_hold"`
	}
	if err := s.decodeBody(w, r, &req, false); err != nil {
		return err
	}
	if req.LegalHold == nil {
		return badRequest(CodeInvalidField, "legal_hold is required")
	}
	t, err := s.st(r).SetLegalHold(r.Context(), tid, *req.LegalHold)
	if err != nil {
		return err
	}
	s.log.InfoContext(r.Context(), "legal_hold_set", "tid", tid, "legal_hold", *req.LegalHold)
	return s.writeJSON(w, r, http.StatusOK, wire.ThreadOf(t))
}

// setRetentionPause answers PUT /admin/retention/pause {paused, reason?}:
// the database's switch on a single node, the cluster's (every shard's) on
// a cluster node.
func (s *server) setRetentionPause(w http.ResponseWriter, r *http.Request) error {
	if s.cluster != nil && s.pause == nil {
		return errPauseNotInCluster
	}
	if s.pause == nil && s.retention == nil {
		return errNoRetention
	}
	var req struct {
		Paused *bool  `json:"paused"`
		Reason string `json:"reason"`
	}
	if err := s.decodeBody(w, r, &req, false); err != nil {
		return err
	}
	if req.Paused == nil {
		return badRequest(CodeInvalidField, "paused is required")
	}
	if !*req.Paused && req.Reason != "" {
		return badRequest(CodeInvalidField, "reason is only for pausing")
	}
	st, err := s.setPause(r.Context(), *req.Paused, req.Reason)
	if err != nil {
		return err
	}
	s.log.InfoContext(r.Context(), "retention_pause_set", "paused", st.Paused, "reason", st.Reason)
	return s.writeJSON(w, r, http.StatusOK, st)
}

func (s *server) setPause(ctx context.Context, paused bool, reason string) (retention.PauseState, error) {
	if s.pause == nil {
		return s.retention.SetPause(ctx, paused, reason)
	}
	p, err := s.pause.Set(ctx, paused, reason)
	if err != nil {
		return retention.PauseState{}, err
	}
	return retention.PauseStateOf(p), nil
}

// threadPolicy answers GET /admin/threads/{tid}/retention.
func (s *server) threadPolicy(w http.ResponseWriter, r *http.Request) error {
	if s.ret(r) == nil {
		return errNoRetention
	}
	tid, err := pathID(r, "tid", "thread id")
	if err != nil {
		return err
	}
	p, err := s.ret(r).ThreadPolicy(r.Context(), tid)
	if err != nil {
		return err
	}
	return s.writeJSON(w, r, http.StatusOK, p)
}

// setThreadPolicy answers PUT /admin/threads/{tid}/retention {period?,
// message_period?, max_age?, max_messages?}: the body replaces the
// thread's override; absent fields inherit.
func (s *server) setThreadPolicy(w http.ResponseWriter, r *http.Request) error {
	if s.ret(r) == nil {
		return errNoRetention
	}
	tid, err := pathID(r, "tid", "thread id")
	if err != nil {
		return err
	}
	var req struct {
		Period        *string          `json:"period"`
		MessagePeriod *string          `json:"message_period"`
		MaxAge        *string          `json:"max_age"`
		MaxMessages   *json.RawMessage `json:"max_messages"`
	}
	if err := s.decodeBody(w, r, &req, false); err != nil {
		return err
	}
	o := retention.PolicyOverride{Period: req.Period, MessagePeriod: req.MessagePeriod, MaxAge: req.MaxAge}
	if req.MaxMessages != nil {
		n, err := integerField("max_messages", *req.MaxMessages)
		if err != nil {
			return err
		}
		o.MaxMessages = &n
	}
	p, err := s.ret(r).SetThreadPolicy(r.Context(), tid, o)
	if err != nil {
		return err
	}
	return s.writeJSON(w, r, http.StatusOK, p)
}

// clearThreadPolicy answers DELETE /admin/threads/{tid}/retention.
func (s *server) clearThreadPolicy(w http.ResponseWriter, r *http.Request) error {
	if s.ret(r) == nil {
		return errNoRetention
	}
	tid, err := pathID(r, "tid", "thread id")
	if err != nil {
		return err
	}
	if err := s.ret(r).ClearThreadPolicy(r.Context(), tid); err != nil {
		return err
	}
	return noContent(w)
}

// adminThread answers GET /admin/threads/{tid}: the thread whether deleted
// or not, with its hold, for operators (who have the admin token, not
// necessarily the API key) looking at a thread /v1 may hide.
func (s *server) adminThread(w http.ResponseWriter, r *http.Request) error {
	tid, err := pathID(r, "tid", "thread id")
	if err != nil {
		return err
	}
	t, err := s.st(r).GetThread(r.Context(), tid)
	if err != nil {
		return err
	}
	return s.writeJSON(w, r, http.StatusOK, wire.ThreadOf(t))
}

// heldThreads is the answer of GET /admin/legal_holds.
type heldThreads struct {
	Threads []wire.Thread `json:"threads"`
}

// legalHolds answers GET /admin/legal_holds: every thread on legal hold,
// deleted or not, in ID order.
func (s *server) legalHolds(w http.ResponseWriter, r *http.Request) error {
	holds := func(r *http.Request) ([]wire.Thread, error) {
		ts, err := s.store.LegalHolds(r.Context())
		return wire.Threads(ts), err
	}
	if s.cluster != nil {
		holds = s.cluster.LegalHolds
	}
	threads, err := holds(r)
	if err != nil {
		return err
	}
	return s.writeJSON(w, r, http.StatusOK, heldThreads{Threads: threads})
}
