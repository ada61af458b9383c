package logging

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestJSONOutputParses(t *testing.T) {
	// A zone far from UTC makes a local timestamp visible.
	saved := time.Local
	time.Local = time.FixedZone("UTC+5", 5*3600)
	t.Cleanup(func() { time.Local = saved })

	var buf bytes.Buffer
	log := mustNew(t, Options{Format: "json", Stderr: &buf})
	log.Info("retention_run_finished", "run_id", "r1", "purged", 3)

	var rec map[string]any
	if err := json.Unmarshal(buf.Bytes(), &rec); err != nil {
		t.Fatalf("output is not JSON: %v\n%s", err, buf.String())
	}
	if rec["msg"] != "retention_run_finished" || rec["run_id"] != "r1" || rec["purged"] != float64(3) || rec["level"] != "INFO" {
		t.Errorf("record = %v", rec)
	}
	ts, _ := rec["time"].(string)
	if !strings.HasSuffix(ts, "Z") {
		t.Errorf("time = %q, want UTC (ending in Z)", ts)
	}
	if _, err := time.Parse(time.RFC3339Nano, ts); err != nil {
		t.Errorf("time %q: %v", ts, err)
	}
}

func TestLevelFiltering(t *testing.T) {
	tests := []struct {
		level string
		want  []string
	}{
		{"debug", []string{"d", "i", "w", "e"}},
		{"", []string{"i", "w", "e"}},
		{"info", []string{"i", "w", "e"}},
		{"WARN", []string{"w", "e"}},
		{"error", []string{"e"}},
	}
	for _, tt := range tests {
		t.Run(tt.level, func(t *testing.T) {
			var buf bytes.Buffer
			log := mustNew(t, Options{Level: tt.level, Format: "json", Stderr: &buf})
			log.Debug("d")
			log.Info("i")
			log.Warn("w")
			log.Error("e")
			if got := messages(t, buf.Bytes()); strings.Join(got, ",") != strings.Join(tt.want, ",") {
				t.Errorf("logged %v, want %v", got, tt.want)
			}
		})
	}
}

func TestFileSink(t *testing.T) {
	path := filepath.Join(t.TempDir(), "logs", "nested", "progressdb.log")
	for _, msg := range []string{"first_start", "second_start"} {
		log, c, err := New(Options{Format: "json", Sink: "file:" + path, Stderr: failWriter{t}})
		if err != nil {
			t.Fatalf("New: %v", err)
		}
		log.Info(msg)
		if err := c.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	// Appended, not truncated, across opens.
	if got := messages(t, data); strings.Join(got, ",") != "first_start,second_start" {
		t.Errorf("file holds %v", got)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm()&^0o640 != 0 {
		t.Errorf("file mode %v, want at most 0640", fi.Mode().Perm())
	}
	di, err := os.Stat(filepath.Dir(path))
	if err != nil {
		t.Fatal(err)
	}
	if di.Mode().Perm()&^0o750 != 0 {
		t.Errorf("folder mode %v, want at most 0750", di.Mode().Perm())
	}
}

// After a rotation renamed the file, Reopen makes the logger write to a new
// file at the configured path; the renamed one keeps what came before.
func TestFileSinkReopen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "progressdb.log")
	log, sink, err := New(Options{Format: "json", Sink: "file:" + path, Stderr: failWriter{t}})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	defer sink.Close()
	log.Info("before_rotation")
	if err := os.Rename(path, path+".1"); err != nil {
		t.Fatal(err)
	}
	log.Info("renamed_not_reopened")
	if err := sink.Reopen(); err != nil {
		t.Fatalf("Reopen: %v", err)
	}
	log.Info("after_reopen")
	for file, want := range map[string]string{path + ".1": "before_rotation,renamed_not_reopened", path: "after_reopen"} {
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.Join(messages(t, data), ","); got != want {
			t.Errorf("%s holds %s, want %s", filepath.Base(file), got, want)
		}
	}
	// stderr has nothing to reopen.
	_, errSink, err := New(Options{Format: "json", Stderr: failWriter{t}})
	if err != nil {
		t.Fatal(err)
	}
	if err := errSink.Reopen(); err != nil || errSink.IsFile() {
		t.Errorf("stderr sink: Reopen %v, IsFile %t", err, errSink.IsFile())
	}
}

