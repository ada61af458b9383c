package config

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestLoadDefaults(t *testing.T) {
	c, err := Load(nil)
	if err != nil {
		t.Fatalf("Load(nil): %v", err)
	}
	want := Config{
		DBPath:    "./data",
		Addr:      "127.0.0.1:8080",
		LogLevel:  "info",
		LogFormat: "auto",
		LogSink:   "stderr",
		// Beside the database, never inside it.
		AttachmentsURL:     "file://" + filepath.ToSlash(mustAbs(t, "data-attachments")),
		AttachmentMaxBytes: 25 << 20,
		Retention: Retention{
			Period:        30 * day,
			MessagePeriod: 30 * day,
			Cron:          "0 2 * * *",
			MinPeriod:     time.Hour,
			AuditPath:     filepath.Join("data", "purge_audit"),
			LeasePath:     filepath.Join("data", "purge_audit", "retention.lock"),
			LeaseTTL:      5 * time.Minute,
			BatchSize:     1000,
			RunMissed:     true,
			YieldToWrites: true,
			Erase:         true,
			EraseRate:     32,
			OrphanGrace:   day,
		},
		Backup:         Backup{Schedule: "0 3 * * *", Keep: 30 * day, StreamTimeout: 10 * time.Minute},
		Cluster:        Cluster{ClusterName: "progressdb", Shards: 16, OwnerTTL: 10 * time.Second, DeadAfter: 5 * time.Minute},
		IdempotencyTTL: day,
	}
	if c != want {
		t.Errorf("defaults:\n got %+v\nwant %+v", c, want)
	}
}

func TestLoadDerivedDefaults(t *testing.T) {
	t.Run("message period follows period", func(t *testing.T) {
		c := mustLoad(t, "PROGRESSDB_RETENTION_PERIOD=7d")
		if c.Retention.MessagePeriod != 7*day {
			t.Errorf("MessagePeriod = %v, want 7d", c.Retention.MessagePeriod)
		}
	})
	t.Run("message period set on its own", func(t *testing.T) {
		c := mustLoad(t, "PROGRESSDB_RETENTION_PERIOD=7d", "PROGRESSDB_RETENTION_MESSAGE_PERIOD=2d")
		if c.Retention.Period != 7*day || c.Retention.MessagePeriod != 2*day {
			t.Errorf("Period, MessagePeriod = %v, %v; want 7d, 2d", c.Retention.Period, c.Retention.MessagePeriod)
		}
	})
	t.Run("audit and lease paths follow the db path", func(t *testing.T) {
		c := mustLoad(t, "PROGRESSDB_DB_PATH=/srv/chat")
		if got, want := c.Retention.AuditPath, filepath.Join("/srv/chat", "purge_audit"); got != want {
			t.Errorf("AuditPath = %q, want %q", got, want)
		}
		if got, want := c.Retention.LeasePath, filepath.Join("/srv/chat", "purge_audit", "retention.lock"); got != want {
			t.Errorf("LeasePath = %q, want %q", got, want)
		}
	})
	t.Run("lease path follows an explicit audit path", func(t *testing.T) {
		c := mustLoad(t, "PROGRESSDB_DB_PATH=/srv/chat", "PROGRESSDB_RETENTION_AUDIT_PATH=/backup/audit")
		if got, want := c.Retention.LeasePath, filepath.Join("/backup/audit", "retention.lock"); got != want {
			t.Errorf("LeasePath = %q, want %q", got, want)
		}
	})
	t.Run("explicit lease path wins", func(t *testing.T) {
		c := mustLoad(t, "PROGRESSDB_RETENTION_LEASE_PATH=/run/progressdb.lock")
		if c.Retention.LeasePath != "/run/progressdb.lock" {
			t.Errorf("LeasePath = %q", c.Retention.LeasePath)
		}
	})
	t.Run("empty value means default", func(t *testing.T) {
		c := mustLoad(t, "PROGRESSDB_RETENTION_PERIOD=", "PROGRESSDB_RETENTION_MESSAGE_PERIOD=")
		if c.Retention.Period != 30*day || c.Retention.MessagePeriod != 30*day {
			t.Errorf("Period, MessagePeriod = %v, %v; want 30d", c.Retention.Period, c.Retention.MessagePeriod)
		}
	})
}

