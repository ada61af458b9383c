package cli

import (
	"fmt"
	"io"
	"log/slog"
	"math"
	"strings"
	"sync"
	"time"

	"github.com/progressdb/progressdb/audit"
	"github.com/progressdb/progressdb/server/internal/logging"
	"github.com/progressdb/progressdb/server/internal/retention"
	"github.com/progressdb/progressdb/server/pkg/config"
	"github.com/progressdb/progressdb/server/pkg/keystore"
	"github.com/progressdb/progressdb/server/pkg/store"
)

// progressBar draws a run's progress on the last line of a terminal
// (stderr). Log lines pass through it: it clears its line, writes them,
// and draws itself again below, so the two never mix.
type progressBar struct {
	mu   sync.Mutex
	w    io.Writer
	fd   uintptr
	line string // what is drawn now, "" when nothing is
}

// barWidth is the bar's length in cells; the line stays under 80 columns.
const barWidth = 30

// barWidthByCause is the bar's length when the line also breaks the work
// down by cause, under causeLabels.
const barWidthByCause = 12

var causeLabels = []struct{ cause, label string }{
	{audit.CauseDeleted, "del"}, {audit.CauseMaxAge, "age"}, {audit.CauseMaxMessages, "cap"},
}

// newProgressBar returns a bar over w, or nil when w is not a terminal
// (logs then carry the progress; nobody watches a redrawn line in a file).
func newProgressBar(w io.Writer) *progressBar {
	f, ok := w.(interface{ Fd() uintptr })
	if !ok || !logging.IsTerminal(w) {
		return nil
	}
	return &progressBar{w: w, fd: f.Fd()}
}

// barAndLogger builds the configured logger of a long command and, on a
// terminal, the bar it draws its progress with (nil elsewhere: the
// logger's periodic progress lines are the summaries). Log lines pass
// through the bar. An error is the sink's, a configuration error.
func (e env) barAndLogger(cfg config.Config) (*progressBar, *slog.Logger, *logging.Sink, error) {
	bar := newProgressBar(e.stderr)
	var logTo io.Writer // nil: e.stderr
	if bar != nil {
		logTo = bar
	}
	logger, closer, err := e.logger(cfg, logTo)
	return bar, logger, closer, err
}

// Fd lets the logger see the terminal underneath (colours, text format).
func (b *progressBar) Fd() uintptr { return b.fd }

// Write passes a log line through, keeping the bar below it.
func (b *progressBar) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.erase()
	n, err := b.w.Write(p)
	b.draw()
	return n, err
}

// update redraws the bar with a run's progress.
func (b *progressBar) update(p retention.Progress) { b.show(renderProgress(p)) }

// show redraws the bar as line; a nil bar does nothing.
func (b *progressBar) show(line string) {
	if b == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.erase()
	b.line = line
	b.draw()
}

// clear removes the bar for good; a nil bar does nothing.
func (b *progressBar) clear() {
	if b == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.erase()
	b.line = ""
}

func (b *progressBar) erase() {
	if b.line != "" {
		fmt.Fprint(b.w, "\r\033[K") // to the line's start, erase to its end
	}
}

func (b *progressBar) draw() {
	if b.line != "" {
		fmt.Fprint(b.w, b.line)
	}
}

// renderProgress is one line: a bar of done/due when due is known, the
// counts, the rate and the time left.
func renderProgress(p retention.Progress) string {
	var sb strings.Builder
	byCause := len(p.DueByCause) > 1
	if p.Due > 0 {
		width := int64(barWidth)
		if byCause {
			width = barWidthByCause
		}
		drawBar(&sb, p.Done, p.Due, width)
	} else {
		fmt.Fprintf(&sb, "%d looked at", p.Done)
	}
	// With more than one cause due, each one's share (the bar alone would
	// hide a cause that has barely started), short, on a shorter bar.
	if byCause {
		for _, c := range causeLabels {
			if due, ok := p.DueByCause[c.cause]; ok {
				fmt.Fprintf(&sb, "  %s %d/%d", c.label, p.DoneByCause[c.cause], due)
			}
		}
	}
	fmt.Fprintf(&sb, "  %d purged", p.Purged)
	drawTail(&sb, p.Erase, p.Rate, p.Left)
	return sb.String()
}

