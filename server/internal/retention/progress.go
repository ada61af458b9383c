package retention

import (
	"log/slog"
	"maps"
	"math"
	"time"

	"github.com/progressdb/progressdb/server/pkg/store"
)

// meter is a run's progress: the index entries due when it started, by
// cause, and those the sources have looked at since. It times the
// progress lines of long runs and the calls of a RunRequest's Progress.
type meter struct {
	start  time.Time
	report func(Progress) // RunRequest.Progress; nil: none

	// due is -1 when it could not be counted; dueBy and seenBy split due
	// and seen by cause, the cause of the source scanning now.
	due, seen     int64
	dueBy, seenBy map[string]int64
	cause         string

	lastLog, lastReport time.Time
}

func newMeter(report func(Progress)) *meter { return &meter{report: report} }

// begin starts the meter at the run's start.
func (m *meter) begin(start time.Time) { m.start, m.lastLog = start, start }

// counted sets what is due, by cause; unknown (due -1) when a count failed.
func (m *meter) counted(due int64, by map[string]int64) { m.due, m.dueBy = due, by }

// seen1 counts one index entry looked at, for the cause being scanned.
func (m *meter) seen1() {
	m.seen++
	if m.seenBy == nil {
		m.seenBy = make(map[string]int64)
	}
	m.seenBy[m.cause]++
}

// at is the progress at now: entries looked at of those due, their rate,
// and the time left at that rate; purged is what the run took.
func (m *meter) at(now time.Time, purged int64) Progress {
	p := Progress{Done: m.seen, Due: m.due, Purged: purged}
	if m.due >= 0 {
		p.DueByCause, p.DoneByCause = maps.Clone(m.dueBy), maps.Clone(m.seenBy)
	}
	if elapsed := now.Sub(m.start).Seconds(); elapsed > 0 {
		p.Rate = float64(m.seen) / elapsed
	}
	if p.Rate > 0 && p.Due > p.Done {
		p.Left = time.Duration(float64(p.Due-p.Done) / p.Rate * float64(time.Second))
	}
	return p
}

// reportDue says whether the caller's Progress is due a call at now.
func (m *meter) reportDue(now time.Time) bool {
	return m.report != nil && now.Sub(m.lastReport) >= progressReportEvery
}

// send calls the caller's Progress.
func (m *meter) send(now time.Time, p Progress) {
	if m.report != nil {
		m.lastReport = now
		m.report(p)
	}
}

// logDue says whether a progress line is due at now, and starts the next
// interval when it is.
func (m *meter) logDue(now time.Time) bool {
	if now.Sub(m.lastLog) < progressEvery {
		return false
	}
	m.lastLog = now
	return true
}

// countLog renders per-cause counts in the fixed cause order.
func countLog(m map[string]int64) slog.Value {
	var attrs []slog.Attr
	for _, c := range reportedCauses {
		if v, ok := m[c]; ok {
			attrs = append(attrs, slog.Int64(c, v))
		}
	}
	return slog.GroupValue(attrs...)
}

// looked counts one entry a source looked at, reports progress, and says
// whether the source should go on.
func (rn *run) looked() error {
	rn.meter.seen1()
	rn.progress()
	if rn.done() {
		return store.ErrStopScan
	}
	return nil
}

// progress logs how a long run is going, about every progressEvery, and
// reports it to the caller's Progress more often.
func (rn *run) progress() {
	now := rn.r.now()
	if rn.meter.reportDue(now) {
		rn.reportProgress(now)
	}
	if !rn.meter.logDue(now) {
		return
	}
	p := rn.meter.at(now, int64(rn.claims.taken))
	t := rn.journal.tally()
	attrs := []any{"run_id", rn.id, "done", p.Done, "due", p.Due, "done_by_cause", countLog(p.DoneByCause),
		"due_by_cause", countLog(p.DueByCause), "items_done", p.Purged,
		"scanned", t.Scanned, "keys_deleted", t.KeysDeleted, "rate_per_sec", math.Round(p.Rate*10) / 10,
		"by_cause", causeLog(rn.journal.byCause)}
	if p.Left > 0 {
		attrs = append(attrs, "time_left", p.Left.Round(time.Second))
	}
	rn.r.log.Info("retention_run_progress", attrs...)
}

// eraseProgress logs each step of the erase step and shows where it is to
// the caller's Progress: once the scans are over the bar would otherwise sit
// at due/due for as long as the erase takes.
func (rn *run) eraseProgress(ep store.EraseProgress) {
	now := rn.r.now()
	newStep := ep.Step != store.EraseCompact || ep.Done == 0
	if newStep {
		rn.r.log.Info("retention_erase_progress", "run_id", rn.id, "step", ep.Step, "ranges_done", ep.Done, "ranges", ep.Total)
	}
	if newStep || rn.meter.reportDue(now) {
		p := rn.meter.at(now, int64(rn.claims.taken))
		p.Erase = &ep
		rn.meter.send(now, p)
	}
}

func (rn *run) reportProgress(now time.Time) {
	rn.meter.send(now, rn.meter.at(now, int64(rn.claims.taken)))
}
