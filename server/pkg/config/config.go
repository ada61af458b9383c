// Package config loads and validates progressdb's configuration from the
// environment (spec §6).
package config

import (
	"errors"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/caarlos0/env/v11"
)

// Config is the whole server configuration. The env tags name the
// variables; defaults that depend on other values are applied by Load.
type Config struct {
	DBPath string `env:"PROGRESSDB_DB_PATH" envDefault:"./data"`
	Addr   string `env:"PROGRESSDB_ADDR" envDefault:"127.0.0.1:8080"`
	// Server, for the operator commands: the URL of the server whose admin
	// API they act through, never opening a local folder (spec §10.1).
	Server     string `env:"PROGRESSDB_SERVER"`
	AdminToken string `env:"PROGRESSDB_ADMIN_TOKEN"` // secret
	// AdminTokenFile, APIKeyFile and KEKFile name files that hold those
	// secrets instead of the variables (secrets.go); the secret's field
	// is filled from the file.
	AdminTokenFile string `env:"PROGRESSDB_ADMIN_TOKEN_FILE"`
	APIKey         string `env:"PROGRESSDB_API_KEY"` // secret
	APIKeyFile     string `env:"PROGRESSDB_API_KEY_FILE"`
	LogLevel       string `env:"PROGRESSDB_LOG_LEVEL" envDefault:"info"`  // debug|info|warn|error
	LogFormat      string `env:"PROGRESSDB_LOG_FORMAT" envDefault:"auto"` // text|json|auto
	LogSink        string `env:"PROGRESSDB_LOG_SINK" envDefault:"stderr"` // stderr|file:<path>
	// AuditSigningKey is the path of an ed25519 private key (PEM, PKCS #8)
	// that signs every audit footer; unset: footers are not signed.
	AuditSigningKey string `env:"PROGRESSDB_AUDIT_SIGNING_KEY"`
	// KEK is the URL of the key that wraps the data keys of sealed
	// content (spec §12): base64key://<32 bytes, base64> or a KMS key.
	// Unset: nothing is sealed. A secret: never shown.
	KEK     string `env:"PROGRESSDB_KEK"`
	KEKFile string `env:"PROGRESSDB_KEK_FILE"`
	// KeystorePath is the key store's folder, required with KEK and
	// outside DB_PATH.
	KeystorePath string `env:"PROGRESSDB_KEYSTORE_PATH"`
	// AttachmentsURL is the blob store of attachments' bytes (spec §16):
	// file://, s3://, gs:// or azblob://; unset: a file:// folder beside
	// DB_PATH (DefaultAttachmentsDir).
	AttachmentsURL string `env:"PROGRESSDB_ATTACHMENTS_URL"`
	// AttachmentMaxBytes is the largest attachment an upload may store.
	AttachmentMaxBytes int64 `env:"PROGRESSDB_ATTACHMENT_MAX_BYTES" envDefault:"26214400"`
	// IdempotencyTTL is how long an Idempotency-Key's answer is kept
	// (spec §7): a request sent again within it answers as the first did.
	IdempotencyTTL time.Duration `env:"PROGRESSDB_IDEMPOTENCY_TTL" envDefault:"24h"`
	Retention      Retention     `envPrefix:"PROGRESSDB_RETENTION_"`
	Backup         Backup        `envPrefix:"PROGRESSDB_BACKUP_"`
	// NodeID and AdvertiseURL name this node in a cluster (spec §11).
	NodeID       string  `env:"PROGRESSDB_NODE_ID"`
	AdvertiseURL string  `env:"PROGRESSDB_ADVERTISE_URL"`
	Cluster      Cluster `envPrefix:"PROGRESSDB_CLUSTER_"`
	// TLS is encryption in transit for clients (spec §14).
	TLS TLS `envPrefix:"PROGRESSDB_TLS_"`
}

