package retention

import (
	"log/slog"
	"testing"

	"github.com/progressdb/progressdb/audit"
)

// A run's log lines count every cause its items had: a restore's replay
// repeats subject erasures beside the policies' purges, and a breakdown
// that left them out summed to less than the run's total (180 of 181).
func TestRunLogsCountEveryCause(t *testing.T) {
	all := []string{audit.CauseDeleted, audit.CauseMaxAge, audit.CauseMaxMessages, audit.CauseSubject}
	counts, byCause := map[string]int64{}, map[string]CauseCounts{}
	for i, c := range all {
		counts[c] = int64(i + 1)
		byCause[c] = CauseCounts{Eligible: int64(i + 1), Purged: int64(i + 1)}
	}
	for name, v := range map[string]slog.Value{"countLog": countLog(counts), "causeLog": causeLog(byCause)} {
		got := map[string]bool{}
		for _, a := range v.Group() {
			got[a.Key] = true
		}
		for _, c := range all {
			if !got[c] {
				t.Errorf("%s leaves out %s: %v", name, c, v)
			}
		}
	}
}
