package retention

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/progressdb/progressdb/audit"
	"github.com/progressdb/progressdb/server/pkg/config"
	"github.com/progressdb/progressdb/server/pkg/store"
)

// Policy is a retention policy as the API and CLI show it: durations in
// the environment's syntax ("30d"), max_age "0" and max_messages 0 for off.
type Policy struct {
	Period        string `json:"period"`
	MessagePeriod string `json:"message_period"`
	MaxAge        string `json:"max_age"`
	MaxMessages   int    `json:"max_messages"`
}

// PolicyOverride is a thread's override (spec §3.1): an absent field
// inherits the global value.
type PolicyOverride struct {
	Period        *string `json:"period,omitempty"`
	MessagePeriod *string `json:"message_period,omitempty"`
	MaxAge        *string `json:"max_age,omitempty"`
	MaxMessages   *int    `json:"max_messages,omitempty"`
}

// ThreadPolicy answers GET /admin/threads/{tid}/retention.
type ThreadPolicy struct {
	ThreadID  string         `json:"thread_id"`
	Override  PolicyOverride `json:"override"`
	Effective Policy         `json:"effective"`
}

// causes lists the policies' audit causes in the order they are reported.
var causes = []string{audit.CauseDeleted, audit.CauseMaxAge, audit.CauseMaxMessages}

// reportedCauses lists every cause a run's counts can hold, in the order
// logs give them: the policies', then a subject erasure's (which a
// restore's replay repeats beside them).
var reportedCauses = append(slices.Clip(causes), audit.CauseSubject)

// policy is a resolved policy: what a run applies to one thread.
type policy struct {
	period, messagePeriod, maxAge time.Duration
	maxMessages                   int
}

// globalPolicy is the policy of every thread without an override.
func (r *Runner) globalPolicy() policy {
	return policy{period: r.cfg.Period, messagePeriod: r.cfg.MessagePeriod, maxAge: r.cfg.MaxAge, maxMessages: r.cfg.MaxMessages}
}

// with applies an override: its fields replace the inherited ones.
func (p policy) with(o store.RetentionOverride) policy {
	if o.Period != nil {
		p.period = *o.Period
	}
	if o.MessagePeriod != nil {
		p.messagePeriod = *o.MessagePeriod
	}
	if o.MaxAge != nil {
		p.maxAge = *o.MaxAge
	}
	if o.MaxMessages != nil {
		p.maxMessages = *o.MaxMessages
	}
	return p
}

func (p policy) show() Policy {
	return Policy{
		Period:        config.FormatDuration(p.period),
		MessagePeriod: config.FormatDuration(p.messagePeriod),
		MaxAge:        formatAge(p.maxAge),
		MaxMessages:   p.maxMessages,
	}
}

// formatAge renders a max_age; 0 (off) is written as the environment takes it.
func formatAge(d time.Duration) string {
	if d == 0 {
		return "0"
	}
	return config.FormatDuration(d)
}

func showOverride(o store.RetentionOverride) PolicyOverride {
	var po PolicyOverride
	if o.Period != nil {
		po.Period = ptr(config.FormatDuration(*o.Period))
	}
	if o.MessagePeriod != nil {
		po.MessagePeriod = ptr(config.FormatDuration(*o.MessagePeriod))
	}
	if o.MaxAge != nil {
		po.MaxAge = ptr(formatAge(*o.MaxAge))
	}
	if o.MaxMessages != nil {
		po.MaxMessages = ptr(*o.MaxMessages)
	}
	return po
}

func ptr[T any](v T) *T { return &v }

// LogValue logs the fields an override sets, as written.
func (po PolicyOverride) LogValue() slog.Value {
	var attrs []slog.Attr
	for _, f := range []struct {
		name string
		v    *string
	}{{"period", po.Period}, {"message_period", po.MessagePeriod}, {"max_age", po.MaxAge}} {
		if f.v != nil {
			attrs = append(attrs, slog.String(f.name, *f.v))
		}
	}
	if po.MaxMessages != nil {
		attrs = append(attrs, slog.Int("max_messages", *po.MaxMessages))
	}
	return slog.GroupValue(attrs...)
}

// parseOverride checks an override with the environment's rules (same
// duration syntax, same minimum period and the same words), so a thread
// can never be given a policy the environment would refuse. Errors wrap
// store.ErrInvalidArgument.
func (r *Runner) parseOverride(po PolicyOverride) (store.RetentionOverride, error) {
	var o store.RetentionOverride
	durations := []struct {
		name       string
		in         *string
		out        **time.Duration
		offAllowed bool
	}{
		{"period", po.Period, &o.Period, false},
		{"message_period", po.MessagePeriod, &o.MessagePeriod, false},
		{"max_age", po.MaxAge, &o.MaxAge, true},
	}
	for _, f := range durations {
		if f.in == nil {
			continue
		}
		d, err := config.ParseDuration(*f.in)
		if err != nil {
			return o, fmt.Errorf("%w: %s %q must be a duration such as 90m, 1d12h or 30d", store.ErrInvalidArgument, f.name, *f.in)
		}
		if rule := r.cfg.PeriodRule(d, f.offAllowed); rule != "" {
			return o, fmt.Errorf("%w: %s %q %s", store.ErrInvalidArgument, f.name, *f.in, rule)
		}
		*f.out = &d
	}
	if po.MaxMessages != nil {
		if rule := config.MaxMessagesRule(*po.MaxMessages); rule != "" {
			return o, fmt.Errorf("%w: max_messages %d %s", store.ErrInvalidArgument, *po.MaxMessages, rule)
		}
		o.MaxMessages = ptr(*po.MaxMessages)
	}
	return o, nil
}