// Backup is the PROGRESSDB_BACKUP_* group (spec §10).
type Backup struct {
	// Path is where scheduled backups (and POST /admin/backups) are
	// written; unset: no scheduled backups.
	Path string `env:"PATH"`
	// Schedule is the backup cron (UTC), like the retention cron. (Not
	// named Cron: field names map to variables, and Retention has one.)
	Schedule string `env:"CRON" envDefault:"0 3 * * *"`
	// Keep is how long a scheduled backup is kept: this bounds how long
	// purged content lives on in this server's own backups.
	Keep time.Duration `env:"KEEP" envDefault:"30d"`
	// StreamTimeout cuts a streamed backup (POST /admin/backups/stream)
	// whose client has taken nothing for this long, so that a stalled
	// client cannot keep the backup's copy of the data open for hours.
	StreamTimeout time.Duration `env:"STREAM_TIMEOUT" envDefault:"10m"`
}

// Retention is the PROGRESSDB_RETENTION_* group.
type Retention struct {
	Enabled          bool          `env:"ENABLED" envDefault:"false"`
	Period           time.Duration `env:"PERIOD" envDefault:"30d"`
	MessagePeriod    time.Duration `env:"MESSAGE_PERIOD"` // defaults to Period
	Cron             string        `env:"CRON" envDefault:"0 2 * * *"`
	MinPeriod        time.Duration `env:"MIN_PERIOD" envDefault:"1h"`
	AllowShortPeriod bool          `env:"ALLOW_SHORT_PERIOD" envDefault:"false"`
	DryRun           bool          `env:"DRY_RUN" envDefault:"false"`
	AuditPath        string        `env:"AUDIT_PATH"` // defaults to <DBPath>/purge_audit
	LeasePath        string        `env:"LEASE_PATH"` // defaults to <AuditPath>/retention.lock
	LeaseTTL         time.Duration `env:"LEASE_TTL" envDefault:"5m"`
	BatchSize        int           `env:"BATCH_SIZE" envDefault:"1000"`
	BatchPause       time.Duration `env:"BATCH_PAUSE" envDefault:"0"`
	MaxItems         int           `env:"MAX_ITEMS" envDefault:"0"`
	RunMissed        bool          `env:"RUN_MISSED" envDefault:"true"`
	// YieldToWrites slows a purge down while user writes are committing
	// (see retention's pacing); off, only BatchSize and BatchPause apply.
	YieldToWrites bool `env:"YIELD_TO_WRITES" envDefault:"true"`
	// MaxAge purges live messages older than this (cause max_age); 0 is off.
	MaxAge time.Duration `env:"MAX_AGE" envDefault:"0"`
	// MaxMessages keeps at most this many live messages per thread, newest
	// first (cause max_messages); 0 is off.
	MaxMessages int `env:"MAX_MESSAGES" envDefault:"0"`
	// ExportPath, when set, receives the full content of every purged item
	// before its keys are deleted (spec §3.3); empty turns export off.
	ExportPath string `env:"EXPORT_PATH"`
	// Erase makes purged content unrecoverable from the data directory at
	// the end of every run that purged something (docs/erasure.md).
	Erase bool `env:"ERASE" envDefault:"true"`
	// EraseRate bounds the table data the erase step rewrites, in MiB per
	// second; 0 is unbounded.
	EraseRate int `env:"ERASE_RATE" envDefault:"32"`
	// OrphanGrace is how old an attachment blob no record names must be
	// before a run removes it (spec §16): an upload's blob is complete
	// before its record is written, and a killed upload leaves one that
	// no record will ever name.
	OrphanGrace time.Duration `env:"ORPHAN_GRACE" envDefault:"1d"`
}

