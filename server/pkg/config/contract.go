// Package config loads and validates progressdb's configuration from the
// environment (spec §6).
package config

// This file fixes the exported surface other packages build against.
// Implementations replace the bodies; signatures change only together with
// every caller.

import (
	"errors"
	"time"
)

var errTODO = errors.New("config: not implemented yet")

// Config is the whole server configuration.
type Config struct {
	DBPath     string // PROGRESSDB_DB_PATH
	Addr       string // PROGRESSDB_ADDR
	AdminToken string // PROGRESSDB_ADMIN_TOKEN (secret)
	APIKey     string // PROGRESSDB_API_KEY (secret)
	LogLevel   string // PROGRESSDB_LOG_LEVEL: debug|info|warn|error
	LogFormat  string // PROGRESSDB_LOG_FORMAT: text|json|auto
	LogSink    string // PROGRESSDB_LOG_SINK: stderr|file:<path>
	Retention  Retention
}

// Retention is the PROGRESSDB_RETENTION_* group.
type Retention struct {
	Enabled          bool
	Period           time.Duration
	MessagePeriod    time.Duration // defaults to Period
	Cron             string        // validated with robfig/cron's standard parser (5 fields or descriptor)
	MinPeriod        time.Duration
	AllowShortPeriod bool
	DryRun           bool
	AuditPath        string // defaults to <DBPath>/purge_audit
	LeasePath        string // defaults to <AuditPath>/retention.lock
	LeaseTTL         time.Duration
	BatchSize        int
	BatchPause       time.Duration
	MaxItems         int
	RunMissed        bool
}

// Error is a configuration error naming the variable, the value and the rule.
// Error() is one line: `PROGRESSDB_X="value": rule`.
type Error struct {
	Var, Value, Rule string
}

func (e *Error) Error() string { return e.Var + "=" + quote(e.Value) + ": " + e.Rule }

func quote(s string) string { return "\"" + s + "\"" }

// Load reads configuration from environ (as os.Environ()), applies defaults
// and validates it. Errors are *Error (errors.As).
func Load(environ []string) (Config, error) { return Config{}, errTODO }

// ParseDuration accepts Go durations plus days: "30d", "1d12h", "90m".
func ParseDuration(s string) (time.Duration, error) { return 0, errTODO }

// FormatDuration renders a duration the way operators write it ("30d", "1d12h", "90m").
func FormatDuration(d time.Duration) string { return d.String() }

// Redacted returns the effective configuration as ordered name/value pairs
// (variable names), with secrets shown as "<redacted>" or "<unset>".
func (c Config) Redacted() [][2]string { return nil }