func TestLoadEveryVariable(t *testing.T) {
	pem := writePEM(t)
	c := mustLoad(t,
		"PROGRESSDB_DB_PATH=/var/lib/progressdb",
		"PROGRESSDB_ADDR=:9090",
		"PROGRESSDB_ADMIN_TOKEN=admin-secret",
		"PROGRESSDB_API_KEY=api-secret",
		"PROGRESSDB_LOG_LEVEL=debug",
		"PROGRESSDB_LOG_FORMAT=json",
		"PROGRESSDB_LOG_SINK=file:/var/log/progressdb.log",
		"PROGRESSDB_RETENTION_ENABLED=true",
		"PROGRESSDB_RETENTION_PERIOD=1d12h",
		"PROGRESSDB_RETENTION_MESSAGE_PERIOD=90m",
		"PROGRESSDB_RETENTION_CRON=@every 1h",
		"PROGRESSDB_RETENTION_MIN_PERIOD=30m",
		"PROGRESSDB_RETENTION_ALLOW_SHORT_PERIOD=true",
		"PROGRESSDB_RETENTION_DRY_RUN=1",
		"PROGRESSDB_RETENTION_AUDIT_PATH=/backup/audit",
		"PROGRESSDB_RETENTION_LEASE_PATH=/backup/lease",
		"PROGRESSDB_RETENTION_LEASE_TTL=30s",
		"PROGRESSDB_RETENTION_BATCH_SIZE=250",
		"PROGRESSDB_RETENTION_BATCH_PAUSE=50ms",
		"PROGRESSDB_RETENTION_MAX_ITEMS=10000",
		"PROGRESSDB_RETENTION_RUN_MISSED=false",
		"PROGRESSDB_RETENTION_YIELD_TO_WRITES=false",
		"PROGRESSDB_RETENTION_ERASE=false",
		"PROGRESSDB_RETENTION_ERASE_RATE=8",
		"PROGRESSDB_RETENTION_ORPHAN_GRACE=2h",
		"PROGRESSDB_ATTACHMENTS_URL=s3://chat-files?region=eu-west-1",
		"PROGRESSDB_ATTACHMENT_MAX_BYTES=1048576",
		"PROGRESSDB_BACKUP_PATH=/backup/progressdb",
		"PROGRESSDB_BACKUP_CRON=@every 6h",
		"PROGRESSDB_BACKUP_KEEP=7d",
		"PROGRESSDB_BACKUP_STREAM_TIMEOUT=90s",
		"PROGRESSDB_CLUSTER_ETCD=https://10.0.0.5:2379,https://10.0.0.6:2379",
		"PROGRESSDB_CLUSTER_NAME=chat-eu",
		"PROGRESSDB_NODE_ID=node-1",
		"PROGRESSDB_ADVERTISE_URL=http://10.0.0.7:9090",
		"PROGRESSDB_CLUSTER_SECRET=0123456789abcdef",
		"PROGRESSDB_CLUSTER_SHARDS=32",
		"PROGRESSDB_CLUSTER_LEASE_TTL=15s",
		"PROGRESSDB_CLUSTER_ETCD_CA_FILE="+pem,
		"PROGRESSDB_CLUSTER_ETCD_CERT_FILE="+pem,
		"PROGRESSDB_CLUSTER_ETCD_KEY_FILE="+pem,
		"PROGRESSDB_IDEMPOTENCY_TTL=2h",
	)
	want := Config{
		IdempotencyTTL:     2 * time.Hour,
		DBPath:             "/var/lib/progressdb",
		Addr:               ":9090",
		AdminToken:         "admin-secret",
		APIKey:             "api-secret",
		LogLevel:           "debug",
		LogFormat:          "json",
		LogSink:            "file:/var/log/progressdb.log",
		AttachmentsURL:     "s3://chat-files?region=eu-west-1",
		AttachmentMaxBytes: 1 << 20,
		Retention: Retention{
			Enabled:          true,
			Period:           36 * time.Hour,
			MessagePeriod:    90 * time.Minute,
			Cron:             "@every 1h",
			MinPeriod:        30 * time.Minute,
			AllowShortPeriod: true,
			DryRun:           true,
			AuditPath:        "/backup/audit",
			LeasePath:        "/backup/lease",
			LeaseTTL:         30 * time.Second,
			BatchSize:        250,
			BatchPause:       50 * time.Millisecond,
			MaxItems:         10000,
			RunMissed:        false,
			EraseRate:        8,
			OrphanGrace:      2 * time.Hour,
		},
		Backup:       Backup{Path: "/backup/progressdb", Schedule: "@every 6h", Keep: 7 * day, StreamTimeout: 90 * time.Second},
		NodeID:       "node-1",
		AdvertiseURL: "http://10.0.0.7:9090",
		Cluster: Cluster{Etcd: "https://10.0.0.5:2379,https://10.0.0.6:2379", ClusterName: "chat-eu",
			Secret: "0123456789abcdef", Shards: 32, OwnerTTL: 15 * time.Second, DeadAfter: 5 * time.Minute, EtcdCA: pem, EtcdCert: pem, EtcdKey: pem},
	}
	if c != want {
		t.Errorf("\n got %+v\nwant %+v", c, want)
	}
}