// Variable names, for errors and Redacted.
const (
	VarDBPath             = "PROGRESSDB_DB_PATH"
	VarAddr               = "PROGRESSDB_ADDR"
	VarServer             = "PROGRESSDB_SERVER"
	VarAdminToken         = "PROGRESSDB_ADMIN_TOKEN"
	VarAPIKey             = "PROGRESSDB_API_KEY"
	VarLogLevel           = "PROGRESSDB_LOG_LEVEL"
	VarLogFormat          = "PROGRESSDB_LOG_FORMAT"
	VarLogSink            = "PROGRESSDB_LOG_SINK"
	VarAuditSigningKey    = "PROGRESSDB_AUDIT_SIGNING_KEY"
	VarKEK                = "PROGRESSDB_KEK"
	VarKeystorePath       = "PROGRESSDB_KEYSTORE_PATH"
	VarAttachmentsURL     = "PROGRESSDB_ATTACHMENTS_URL"
	VarAttachmentMaxBytes = "PROGRESSDB_ATTACHMENT_MAX_BYTES"
	VarEnabled            = "PROGRESSDB_RETENTION_ENABLED"
	VarPeriod             = "PROGRESSDB_RETENTION_PERIOD"
	VarMessagePeriod      = "PROGRESSDB_RETENTION_MESSAGE_PERIOD"
	VarCron               = "PROGRESSDB_RETENTION_CRON"
	VarMinPeriod          = "PROGRESSDB_RETENTION_MIN_PERIOD"
	VarAllowShortPeriod   = "PROGRESSDB_RETENTION_ALLOW_SHORT_PERIOD"
	VarDryRun             = "PROGRESSDB_RETENTION_DRY_RUN"
	VarAuditPath          = "PROGRESSDB_RETENTION_AUDIT_PATH"
	VarLeasePath          = "PROGRESSDB_RETENTION_LEASE_PATH"
	VarLeaseTTL           = "PROGRESSDB_RETENTION_LEASE_TTL"
	VarBatchSize          = "PROGRESSDB_RETENTION_BATCH_SIZE"
	VarBatchPause         = "PROGRESSDB_RETENTION_BATCH_PAUSE"
	VarMaxItems           = "PROGRESSDB_RETENTION_MAX_ITEMS"
	VarRunMissed          = "PROGRESSDB_RETENTION_RUN_MISSED"
	VarYieldToWrites      = "PROGRESSDB_RETENTION_YIELD_TO_WRITES"
	VarMaxAge             = "PROGRESSDB_RETENTION_MAX_AGE"
	VarMaxMessages        = "PROGRESSDB_RETENTION_MAX_MESSAGES"
	VarExportPath         = "PROGRESSDB_RETENTION_EXPORT_PATH"
	VarErase              = "PROGRESSDB_RETENTION_ERASE"
	VarEraseRate          = "PROGRESSDB_RETENTION_ERASE_RATE"
	VarOrphanGrace        = "PROGRESSDB_RETENTION_ORPHAN_GRACE"
	VarBackupPath         = "PROGRESSDB_BACKUP_PATH"
	VarBackupCron         = "PROGRESSDB_BACKUP_CRON"
	VarBackupKeep         = "PROGRESSDB_BACKUP_KEEP"
	VarBackupStream       = "PROGRESSDB_BACKUP_STREAM_TIMEOUT"
	VarIdempotencyTTL     = "PROGRESSDB_IDEMPOTENCY_TTL"
)

// Error is a configuration error naming the variable, the value and the rule.
// Error() is one line: `PROGRESSDB_X="value": rule`.
type Error struct {
	Var, Value, Rule string
}

func (e *Error) Error() string {
	// Values are quoted and rules flattened so the message stays one line.
	return e.Var + "=" + strconv.Quote(e.Value) + ": " + strings.Join(strings.Fields(e.Rule), " ")
}

// Load reads configuration from environ (as os.Environ()), applies defaults
// and validates it. Errors are *Error (errors.As).
func Load(environ []string) (Config, error) { return load(environ, true) }

// LoadEtcdClient is Load for a command that only talks to the cluster's
// etcd (cluster status, create, move-shard): the settings that name a
// node (PROGRESSDB_NODE_ID, PROGRESSDB_ADVERTISE_URL,
// PROGRESSDB_CLUSTER_SECRET) are not required, since it is no node.
func LoadEtcdClient(environ []string) (Config, error) { return load(environ, false) }

