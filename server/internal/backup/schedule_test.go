package backup

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// backupAt makes a backup into the creator's folder as if made at t.
func (w *world) backupAt(t time.Time) (Manifest, string) {
	w.t.Helper()
	old := w.creator.now
	w.creator.now = func() time.Time { return t }
	defer func() { w.creator.now = old }()
	m, path, err := w.creator.CreateInPath(context.Background())
	if err != nil {
		w.t.Fatal(err)
	}
	return m, path
}

// A server started with BACKUP_PATH writes backups on its schedule (here
// every second), through the creator the admin API uses, counts them in
// the metrics, and deletes at start what expired while it was down.
func TestSchedulerWritesBackups(t *testing.T) {
	w := newWorld(t, true)
	w.thread("t1", 3)
	reg := prometheus.NewRegistry()
	w.creator.metrics = NewMetrics(reg)
	_, expired := w.backupAt(time.Now().Add(-40 * day))
	// The gauge starts from the newest backup in the folder, not 0.
	keptAt := time.Now().Add(-10 * day).Truncate(time.Second)
	_, kept := w.backupAt(keptAt)
	w.creator.metrics = NewMetrics(prometheus.NewRegistry())

	s, err := NewScheduler(SchedulerOptions{Creator: w.creator, Spec: "@every 1s", Keep: 30 * day,
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	runs := make(chan RunResult, 10)
	s.done = func(r RunResult) { runs <- r }
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s.Start(ctx)
	if got := value(t, w.creator.metrics.LastSuccess); got != float64(keptAt.Unix()) {
		t.Errorf("last success at start %v, want the newest backup's time %d", got, keptAt.Unix())
	}
	if got := value(t, w.creator.metrics.Interval); got != 1 {
		t.Errorf("interval %v s, want 1", got)
	}
	var res RunResult
	select {
	case res = <-runs:
	case <-time.After(time.Minute):
		t.Fatal("no scheduled backup within a minute")
	}
	s.Stop()
	if res.Err != nil {
		t.Fatalf("scheduled run: %v", res.Err)
	}
	if filepath.Dir(res.File) != w.creator.Path() || res.Manifest.Threads != 1 || res.Manifest.Messages != 3 {
		t.Fatalf("scheduled backup %s holds %d threads, %d messages", res.File, res.Manifest.Threads, res.Manifest.Messages)
	}
	rep, err := Verify(ctx, res.File, w.key.Public().(ed25519.PublicKey), w.dir)
	if err != nil || !rep.Valid {
		t.Fatalf("scheduled backup does not verify: %v %v", err, rep.Problems)
	}
	if _, err := os.Stat(expired); !os.IsNotExist(err) {
		t.Errorf("backup older than KEEP still there: %v", err)
	}
	if _, err := os.Stat(kept); err != nil {
		t.Errorf("backup younger than KEEP: %v", err)
	}
	if got := value(t, w.creator.metrics.Total.WithLabelValues("success")); got < 1 {
		t.Errorf("progressdb_backup_total{result=success} = %v", got)
	}
	if got := value(t, w.creator.metrics.LastSuccess); got <= float64(keptAt.Unix()) {
		t.Errorf("last success %v not moved by the scheduled backup", got)
	}
	if got := value(t, w.creator.metrics.Interval); got != 0 {
		t.Errorf("interval %v after Stop, want 0", got)
	}
	noLeftovers(t, w)
}

// Expire deletes the backups older than KEEP and the partial archives a
// killed backup left long ago, and nothing else in the folder: not a file
// named like a backup that is not one, not a backup whose manifest names
// another ID, not a link, not a folder, not a partial archive being
// written now.
func TestExpireDeletesOnlyOldBackups(t *testing.T) {
	w := newWorld(t, false)
	w.thread("t1", 1)
	now := time.Now().UTC()
	_, old := w.backupAt(now.Add(-31 * day))
	_, older := w.backupAt(now.Add(-400 * day))
	_, young := w.backupAt(now.Add(-29 * day))
	_, fresh := w.backupAt(now)
	dir := w.creator.Path()
	longAgo := now.Add(-60 * day)

	write := func(name string, data []byte) string {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(p, longAgo, longAgo); err != nil {
			t.Fatal(err)
		}
		return p
	}
	oldData, err := os.ReadFile(old)
	if err != nil {
		t.Fatal(err)
	}
	foreign := []string{
		write("notes.txt", []byte("keep me")),
		write("progressdb-backup-20200101T000000Z-aaaaaaaaaaaa.tar", []byte("not a tar")),
		// An old backup under another backup's name: its manifest disagrees.
		write("progressdb-backup-20200101T000000Z-bbbbbbbbbbbb.tar", oldData),
		write("progressdb-backup-20200101T000000Z-cccccccccccc.tar.gz", oldData),
		write(".progressdb-backup-20200101T000000Z-dddddddddddd.tar.tmp-x", []byte("not ours")),
	}
	linked := filepath.Join(dir, "progressdb-backup-20200101T000000Z-eeeeeeeeeeee.tar")
	outside := filepath.Join(w.dir, "outside.tar")
	if err := os.WriteFile(outside, oldData, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, linked); err != nil {
		t.Fatal(err)
	}
	folder := filepath.Join(dir, "progressdb-backup-20200101T000000Z-ffffffffffff.tar")
	if err := os.Mkdir(folder, 0o700); err != nil {
		t.Fatal(err)
	}
	foreign = append(foreign, linked, outside, folder)
	// A compressed backup, as a stream received by backup create, and one
	// left under the name it is received under by a killed backup create.
	var zst bytes.Buffer
	zm, err := w.creator.write(context.Background(), &zst, true, newID(), now.Add(-40*day))
	if err != nil {
		t.Fatal(err)
	}
	oldZst := write(FileName(zm.CreatedAt, zm.BackupID), zst.Bytes())
	incoming := write("progressdb-backup-incoming.tar", oldData)
	stale := write(".progressdb-backup-20200101T000000Z-111111111111.tar.zst.tmp-123", []byte("partial"))
	staleIncoming := write(".progressdb-backup-incoming.tar.tmp-77", []byte("partial"))
	// What a backup killed while it writes leaves (durable's temporary name).
	staleHex := write(".progressdb-backup-20200101T000000Z-333333333333.tar.tmp-0a1b2c3d4e5f6a7b", []byte("partial"))
	writing := filepath.Join(dir, ".progressdb-backup-20260101T000000Z-222222222222.tar.tmp-456")
	if err := os.WriteFile(writing, []byte("partial"), 0o600); err != nil {
		t.Fatal(err)
	}

	got, err := Expire(dir, 30*day, now, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	var deleted []string
	for _, h := range got.Deleted {
		deleted = append(deleted, h.Path)
	}
	slices.Sort(deleted)
	want := []string{old, older, oldZst, incoming}
	slices.Sort(want)
	if !slices.Equal(deleted, want) {
		t.Errorf("deleted %v, want %v", deleted, want)
	}
	slices.Sort(got.Partial)
	partial := []string{stale, staleIncoming, staleHex}
	slices.Sort(partial)
	if !slices.Equal(got.Partial, partial) {
		t.Errorf("partial archives removed %v, want %v", got.Partial, partial)
	}
	for _, p := range append(want, stale, staleIncoming, staleHex) {
		if _, err := os.Lstat(p); !os.IsNotExist(err) {
			t.Errorf("%s still there: %v", p, err)
		}
	}
	for _, p := range append(foreign, young, fresh, writing) {
		if _, err := os.Lstat(p); err != nil {
			t.Errorf("%s was touched: %v", p, err)
		}
	}
}

// value reads a gauge or a counter.
func value(t *testing.T, m prometheus.Metric) float64 {
	t.Helper()
	var d dto.Metric
	if err := m.Write(&d); err != nil {
		t.Fatal(err)
	}
	if d.Counter != nil {
		return d.Counter.GetValue()
	}
	return d.Gauge.GetValue()
}

// The backup metrics of spec §10 (the restore's count is retention's), and
// the schedule's period for the alert, are registered, the results at
// zero from the start.
func TestBackupMetricsRegistered(t *testing.T) {
	reg := prometheus.NewRegistry()
	NewMetrics(reg)
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int{}
	for _, f := range fams {
		got[f.GetName()] = len(f.GetMetric())
	}
	for _, name := range []string{
		"progressdb_backup_total", "progressdb_backup_duration_seconds", "progressdb_backup_bytes",
		"progressdb_backup_last_success_timestamp_seconds", "progressdb_backup_interval_seconds",
	} {
		if got[name] == 0 {
			t.Errorf("metric %s not registered", name)
		}
	}
	if got["progressdb_backup_total"] != 3 {
		t.Errorf("progressdb_backup_total has %d series, want success, failed and cancelled", got["progressdb_backup_total"])
	}
}

// A daily backup missed while the server was down is made at start, not a
// day late; none is made when the newest backup is since the last tick,
// nor on a fresh installation.
func TestSchedulerMakesMissedBackupAtStart(t *testing.T) {
	w := newWorld(t, false)
	w.thread("t1", 1)
	s, err := NewScheduler(SchedulerOptions{Creator: w.creator, Spec: "0 3 * * *", Keep: 30 * day,
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	day1 := time.Date(2026, 11, 24, 3, 0, 5, 0, time.UTC)
	for _, tc := range []struct {
		newest, now time.Time
		missed      bool
	}{
		{time.Time{}, day1, false},
		{day1, day1.Add(17 * time.Hour), false},
		{day1, day1.Add(24*time.Hour - 5*time.Second), true},
		{day1, day1.Add(72 * time.Hour), true},
	} {
		s.newest = tc.newest
		if _, got := s.missed(tc.now); got != tc.missed {
			t.Errorf("newest %v, now %v: missed %t, want %t", tc.newest, tc.now, got, tc.missed)
		}
	}

	s.newest = time.Time{}
	_, old := w.backupAt(time.Now().Add(-2 * day))
	runs := make(chan RunResult, 10)
	s.done = func(r RunResult) { runs <- r }
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s.Start(ctx)
	defer s.Stop()
	var res RunResult
	select {
	case res = <-runs:
	case <-time.After(time.Minute):
		t.Fatal("no backup made at start for the missed tick")
	}
	if res.Err != nil || res.File == "" || res.File == old {
		t.Fatalf("missed backup: %+v", res)
	}
	verifyBackupFile(t, res.File)
}

func verifyBackupFile(t *testing.T, path string) {
	t.Helper()
	rep, err := Verify(context.Background(), path, nil, t.TempDir())
	if err != nil || !rep.Valid {
		t.Fatalf("%s does not verify: %v %v", path, err, rep.Problems)
	}
}
