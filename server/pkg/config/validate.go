package config

import (
	"errors"
	"net"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/robfig/cron/v3"
)

// Limits checked by validate.
const (
	minLeaseTTL  = 3 * time.Second // the heartbeat runs every TTL/3
	maxBatchSize = 1_000_000
)

// validate checks the parsed values in the order of the spec's table; the
// first violation is returned as an *Error.
func (c Config) validate(vars map[string]string, node bool) error {
	checks := []func(map[string]string) *Error{
		c.validateLogging,
		c.validateAddr,
		c.validateServer,
		c.validateSecrets,
		c.Retention.validatePeriods,
		c.Retention.validateCron,
		c.Retention.validateBatches,
		c.validateExportPath,
		c.validateSealing,
		c.validateAttachments,
		c.Backup.validate,
		c.validateIdempotency,
		c.validateTLS,
		func(vars map[string]string) *Error { return c.validateCluster(vars, node) },
	}
	for _, check := range checks {
		if err := check(vars); err != nil {
			return err
		}
	}
	return nil
}

// validate checks the backup schedule and how long backups are kept.
func (b Backup) validate(vars map[string]string) *Error {
	if err := validateSchedule(VarBackupCron, b.Schedule); err != nil {
		return err
	}
	if b.Keep <= 0 {
		return &Error{VarBackupKeep, vars[VarBackupKeep], "must be positive, such as 30d: backups older than it are deleted"}
	}
	if b.StreamTimeout < time.Second {
		return &Error{VarBackupStream, vars[VarBackupStream], "must be at least 1s, such as 10m: a streamed backup whose client takes nothing for this long is cut"}
	}
	return nil
}

// validateIdempotency checks how long Idempotency-Keys are kept.
func (c Config) validateIdempotency(vars map[string]string) *Error {
	if c.IdempotencyTTL < time.Minute || c.IdempotencyTTL > 30*24*time.Hour {
		return &Error{VarIdempotencyTTL, vars[VarIdempotencyTTL], "must be from 1m to 30d, such as 24h: " +
			"a request sent again with its Idempotency-Key within it answers as the first did; its answer is kept that long"}
	}
	return nil
}

// validateServer checks PROGRESSDB_SERVER, when set: an http or https URL.
func (c Config) validateServer(map[string]string) *Error {
	if c.Server != "" {
		if err := ValidateServerURL(c.Server); err != nil {
			return &Error{VarServer, c.Server, err.Error()}
		}
	}
	return nil
}

// ValidateServerURL checks the URL of a server's admin API
// (PROGRESSDB_SERVER, --server): http or https with a host, and no
// query or fragment (the commands add the API's paths).
func ValidateServerURL(s string) error {
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
		return errors.New("must be the http:// or https:// URL of a progressdb server, such as http://10.0.0.7:8080")
	}
	return nil
}

// validateSecrets refuses bearer secrets that no Authorization header can
// present (CheckBearer). The value is not shown.
func (c Config) validateSecrets(map[string]string) *Error {
	for _, s := range c.secretFiles()[:2] { // the admin token and the API key
		if rule := CheckBearer(*s.value); rule != "" {
			if *s.path != "" {
				return &Error{s.fileName, *s.path, "holds a secret that " + rule}
			}
			return &Error{s.name, "<redacted>", rule}
		}
	}
	return nil
}

func (c Config) validateLogging(map[string]string) *Error {
	switch c.LogLevel {
	case "debug", "info", "warn", "error":
	default:
		return &Error{VarLogLevel, c.LogLevel, "must be debug, info, warn or error"}
	}
	switch c.LogFormat {
	case "text", "json", "auto":
	default:
		return &Error{VarLogFormat, c.LogFormat, "must be text, json or auto"}
	}
	if c.LogSink != "stderr" {
		path, ok := strings.CutPrefix(c.LogSink, "file:")
		if !ok || path == "" {
			return &Error{VarLogSink, c.LogSink, "must be stderr or file:<path>"}
		}
	}
	return nil
}

func (c Config) validateAddr(map[string]string) *Error {
	const rule = "must be host:port with a port number from 0 to 65535"
	_, port, err := net.SplitHostPort(c.Addr)
	if err != nil {
		return &Error{VarAddr, c.Addr, rule}
	}
	if n, err := strconv.ParseUint(port, 10, 16); err != nil || port != strconv.FormatUint(n, 10) {
		return &Error{VarAddr, c.Addr, rule}
	}
	return nil
}