// Every duration, however it reaches the logger (slog.Duration, a
// time.Duration value, With, a group), is written as milliseconds under
// "<key>_ms", in both formats; never slog's bare nanoseconds.
func TestDurationsInMilliseconds(t *testing.T) {
	var buf bytes.Buffer
	log := mustNew(t, Options{Format: "json", Stderr: &buf})
	log.With("timeout", 15*time.Second).Info("d",
		slog.Duration("duration", 38548*time.Nanosecond), "time_left", 90*time.Second,
		"erase_ms", 1500*time.Millisecond, slog.Group("g", "wait", time.Millisecond))
	var rec map[string]any
	if err := json.Unmarshal(buf.Bytes(), &rec); err != nil {
		t.Fatalf("output is not JSON: %v\n%s", err, buf.String())
	}
	for k, want := range map[string]float64{"timeout_ms": 15000, "duration_ms": 0.039, "time_left_ms": 90000, "erase_ms": 1500} {
		if rec[k] != want {
			t.Errorf("%s = %v, want %v: %s", k, rec[k], want, buf.String())
		}
	}
	if g, _ := rec["g"].(map[string]any); g["wait_ms"] != float64(1) {
		t.Errorf("group: %v", rec["g"])
	}
	for _, k := range []string{"timeout", "duration", "time_left"} {
		if _, ok := rec[k]; ok {
			t.Errorf("%s is still there: %s", k, buf.String())
		}
	}

	buf.Reset()
	text := mustNew(t, Options{Format: "text", Stderr: &buf})
	text.Info("d", "duration", 1500*time.Millisecond)
	if !strings.Contains(buf.String(), "duration_ms=1500") {
		t.Errorf("text: %q", buf.String())
	}
}

func TestAutoPicksJSONForNonTerminal(t *testing.T) {
	t.Run("buffer", func(t *testing.T) {
		var buf bytes.Buffer
		mustNew(t, Options{Format: "auto", Stderr: &buf}).Info("hello")
		if !json.Valid(bytes.TrimSpace(buf.Bytes())) {
			t.Errorf("auto on a buffer wrote %q, want JSON", buf.String())
		}
	})
	t.Run("regular file as stderr", func(t *testing.T) {
		f, err := os.Create(filepath.Join(t.TempDir(), "stderr"))
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		mustNew(t, Options{Stderr: f}).Info("hello") // format defaults to auto
		data, err := os.ReadFile(f.Name())
		if err != nil {
			t.Fatal(err)
		}
		if !json.Valid(bytes.TrimSpace(data)) {
			t.Errorf("auto on a file wrote %q, want JSON", data)
		}
	})
}

func TestTextWithoutColourOffTerminal(t *testing.T) {
	var buf bytes.Buffer
	mustNew(t, Options{Format: "text", Stderr: &buf}).Warn("lease_lost", "owner", "host-a")
	out := buf.String()
	if strings.Contains(out, "\x1b[") {
		t.Errorf("text output off a terminal has escape codes: %q", out)
	}
	if !strings.Contains(out, "lease_lost") || !strings.Contains(out, "owner=host-a") || !strings.Contains(out, "WRN") {
		t.Errorf("text output = %q", out)
	}
	if json.Valid(bytes.TrimSpace(buf.Bytes())) {
		t.Errorf("text format wrote JSON: %q", out)
	}
	// The timestamp leads the line in UTC.
	stamp, _, _ := strings.Cut(out, " ")
	if ts, err := time.Parse("2006-01-02T15:04:05.000Z07:00", stamp); err != nil || ts.Location() != time.UTC {
		t.Errorf("timestamp %q: %v", stamp, err)
	}
}

func TestInvalidOptions(t *testing.T) {
	for _, o := range []Options{
		{Level: "verbose"},
		{Format: "xml"},
		{Sink: "syslog"},
		{Sink: "file:"},
	} {
		_, _, err := New(o)
		if !errors.Is(err, ErrInvalidOption) {
			t.Errorf("New(%+v) error = %v, want ErrInvalidOption", o, err)
		}
	}
	// A file sink that cannot be created is an error, not a silent fallback.
	blocker := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(blocker, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := New(Options{Sink: "file:" + filepath.Join(blocker, "x.log")}); err == nil {
		t.Error("New with a sink below a regular file succeeded")
	}
}

func mustNew(t *testing.T, o Options) *slog.Logger {
	t.Helper()
	log, c, err := New(o)
	if err != nil {
		t.Fatalf("New(%+v): %v", o, err)
	}
	t.Cleanup(func() { c.Close() })
	return log
}

// messages returns the msg field of every JSON line.
func messages(t *testing.T, data []byte) []string {
	t.Helper()
	var out []string
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		var rec struct{ Msg string }
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		out = append(out, rec.Msg)
	}
	return out
}

// failWriter fails the test if anything is written to stderr.
type failWriter struct{ t *testing.T }

func (w failWriter) Write(p []byte) (int, error) {
	w.t.Errorf("unexpected write to stderr: %q", p)
	return len(p), nil
}