func TestLoadInvalid(t *testing.T) {
	tests := []struct {
		env      string // one NAME=value
		ruleHas  string
		extraEnv []string
	}{
		{"PROGRESSDB_ADDR=localhost", "host:port", nil},
		{"PROGRESSDB_ADDR=127.0.0.1:http", "host:port", nil},
		{"PROGRESSDB_ADDR=127.0.0.1:70000", "host:port", nil},
		{"PROGRESSDB_SERVER=127.0.0.1:8080", "http://", nil},
		{"PROGRESSDB_SERVER=ftp://db.example", "http://", nil},
		{"PROGRESSDB_SERVER=http://db.example/?x=1", "http://", nil},
		{"PROGRESSDB_LOG_LEVEL=verbose", "debug, info, warn or error", nil},
		{"PROGRESSDB_LOG_FORMAT=xml", "text, json or auto", nil},
		{"PROGRESSDB_LOG_SINK=syslog", "stderr or file:<path>", nil},
		{"PROGRESSDB_LOG_SINK=file:", "stderr or file:<path>", nil},
		{"PROGRESSDB_RETENTION_ENABLED=yes", "true or false", nil},
		{"PROGRESSDB_RETENTION_PERIOD=thirty days", "duration", nil},
		{"PROGRESSDB_RETENTION_PERIOD=-30d", "duration", nil},
		{"PROGRESSDB_RETENTION_PERIOD=0", "greater than 0", nil},
		{"PROGRESSDB_RETENTION_PERIOD=30m", "PROGRESSDB_RETENTION_ALLOW_SHORT_PERIOD", nil},
		{"PROGRESSDB_RETENTION_MESSAGE_PERIOD=1.5d", "whole number", nil},
		{"PROGRESSDB_RETENTION_MESSAGE_PERIOD=0s", "greater than 0", nil},
		{"PROGRESSDB_RETENTION_MESSAGE_PERIOD=10m", "PROGRESSDB_RETENTION_ALLOW_SHORT_PERIOD", nil},
		{"PROGRESSDB_RETENTION_CRON=every night", "cron", nil},
		{"PROGRESSDB_RETENTION_CRON=0 2 * * * *", "cron", nil},
		{"PROGRESSDB_RETENTION_CRON=@fortnightly", "cron", nil},
		{"PROGRESSDB_RETENTION_CRON=@every 0s", "at least 1s", nil},
		{"PROGRESSDB_RETENTION_CRON=@every 500ms", "at least 1s", []string{"PROGRESSDB_RETENTION_ALLOW_SHORT_PERIOD=true"}},
		{"PROGRESSDB_RETENTION_MIN_PERIOD=0", "PROGRESSDB_RETENTION_ALLOW_SHORT_PERIOD", nil},
		{"PROGRESSDB_RETENTION_MIN_PERIOD=0s", "greater than 0", nil},
		{"PROGRESSDB_RETENTION_CRON=CRON_TZ=Europe/Paris 0 2 * * *", "UTC", nil},
		{"PROGRESSDB_RETENTION_MIN_PERIOD=1 hour", "duration", nil},
		{"PROGRESSDB_RETENTION_ALLOW_SHORT_PERIOD=sure", "true or false", nil},
		{"PROGRESSDB_RETENTION_DRY_RUN=maybe", "true or false", nil},
		{"PROGRESSDB_RETENTION_LEASE_TTL=2s", "at least 3s", nil},
		{"PROGRESSDB_RETENTION_LEASE_TTL=5", "duration", nil},
		{"PROGRESSDB_RETENTION_BATCH_SIZE=0", "from 1 to 1000000", nil},
		{"PROGRESSDB_ATTACHMENTS_URL=ftp://files.example/x", "want one of file://", nil},
		{"PROGRESSDB_ATTACHMENTS_URL=attachments", "not a URL", nil},
		{"PROGRESSDB_ATTACHMENTS_URL=file://relative/dir", "absolute folder", nil},
		{"PROGRESSDB_ATTACHMENTS_URL=s3://", "bucket name", nil},
		{"PROGRESSDB_ATTACHMENTS_URL=file:///srv/db/files", "outside PROGRESSDB_DB_PATH", []string{"PROGRESSDB_DB_PATH=/srv/db"}},
		{"PROGRESSDB_ATTACHMENTS_URL=file:///srv", "outside PROGRESSDB_DB_PATH", []string{"PROGRESSDB_DB_PATH=/srv/db"}},
		{"PROGRESSDB_ATTACHMENT_MAX_BYTES=0", "from 1 to", nil},
		{"PROGRESSDB_ATTACHMENT_MAX_BYTES=-5", "from 1 to", nil},
		{"PROGRESSDB_ATTACHMENT_MAX_BYTES=2000000000000", "from 1 to", nil},
		{"PROGRESSDB_ATTACHMENT_MAX_BYTES=25MiB", "whole number", nil},
		{"PROGRESSDB_RETENTION_BATCH_SIZE=1000001", "from 1 to 1000000", nil},
		{"PROGRESSDB_RETENTION_BATCH_SIZE=1e3", "whole number", nil},
		{"PROGRESSDB_RETENTION_BATCH_SIZE=99999999999", "whole number", nil},
		{"PROGRESSDB_RETENTION_BATCH_PAUSE=-1s", "duration", nil},
		{"PROGRESSDB_RETENTION_BATCH_PAUSE=10s", "third of PROGRESSDB_RETENTION_LEASE_TTL", []string{"PROGRESSDB_RETENTION_LEASE_TTL=30s"}},
		{"PROGRESSDB_RETENTION_MAX_ITEMS=-1", "0 (no limit) or more", nil},
		{"PROGRESSDB_RETENTION_MAX_ITEMS=lots", "whole number", nil},
		{"PROGRESSDB_RETENTION_RUN_MISSED=2", "true or false", nil},
		{"PROGRESSDB_RETENTION_YIELD_TO_WRITES=sometimes", "true or false", nil},
		{"PROGRESSDB_RETENTION_MAX_AGE=90 days", "duration", nil},
		{"PROGRESSDB_RETENTION_MAX_AGE=-1d", "duration", nil},
		{"PROGRESSDB_RETENTION_MAX_AGE=30m", "PROGRESSDB_RETENTION_ALLOW_SHORT_PERIOD", nil},
		{"PROGRESSDB_RETENTION_MAX_MESSAGES=-5", "0 (off) or more", nil},
		{"PROGRESSDB_RETENTION_ORPHAN_GRACE=0", "greater than 0", []string{"PROGRESSDB_RETENTION_ALLOW_SHORT_PERIOD=true"}},
		{"PROGRESSDB_RETENTION_ORPHAN_GRACE=59m", "PROGRESSDB_RETENTION_ALLOW_SHORT_PERIOD", nil},
		{"PROGRESSDB_RETENTION_ORPHAN_GRACE=a day", "duration", nil},
		{"PROGRESSDB_RETENTION_MAX_MESSAGES=many", "whole number", nil},
		{"PROGRESSDB_RETENTION_EXPORT_PATH=/srv/chat/exports", "inside PROGRESSDB_DB_PATH", []string{"PROGRESSDB_DB_PATH=/srv/chat"}},
		{"PROGRESSDB_RETENTION_EXPORT_PATH=/srv/chat", "inside PROGRESSDB_DB_PATH", []string{"PROGRESSDB_DB_PATH=/srv/chat/"}},
		{"PROGRESSDB_RETENTION_EXPORT_PATH=/backup/audit/x", "inside PROGRESSDB_RETENTION_AUDIT_PATH", []string{"PROGRESSDB_RETENTION_AUDIT_PATH=/backup/audit"}},
		{"PROGRESSDB_RETENTION_ERASE=yes please", "true or false", nil},
		{"PROGRESSDB_RETENTION_ERASE_RATE=-1", "0 (unbounded) or more", nil},
		{"PROGRESSDB_RETENTION_ERASE_RATE=fast", "whole number", nil},
		{"PROGRESSDB_BACKUP_CRON=nightly", "cron", nil},
		{"PROGRESSDB_BACKUP_CRON=TZ=UTC 0 3 * * *", "UTC", nil},
		{"PROGRESSDB_BACKUP_CRON=@every 0s", "at least 1s", nil},
		{"PROGRESSDB_BACKUP_KEEP=0", "positive", nil},
		{"PROGRESSDB_BACKUP_KEEP=a month", "duration", nil},
		{"PROGRESSDB_BACKUP_STREAM_TIMEOUT=0", "at least 1s", nil},
		{"PROGRESSDB_BACKUP_STREAM_TIMEOUT=forever", "duration", nil},
		{"PROGRESSDB_IDEMPOTENCY_TTL=30s", "from 1m to 30d", nil},
		{"PROGRESSDB_IDEMPOTENCY_TTL=31d", "from 1m to 30d", nil},
		{"PROGRESSDB_IDEMPOTENCY_TTL=a day", "duration", nil},
	}
	for _, tt := range tests {
		t.Run(tt.env, func(t *testing.T) {
			name, value, _ := strings.Cut(tt.env, "=")
			_, err := Load(append([]string{tt.env}, tt.extraEnv...))
			var ce *Error
			if !errors.As(err, &ce) {
				t.Fatalf("Load: error %v (%T), want *Error", err, err)
			}
			if ce.Var != name || ce.Value != value {
				t.Errorf("Var, Value = %q, %q; want %q, %q", ce.Var, ce.Value, name, value)
			}
			if !strings.Contains(ce.Rule, tt.ruleHas) {
				t.Errorf("Rule = %q, want it to mention %q", ce.Rule, tt.ruleHas)
			}
			if msg := err.Error(); strings.Contains(msg, "\n") || !strings.HasPrefix(msg, name+"=") {
				t.Errorf("Error() = %q, want one line starting with %s=", msg, name)
			}
		})
	}
}