// load reads and validates the environment; node says whether the
// settings of a cluster node are required when PROGRESSDB_CLUSTER_ETCD is
// set.
func load(environ []string, node bool) (Config, error) {
	vars := envMap(environ)
	var c Config
	err := env.ParseWithOptions(&c, env.Options{
		Environment: vars,
		FuncMap: map[reflect.Type]env.ParserFunc{
			reflect.TypeOf(time.Duration(0)): func(v string) (any, error) { return parseDuration(v) },
		},
	})
	if err != nil {
		return Config{}, parseError(err, vars)
	}
	if err := c.readSecretFiles(); err != nil {
		return Config{}, err
	}
	c.applyDerived(vars)
	if err := c.validate(vars, node); err != nil {
		return Config{}, err
	}
	return c, nil
}

// AuditPathOf is the audit folder as Load derives it
// (PROGRESSDB_RETENTION_AUDIT_PATH, else <PROGRESSDB_DB_PATH>/purge_audit),
// read alone and unvalidated: for a command that reads audit files and
// nothing else (erasure verify), which a setting it does not use (a
// PROGRESSDB_KEYSTORE_PATH without its KEK) must not stop.
func AuditPathOf(environ []string) string {
	vars := envMap(environ)
	if p := vars[VarAuditPath]; p != "" {
		return p
	}
	db := vars[VarDBPath]
	if db == "" {
		db = "./data"
	}
	return filepath.Join(db, "purge_audit")
}

// envMap turns KEY=value pairs into a map; later entries win, as in a shell.
func envMap(environ []string) map[string]string {
	m := make(map[string]string, len(environ))
	for _, kv := range environ {
		k, v, ok := strings.Cut(kv, "=")
		if ok && k != "" {
			m[k] = v
		}
	}
	return m
}

// applyDerived fills the defaults that depend on other settings. An empty
// variable counts as unset, as it does for every other default.
func (c *Config) applyDerived(vars map[string]string) {
	// Levels and formats are words, not names: INFO and Info mean info.
	c.LogLevel = strings.ToLower(c.LogLevel)
	c.LogFormat = strings.ToLower(c.LogFormat)
	r := &c.Retention
	if vars[VarMessagePeriod] == "" {
		r.MessagePeriod = r.Period
	}
	if r.AuditPath == "" {
		r.AuditPath = filepath.Join(c.DBPath, "purge_audit")
	}
	if r.LeasePath == "" {
		r.LeasePath = filepath.Join(r.AuditPath, "retention.lock")
	}
	if c.AttachmentsURL == "" {
		// An unusable working directory leaves it empty, refused by
		// validate naming the variable.
		c.AttachmentsURL, _ = FileURL(DefaultAttachmentsDir(c.DBPath))
	}
}

// parseError turns the first error reported by env into an *Error naming
// the variable and its value.
func parseError(err error, vars map[string]string) error {
	var agg env.AggregateError
	if errors.As(err, &agg) && len(agg.Errors) > 0 {
		err = agg.Errors[0]
	}
	var pe env.ParseError
	if errors.As(err, &pe) {
		name := fieldVars()[pe.Name]
		return &Error{Var: name, Value: vars[name], Rule: typeRule(pe)}
	}
	// Other env errors (unsupported tags, missing parsers) are programming
	// errors in this package; keep them one line all the same.
	return &Error{Var: "PROGRESSDB_*", Value: "", Rule: err.Error()}
}

func typeRule(pe env.ParseError) string {
	switch pe.Type {
	case reflect.TypeOf(false):
		return "must be true or false"
	case reflect.TypeOf(0), reflect.TypeOf(int64(0)):
		return "must be a whole number within range"
	case reflect.TypeOf(time.Duration(0)):
		return "must be a duration such as 90m, 1d12h or 30d: " + pe.Err.Error()
	}
	return pe.Err.Error()
}

// fieldVars maps Config's field names to their variables, following the
// same env and envPrefix tags that env reads.
func fieldVars() map[string]string {
	m := map[string]string{}
	eachVar(func(field, name string) { m[field] = name })
	return m
}