// ThreadPolicy returns a thread's override and the policy in force for it.
// store.ErrNotFound for an unknown thread.
func (r *Runner) ThreadPolicy(ctx context.Context, tid string) (ThreadPolicy, error) {
	o, _, err := r.st.RetentionOverride(ctx, tid)
	if err != nil {
		return ThreadPolicy{}, err
	}
	return ThreadPolicy{ThreadID: tid, Override: showOverride(o), Effective: r.globalPolicy().with(o).show()}, nil
}

// SetThreadPolicy replaces a thread's override after checking it. It
// governs every item whose purge has not been confirmed yet, the run going
// included (claims.go); a dry run previews it.
func (r *Runner) SetThreadPolicy(ctx context.Context, tid string, po PolicyOverride) (ThreadPolicy, error) {
	o, err := r.parseOverride(po)
	if err != nil {
		return ThreadPolicy{}, err
	}
	if err := r.st.SetRetentionOverride(ctx, tid, o); err != nil {
		return ThreadPolicy{}, err
	}
	r.log.Info("retention_policy_set", "tid", tid, "override", showOverride(o))
	return ThreadPolicy{ThreadID: tid, Override: showOverride(o), Effective: r.globalPolicy().with(o).show()}, nil
}

// ClearThreadPolicy removes a thread's override: it inherits the global
// policy again.
func (r *Runner) ClearThreadPolicy(ctx context.Context, tid string) error {
	if err := r.st.DeleteRetentionOverride(ctx, tid); err != nil {
		return err
	}
	r.log.Info("retention_policy_cleared", "tid", tid)
	return nil
}

// policySnapshot is the policy a run applies: the global policy, the
// overrides read once at its start (from the override index:
// O(overrides)), those that could not be read, and what the run learnt of
// the threads whose live messages it looked at. A claim is re-checked
// against the overrides as they are later (claims.go).
type policySnapshot struct {
	global    policy
	overrides map[string]store.RetentionOverride
	bad       map[string]string // thread → why its override cannot be read
	threads   map[string]*liveThread
}

// loadPolicy reads the overrides; it returns the snapshot and the number
// of threads with an override, for the audit header.
func loadPolicy(ctx context.Context, st *store.Store, global policy) (*policySnapshot, int, error) {
	p := &policySnapshot{global: global, overrides: make(map[string]store.RetentionOverride),
		bad: make(map[string]string), threads: make(map[string]*liveThread)}
	n := 0
	err := st.ScanRetentionOverrides(ctx, func(e store.OverrideEntry) error {
		n++
		if e.Err != nil {
			// An override that cannot be read might have been longer than
			// the global policy: nothing of the thread is purged.
			p.bad[e.ThreadID] = e.Err.Error()
			return nil
		}
		p.overrides[e.ThreadID] = e.Override
		return nil
	})
	return p, n, err
}

// of is the policy in force for thread tid in this run.
func (p *policySnapshot) of(tid string) policy { return p.global.with(p.overrides[tid]) }

// overridden lists the threads whose override sets the field pick reads,
// in ID order (a run is reproducible).
func (p *policySnapshot) overridden(pick func(store.RetentionOverride) bool) []string {
	var out []string
	for tid, o := range p.overrides {
		if pick(o) {
			out = append(out, tid)
		}
	}
	slices.Sort(out)
	return out
}

// ownsField reports whether tid's override sets the field pick reads.
func (p *policySnapshot) ownsField(tid string, pick func(store.RetentionOverride) bool) bool {
	o, ok := p.overrides[tid]
	return ok && pick(o)
}

// Fields of an override, for overridden and ownsField.
func setsPeriods(o store.RetentionOverride) bool     { return o.Period != nil || o.MessagePeriod != nil }
func setsMaxAge(o store.RetentionOverride) bool      { return o.MaxAge != nil }
func setsMaxMessages(o store.RetentionOverride) bool { return o.MaxMessages != nil }

// liveThread is what a run knows of a thread whose live messages a policy
// may purge; read once per run.
type liveThread struct {
	skip   bool            // gone, deleted (kept whole for its restore window) or unreadable
	hold   bool            // on legal hold: loses nothing
	held   map[string]bool // causes for which the hold was recorded
	reason string          // why an unreadable thread is skipped
}

// liveThread reads (once) what policies need of thread tid.
func (p *policySnapshot) liveThread(ctx context.Context, st *store.Store, tid string) (*liveThread, error) {
	if lt, ok := p.threads[tid]; ok {
		return lt, nil
	}
	lt := &liveThread{}
	t, err := st.GetThread(ctx, tid)
	switch {
	case errors.Is(err, store.ErrNotFound):
		lt.skip = true
	case errors.Is(err, store.ErrMalformed):
		lt.skip, lt.reason = true, "malformed thread record: "+err.Error()
	case err != nil:
		return nil, err
	default:
		lt.skip, lt.hold = t.Deleted, t.LegalHold
	}
	if why, bad := p.bad[tid]; bad {
		lt.skip, lt.reason = true, "malformed retention override: "+why
	}
	p.threads[tid] = lt
	return lt, nil
}