// Every variable of the spec's table is covered by TestLoadInvalid, except
// the free-form strings (paths and secrets).
func TestLoadInvalidCoversEveryVariable(t *testing.T) {
	freeForm := map[string]bool{VarDBPath: true, VarAdminToken: true, VarAPIKey: true, VarAuditPath: true, VarLeasePath: true,
		VarExportPath: true, VarAuditSigningKey: true, VarBackupPath: true, VarKEK: true, VarKeystorePath: true,
		VarAdminTokenFile: true, VarAPIKeyFile: true, VarKEKFile: true, VarClusterSecretFile: true}
	vars := fieldVars()
	if len(vars) != 63 {
		t.Fatalf("fieldVars has %d variables, want the 41 of the spec, CLUSTER_DEAD_AFTER of §15, ATTACHMENTS_URL and ATTACHMENT_MAX_BYTES of §16, ORPHAN_GRACE and IDEMPOTENCY_TTL of §7 (SERVER and BACKUP_STREAM_TIMEOUT of §10.1 among them), YIELD_TO_WRITES, ERASE_RATE, KEK and KEYSTORE_PATH of §12 (TestSealingInvalid), the four secrets' files of §12 (TestSecretFilesRefused), and the nine TLS files of §14 (TestTLSSettingsInvalid)", len(vars))
	}
	for _, pair := range (Config{}).Redacted() {
		name := pair[0]
		if freeForm[name] {
			continue
		}
		found := false
		for _, v := range vars {
			found = found || v == name
		}
		if !found {
			t.Errorf("Redacted names %s, which no field reads", name)
		}
	}
}