// eachVar calls fn with every Config field and the variable it is read
// from, following the same env and envPrefix tags that env reads, so a
// field added to Config is known everywhere at once.
func eachVar(fn func(field, name string)) {
	var walk func(t reflect.Type, prefix string)
	walk = func(t reflect.Type, prefix string) {
		for i := range t.NumField() {
			f := t.Field(i)
			if f.Type.Kind() == reflect.Struct && f.Tag.Get("env") == "" {
				walk(f.Type, prefix+f.Tag.Get("envPrefix"))
				continue
			}
			name, _, _ := strings.Cut(f.Tag.Get("env"), ",")
			if name != "" {
				fn(f.Name, prefix+name)
			}
		}
	}
	walk(reflect.TypeOf(Config{}), "")
}

// Redacted returns the effective configuration as ordered name/value pairs
// (variable names), with secrets shown as "<redacted>" or "<unset>".
func (c Config) Redacted() [][2]string {
	r := c.Retention
	return append([][2]string{
		{VarDBPath, c.DBPath},
		{VarAddr, c.Addr},
		{VarServer, unsetIfEmpty(c.Server)},
		{VarAdminToken, secret(c.AdminToken)},
		{VarAdminTokenFile, unsetIfEmpty(c.AdminTokenFile)},
		{VarAPIKey, secret(c.APIKey)},
		{VarAPIKeyFile, unsetIfEmpty(c.APIKeyFile)},
		{VarLogLevel, c.LogLevel},
		{VarLogFormat, c.LogFormat},
		{VarLogSink, c.LogSink},
		{VarEnabled, strconv.FormatBool(r.Enabled)},
		{VarPeriod, FormatDuration(r.Period)},
		{VarMessagePeriod, FormatDuration(r.MessagePeriod)},
		{VarCron, r.Cron},
		{VarMinPeriod, FormatDuration(r.MinPeriod)},
		{VarAllowShortPeriod, strconv.FormatBool(r.AllowShortPeriod)},
		{VarDryRun, strconv.FormatBool(r.DryRun)},
		{VarAuditPath, r.AuditPath},
		{VarLeasePath, r.LeasePath},
		{VarLeaseTTL, FormatDuration(r.LeaseTTL)},
		{VarBatchSize, strconv.Itoa(r.BatchSize)},
		{VarBatchPause, FormatDuration(r.BatchPause)},
		{VarMaxItems, strconv.Itoa(r.MaxItems)},
		{VarRunMissed, strconv.FormatBool(r.RunMissed)},
		{VarYieldToWrites, strconv.FormatBool(r.YieldToWrites)},
		{VarMaxAge, FormatDuration(r.MaxAge)},
		{VarMaxMessages, strconv.Itoa(r.MaxMessages)},
		{VarExportPath, unsetIfEmpty(r.ExportPath)},
		{VarErase, strconv.FormatBool(r.Erase)},
		{VarEraseRate, strconv.Itoa(r.EraseRate)},
		{VarOrphanGrace, FormatDuration(r.OrphanGrace)},
		{VarAuditSigningKey, unsetIfEmpty(c.AuditSigningKey)},
		{VarKEK, secret(c.KEK)},
		{VarKEKFile, unsetIfEmpty(c.KEKFile)},
		{VarKeystorePath, unsetIfEmpty(c.KeystorePath)},
		{VarAttachmentsURL, c.AttachmentsURL},
		{VarAttachmentMaxBytes, strconv.FormatInt(c.AttachmentMaxBytes, 10)},
		{VarBackupPath, unsetIfEmpty(c.Backup.Path)},
		{VarBackupCron, c.Backup.Schedule},
		{VarBackupKeep, FormatDuration(c.Backup.Keep)},
		{VarBackupStream, FormatDuration(c.Backup.StreamTimeout)},
		{VarIdempotencyTTL, FormatDuration(c.IdempotencyTTL)},
	}, append(c.redactedCluster(), c.redactedTLS()...)...)
}

// unsetIfEmpty shows an optional setting that is off.
func unsetIfEmpty(s string) string {
	if s == "" {
		return "<unset>"
	}
	return s
}

func secret(s string) string {
	if s == "" {
		return "<unset>"
	}
	return "<redacted>"
}