func (r Retention) validatePeriods(vars map[string]string) *Error {
	// A floor of 0 lets any period through; that is the same decision as
	// allowing short periods, so it takes the same switch.
	if r.MinPeriod <= 0 && !r.AllowShortPeriod {
		return &Error{VarMinPeriod, shown(vars, VarMinPeriod, FormatDuration(r.MinPeriod)),
			"must be greater than 0; set PROGRESSDB_RETENTION_ALLOW_SHORT_PERIOD=true to allow any period"}
	}
	periods := []struct {
		name string
		d    time.Duration
	}{
		{VarPeriod, r.Period},
		{VarMessagePeriod, r.MessagePeriod},
	}
	for _, p := range periods {
		if rule := r.PeriodRule(p.d, false); rule != "" {
			return &Error{p.name, shown(vars, p.name, FormatDuration(p.d)), rule}
		}
	}
	if rule := r.orphanGraceRule(); rule != "" {
		return &Error{VarOrphanGrace, shown(vars, VarOrphanGrace, FormatDuration(r.OrphanGrace)), rule}
	}
	if rule := r.PeriodRule(r.MaxAge, true); rule != "" {
		return &Error{VarMaxAge, shown(vars, VarMaxAge, FormatDuration(r.MaxAge)), rule}
	}
	if rule := MaxMessagesRule(r.MaxMessages); rule != "" {
		return &Error{VarMaxMessages, shown(vars, VarMaxMessages, strconv.Itoa(r.MaxMessages)), rule}
	}
	return nil
}

// PeriodRule returns the rule that d breaks as a retention period or
// maximum age, or "" when d is allowed. With offAllowed, 0 turns the policy
// off. Per-thread overrides are checked with it too, so they follow the
// environment's rule word for word.
func (r Retention) PeriodRule(d time.Duration, offAllowed bool) string {
	switch {
	case d == 0 && offAllowed:
		return ""
	case d < 0 && offAllowed:
		return "must be 0 (off) or more"
	case d <= 0:
		return "must be greater than 0"
	case d < r.MinPeriod && !r.AllowShortPeriod:
		// A short period purges data soon after a mistaken delete; the
		// operator has to say they mean it.
		return "is below " + VarMinPeriod + " (" + FormatDuration(r.MinPeriod) + "); set " +
			VarAllowShortPeriod + "=true to allow it"
	}
	return ""
}

// minOrphanGrace is the shortest orphan grace period allowed without
// ALLOW_SHORT_PERIOD. A fixed floor, not MIN_PERIOD: it keeps an upload's
// blob from being taken for an orphan before its record is written
// (clocks apart, an upload the sweeping process cannot see), which has
// nothing to do with how long deleted content is kept.
const minOrphanGrace = time.Hour

func (r Retention) orphanGraceRule() string {
	switch {
	case r.OrphanGrace <= 0:
		return "must be greater than 0"
	case r.OrphanGrace < minOrphanGrace && !r.AllowShortPeriod:
		return "is below 1h: a blob younger than this may belong to an upload whose record is not written yet; set " +
			VarAllowShortPeriod + "=true to allow it"
	}
	return ""
}

// maxWireInt is the largest integer the HTTP API and --json output carry
// (spec §2: I-JSON, 2^53−1); a value shown there must not exceed it.
const maxWireInt = 1<<53 - 1

// MaxMessagesRule returns the rule n breaks as a per-thread message cap, or "".
func MaxMessagesRule(n int) string {
	switch {
	case n < 0:
		return "must be 0 (off) or more"
	case n > maxWireInt:
		return "must be at most 9007199254740991 (2^53−1), the largest number every JSON client reads exactly"
	}
	return ""
}

func (r Retention) validateCron(map[string]string) *Error {
	return validateSchedule(VarCron, r.Cron)
}

// validateSchedule checks a cron setting (retention's, backup's).
func validateSchedule(name, spec string) *Error {
	// Schedules are UTC by contract; a zone prefix would silently change that.
	if strings.HasPrefix(spec, "TZ=") || strings.HasPrefix(spec, "CRON_TZ=") {
		return &Error{name, spec, "schedules are UTC; a time zone prefix is not allowed"}
	}
	if _, err := cron.ParseStandard(spec); err != nil {
		return &Error{name, spec, "must be a 5-field cron expression or a descriptor such as @daily or @every 1h: " + err.Error()}
	}
	// The cron library turns an interval under a second (0s included) into
	// one second without a word: a run every second is never what was meant.
	if every, ok := strings.CutPrefix(spec, "@every "); ok {
		if d, err := time.ParseDuration(strings.TrimSpace(every)); err == nil && d < time.Second {
			return &Error{name, spec, "an @every interval must be at least 1s"}
		}
	}
	return nil
}