// renderEncrypt is `keys encrypt-existing`'s line: a bar of the threads
// passed, the records sealed, the rate and the time left, then the erase
// step.
func renderEncrypt(p retention.EncryptProgress) string {
	var sb strings.Builder
	drawBar(&sb, p.Done, p.Total, barWidth)
	fmt.Fprintf(&sb, " threads  %d sealed", p.Records)
	drawTail(&sb, p.Erase, p.Rate, p.Left)
	return sb.String()
}

// drawBar draws done of total as a bar width cells long and the counts.
func drawBar(sb *strings.Builder, done, total, width int64) {
	if total <= 0 {
		fmt.Fprintf(sb, "%d", done)
		return
	}
	filled := int(min(done, total) * width / total)
	fmt.Fprintf(sb, "[%s%s] %d/%d", strings.Repeat("#", filled), strings.Repeat(".", int(width)-filled), done, total)
}

// drawTail ends a line with where the erase step is once it has begun
// (the work before it is over), else the rate and the time left.
func drawTail(sb *strings.Builder, e *store.EraseProgress, rate float64, left time.Duration) {
	if e != nil {
		fmt.Fprintf(sb, "  erasing: %s", e.Step)
		if e.Step == store.EraseCompact {
			fmt.Fprintf(sb, " %d/%d ranges", e.Done, e.Total)
		}
		return
	}
	fmt.Fprintf(sb, "  %.0f/s", rate)
	if left > 0 {
		fmt.Fprintf(sb, "  %s left", left.Round(time.Second))
	}
}

// summaryEvery spaces the progress lines a long command logs when no
// terminal shows its bar (a retention run's are retention's own).
const summaryEvery = 10 * time.Second

// rotateProgress shows `keys rotate-kek`'s progress: on the bar when
// there is one, else as a log line about every summaryEvery and one per
// step of the erase. Values re-wrapped of the total, rate, time left.
func rotateProgress(bar *progressBar, logger *slog.Logger) func(keystore.RewrapProgress) {
	start := time.Now()
	var lastLog time.Time
	return func(p keystore.RewrapProgress) {
		rate, left := rateAndLeft(start, int64(p.Done), int64(p.Total))
		if bar != nil {
			var sb strings.Builder
			drawBar(&sb, int64(p.Done), int64(p.Total), barWidth)
			sb.WriteString(" keys")
			drawTail(&sb, p.Erase, rate, left)
			bar.show(sb.String())
			return
		}
		switch {
		case p.Erase != nil:
			if p.Erase.Step != store.EraseCompact || p.Erase.Done == 0 {
				logger.Info("keys_rotate_erase_progress", "step", p.Erase.Step, "ranges_done", p.Erase.Done, "ranges", p.Erase.Total)
			}
		case p.Done == 0 || p.Done == p.Total || time.Since(lastLog) >= summaryEvery:
			lastLog = time.Now()
			attrs := []any{"done", p.Done, "total", p.Total, "rate_per_sec", math.Round(rate*10) / 10}
			if left > 0 {
				attrs = append(attrs, "time_left", left.Round(time.Second))
			}
			logger.Info("keys_rotate_progress", attrs...)
		}
	}
}

// rateAndLeft is the rate of done since start and the time left to total
// at that rate (0 when unknown).
func rateAndLeft(start time.Time, done, total int64) (float64, time.Duration) {
	elapsed := time.Since(start).Seconds()
	if elapsed <= 0 || done <= 0 {
		return 0, 0
	}
	rate := float64(done) / elapsed
	if total <= done {
		return rate, 0
	}
	return rate, time.Duration(float64(total-done) / rate * float64(time.Second))
}