func TestExportPathBesideTheDatabase(t *testing.T) {
	for _, p := range []string{"/srv/chat-exports", "/srv/exports", "/srv"} {
		c := mustLoad(t, "PROGRESSDB_DB_PATH=/srv/chat", "PROGRESSDB_RETENTION_EXPORT_PATH="+p)
		if c.Retention.ExportPath != p {
			t.Errorf("ExportPath = %q, want %q", c.Retention.ExportPath, p)
		}
	}
}

func TestFirstParseErrorWins(t *testing.T) {
	_, err := Load([]string{"PROGRESSDB_RETENTION_MAX_ITEMS=x", "PROGRESSDB_RETENTION_ENABLED=x"})
	var ce *Error
	if !errors.As(err, &ce) || ce.Var != VarEnabled {
		t.Fatalf("err = %v, want the error of %s (first in order)", err, VarEnabled)
	}
}

func TestShortPeriod(t *testing.T) {
	tests := []struct {
		name    string
		env     []string
		wantErr string // variable named by the error, "" for success
	}{
		{"below default minimum", []string{"PROGRESSDB_RETENTION_PERIOD=30m"}, VarPeriod},
		{"equal to minimum", []string{"PROGRESSDB_RETENTION_PERIOD=1h"}, ""},
		{"allowed", []string{"PROGRESSDB_RETENTION_PERIOD=30m", "PROGRESSDB_RETENTION_ALLOW_SHORT_PERIOD=true"}, ""},
		{"message period below", []string{"PROGRESSDB_RETENTION_MESSAGE_PERIOD=59m"}, VarMessagePeriod},
		{"message period allowed", []string{"PROGRESSDB_RETENTION_MESSAGE_PERIOD=59m", "PROGRESSDB_RETENTION_ALLOW_SHORT_PERIOD=true"}, ""},
		{"raised minimum refuses default period", []string{"PROGRESSDB_RETENTION_MIN_PERIOD=60d"}, VarPeriod},
		{"zero minimum", []string{"PROGRESSDB_RETENTION_MIN_PERIOD=0"}, VarMinPeriod},
		{"zero minimum allowed", []string{"PROGRESSDB_RETENTION_MIN_PERIOD=0", "PROGRESSDB_RETENTION_PERIOD=1s", "PROGRESSDB_RETENTION_ALLOW_SHORT_PERIOD=true"}, ""},
		{"allow flag does not allow zero", []string{"PROGRESSDB_RETENTION_PERIOD=0s", "PROGRESSDB_RETENTION_ALLOW_SHORT_PERIOD=true"}, VarPeriod},
		{"max age off", []string{"PROGRESSDB_RETENTION_MAX_AGE=0"}, ""},
		{"max age below", []string{"PROGRESSDB_RETENTION_MAX_AGE=59m"}, VarMaxAge},
		{"max age allowed", []string{"PROGRESSDB_RETENTION_MAX_AGE=59m", "PROGRESSDB_RETENTION_ALLOW_SHORT_PERIOD=true"}, ""},
		{"max age at minimum", []string{"PROGRESSDB_RETENTION_MAX_AGE=1h"}, ""},
		{"orphan grace short", []string{"PROGRESSDB_RETENTION_ORPHAN_GRACE=30m"}, VarOrphanGrace},
		{"orphan grace short allowed", []string{"PROGRESSDB_RETENTION_ORPHAN_GRACE=1s", "PROGRESSDB_RETENTION_ALLOW_SHORT_PERIOD=true"}, ""},
		{"orphan grace apart from a raised minimum", []string{"PROGRESSDB_RETENTION_MIN_PERIOD=7d", "PROGRESSDB_RETENTION_PERIOD=30d", "PROGRESSDB_RETENTION_ORPHAN_GRACE=1h"}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Load(tt.env)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("Load: %v", err)
				}
				if c.Retention.Period <= 0 {
					t.Errorf("Period = %v", c.Retention.Period)
				}
				return
			}
			var ce *Error
			if !errors.As(err, &ce) || ce.Var != tt.wantErr {
				t.Fatalf("err = %v, want *Error for %s", err, tt.wantErr)
			}
		})
	}
	// The message names the variable that lifts the floor (spec §6).
	_, err := Load([]string{"PROGRESSDB_RETENTION_PERIOD=30m"})
	want := `PROGRESSDB_RETENTION_PERIOD="30m": is below PROGRESSDB_RETENTION_MIN_PERIOD (1h); set PROGRESSDB_RETENTION_ALLOW_SHORT_PERIOD=true to allow it`
	if err == nil || err.Error() != want {
		t.Errorf("err = %v\nwant %s", err, want)
	}
}