func (r Retention) validateBatches(vars map[string]string) *Error {
	if r.LeaseTTL < minLeaseTTL {
		return &Error{VarLeaseTTL, shown(vars, VarLeaseTTL, FormatDuration(r.LeaseTTL)), "must be at least 3s (the lease is renewed every TTL/3)"}
	}
	if r.BatchSize < 1 || r.BatchSize > maxBatchSize {
		return &Error{VarBatchSize, shown(vars, VarBatchSize, strconv.Itoa(r.BatchSize)), "must be from 1 to 1000000"}
	}
	if r.BatchPause < 0 || r.BatchPause >= r.LeaseTTL/3 {
		return &Error{VarBatchPause, shown(vars, VarBatchPause, FormatDuration(r.BatchPause)), "must be shorter than a third of PROGRESSDB_RETENTION_LEASE_TTL (" +
			FormatDuration(r.LeaseTTL/3) + ") so the lease can be renewed between batches"}
	}
	if r.EraseRate < 0 {
		return &Error{VarEraseRate, shown(vars, VarEraseRate, strconv.Itoa(r.EraseRate)), "must be 0 (unbounded) or more MiB per second"}
	}
	if r.MaxItems < 0 {
		return &Error{VarMaxItems, shown(vars, VarMaxItems, strconv.Itoa(r.MaxItems)), "must be 0 (no limit) or more"}
	}
	return nil
}

// validateExportPath keeps exports out of the database folder, whose files
// must not hold purged content after a run (erasure), and out of the audit
// tree, which holds audit files only.
func (c Config) validateExportPath(map[string]string) *Error {
	p := c.Retention.ExportPath
	if p == "" {
		return nil
	}
	for _, outer := range []struct{ name, path string }{
		{VarDBPath, c.DBPath},
		{VarAuditPath, c.Retention.AuditPath},
	} {
		if within(p, outer.path) {
			return &Error{VarExportPath, p, "must not be inside " + outer.name + " (" + outer.path +
				"): exports hold purged content, which must not remain in the database folder, and the audit tree holds audit files only"}
		}
	}
	return nil
}

// within reports whether path is dir or lies under it, by their absolute,
// cleaned spelling.
func within(path, dir string) bool {
	p, err1 := filepath.Abs(path)
	d, err2 := filepath.Abs(dir)
	if err1 != nil || err2 != nil {
		return false
	}
	rel, err := filepath.Rel(d, p)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator))
}

// shown is the value an error names: what the operator set, or the
// effective default when the variable is unset.
func shown(vars map[string]string, name, effective string) string {
	if v := vars[name]; v != "" {
		return v
	}
	return effective
}

// validateSealing checks PROGRESSDB_KEK and PROGRESSDB_KEYSTORE_PATH (spec
// §12): a KEK that opens (a local key is exactly 32 bytes of base64, never
// made up), a key store path with it and only with it, outside DB_PATH.
// The KEK's value is never shown.
func (c Config) validateSealing(map[string]string) *Error {
	if c.KEK == "" {
		if c.KeystorePath != "" {
			return &Error{VarKeystorePath, c.KeystorePath, "is set but " + VarKEK +
				" is not: a key store opens only with its KEK; set both to seal content, or neither"}
		}
		return nil
	}
	if _, _, err := ParseKEK(c.KEK); err != nil {
		return &Error{VarKEK, "<redacted>", "must be a base64key:// URL of exactly 32 bytes (progressdb keys generate-kek prints one) or a KMS key URL: " +
			strings.TrimPrefix(err.Error(), ErrInvalidKEK.Error()+": ")}
	}
	if c.KeystorePath == "" {
		return &Error{VarKeystorePath, "", "is required with " + VarKEK + ": the folder of the key store, outside " + VarDBPath}
	}
	if err := CheckOutside(c.KeystorePath, c.DBPath); err != nil {
		return &Error{VarKeystorePath, c.KeystorePath, "must not be " + VarDBPath + " (" + c.DBPath +
			"), inside it or hold it: a copy of the data folder must not carry its keys (" + err.Error() + ")"}
	}
	return nil
}
