package seed

import "time"

// Progress is a report on a running seed. Items are threads and messages.
type Progress struct {
	Done, Total int64
	Rate        float64 // items per second so far
	Elapsed     time.Duration
	ETA         time.Duration // estimated time left; 0 when unknown or done
}

// progressReporter calls Options.Progress about once per second. It checks
// the clock as items are written instead of running a ticker goroutine, so
// a report always sees consistent counts.
type progressReporter struct {
	fn          func(Progress)
	clock       func() time.Time
	total       int64
	start, last time.Time
}

func newProgressReporter(o Options, total int64) *progressReporter {
	now := o.Clock()
	return &progressReporter{fn: o.Progress, clock: o.Clock, total: total, start: now, last: now}
}

func (r *progressReporter) tick(done int64) {
	if r.fn == nil {
		return
	}
	if now := r.clock(); now.Sub(r.last) >= time.Second {
		r.last = now
		r.fn(r.progress(done, now))
	}
}

// finish sends the final report and returns the elapsed time.
func (r *progressReporter) finish(done int64) time.Duration {
	now := r.clock()
	if r.fn != nil {
		r.fn(r.progress(done, now))
	}
	return now.Sub(r.start)
}

func (r *progressReporter) progress(done int64, now time.Time) Progress {
	p := Progress{Done: done, Total: r.total, Elapsed: now.Sub(r.start)}
	if secs := p.Elapsed.Seconds(); secs > 0 {
		p.Rate = float64(done) / secs
	}
	if p.Rate > 0 && done < r.total {
		p.ETA = time.Duration(float64(r.total-done) / p.Rate * float64(time.Second))
	}
	return p
}