func TestDerivedValueNamedInError(t *testing.T) {
	// The default period is refused by a raised minimum; the error shows the
	// effective value, not an empty string.
	_, err := Load([]string{"PROGRESSDB_RETENTION_MIN_PERIOD=60d"})
	var ce *Error
	if !errors.As(err, &ce) || ce.Value != "30d" {
		t.Fatalf("err = %v, want Value 30d", err)
	}
}

func TestCronAccepted(t *testing.T) {
	for _, spec := range []string{"0 2 * * *", "*/15 * * * *", "@daily", "@hourly", "@every 1h", "@every 90s"} {
		c := mustLoad(t, "PROGRESSDB_RETENTION_CRON="+spec)
		if c.Retention.Cron != spec {
			t.Errorf("Cron = %q, want %q", c.Retention.Cron, spec)
		}
	}
}

func TestEnvironFromArgumentOnly(t *testing.T) {
	t.Setenv("PROGRESSDB_RETENTION_PERIOD", "garbage")
	c, err := Load([]string{"PROGRESSDB_ADDR=127.0.0.1:0"})
	if err != nil {
		t.Fatalf("Load read the process environment: %v", err)
	}
	if c.Addr != "127.0.0.1:0" {
		t.Errorf("Addr = %q", c.Addr)
	}
}

func TestRedacted(t *testing.T) {
	set := mustLoad(t, "PROGRESSDB_ADMIN_TOKEN=hunter2", "PROGRESSDB_API_KEY=k3y", "PROGRESSDB_RETENTION_PERIOD=1d12h",
		"PROGRESSDB_KEK="+testKEK, "PROGRESSDB_KEYSTORE_PATH=keys")
	unset := mustLoad(t)

	got := map[string]string{}
	var names []string
	for _, p := range set.Redacted() {
		got[p[0]] = p[1]
		names = append(names, p[0])
	}
	wantOrder := []string{
		VarDBPath, VarAddr, VarServer, VarAdminToken, VarAdminTokenFile, VarAPIKey, VarAPIKeyFile, VarLogLevel, VarLogFormat, VarLogSink,
		VarEnabled, VarPeriod, VarMessagePeriod, VarCron, VarMinPeriod, VarAllowShortPeriod, VarDryRun,
		VarAuditPath, VarLeasePath, VarLeaseTTL, VarBatchSize, VarBatchPause, VarMaxItems, VarRunMissed,
		VarYieldToWrites, VarMaxAge, VarMaxMessages, VarExportPath,
		VarErase, VarEraseRate, VarOrphanGrace, VarAuditSigningKey, VarKEK, VarKEKFile, VarKeystorePath, VarAttachmentsURL, VarAttachmentMaxBytes,
		VarBackupPath, VarBackupCron, VarBackupKeep, VarBackupStream, VarIdempotencyTTL, VarClusterEtcd, VarClusterName, VarNodeID, VarAdvertiseURL, VarClusterSecret, VarClusterSecretFile, VarClusterShards,
		VarClusterLeaseTTL, VarClusterDeadAfter, VarClusterEtcdCA, VarClusterEtcdCert, VarClusterEtcdKey,
		VarClusterTLSCA, VarClusterTLSCert, VarClusterTLSKey,
		VarTLSCert, VarTLSKey, VarTLSClientCA, VarTLSCA, VarTLSClientCert, VarTLSClientKey,
	}
	if strings.Join(names, ",") != strings.Join(wantOrder, ",") {
		t.Errorf("order:\n got %v\nwant %v", names, wantOrder)
	}
	for _, p := range set.Redacted() {
		if strings.Contains(p[1], "hunter2") || strings.Contains(p[1], "k3y") || strings.Contains(p[1], testKEK[len("base64key://"):]) {
			t.Errorf("%s leaks a secret: %q", p[0], p[1])
		}
	}
	checks := map[string]string{
		VarAdminToken:    "<redacted>",
		VarAPIKey:        "<redacted>",
		VarKEK:           "<redacted>",
		VarKeystorePath:  "keys",
		VarPeriod:        "1d12h",
		VarMessagePeriod: "1d12h",
		VarMinPeriod:     "1h",
		VarLeaseTTL:      "5m",
		VarBatchPause:    "0s",
		VarBatchSize:     "1000",
		VarRunMissed:     "true",
		VarYieldToWrites: "true",
		VarExportPath:    "<unset>",
		VarErase:         "true",
		VarEraseRate:     "32",
		VarOrphanGrace:   "1d",
		VarLeasePath:     filepath.Join("data", "purge_audit", "retention.lock"),
	}
	for name, want := range checks {
		if got[name] != want {
			t.Errorf("%s = %q, want %q", name, got[name], want)
		}
	}
	for _, p := range unset.Redacted() {
		if (p[0] == VarAdminToken || p[0] == VarAPIKey || p[0] == VarKEK || p[0] == VarKeystorePath) && p[1] != "<unset>" {
			t.Errorf("%s = %q, want <unset>", p[0], p[1])
		}
	}
}

func mustLoad(t *testing.T, environ ...string) Config {
	t.Helper()
	c, err := Load(environ)
	if err != nil {
		t.Fatalf("Load(%q): %v", environ, err)
	}
	return c
}

func mustAbs(t *testing.T, p string) string {
	t.Helper()
	abs, err := filepath.Abs(p)
	if err != nil {
		t.Fatal(err)
	}
	return abs
}
