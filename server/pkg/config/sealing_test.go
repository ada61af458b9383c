package config

import (
	"encoding/base64"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// testKEK is a local KEK of 32 bytes (0x01 each).
var testKEK = "base64key://" + base64.StdEncoding.EncodeToString([]byte(strings.Repeat("\x01", 32)))

// Every refusal of spec §12's two settings names the variable, and none
// shows the KEK's value.
func TestSealingInvalid(t *testing.T) {
	dir := t.TempDir()
	db := filepath.Join(dir, "data")
	if err := os.MkdirAll(db, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(db, "inner"), filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	short := "base64key://" + base64.StdEncoding.EncodeToString(make([]byte, 16))
	long := "base64key://" + base64.StdEncoding.EncodeToString(make([]byte, 48))
	dbVar := "PROGRESSDB_DB_PATH=" + db
	keys := "PROGRESSDB_KEYSTORE_PATH=" + filepath.Join(dir, "keys")
	tests := []struct {
		name    string
		env     []string
		wantVar string
		ruleHas string
	}{
		{"blank KEK", []string{dbVar, keys, "PROGRESSDB_KEK= "}, VarKEK, "empty"},
		{"no key", []string{dbVar, keys, "PROGRESSDB_KEK=base64key://"}, VarKEK, "holds no key"},
		{"short key", []string{dbVar, keys, "PROGRESSDB_KEK=" + short}, VarKEK, "16 bytes"},
		{"long key", []string{dbVar, keys, "PROGRESSDB_KEK=" + long}, VarKEK, "48 bytes"},
		{"undecodable key", []string{dbVar, keys, "PROGRESSDB_KEK=base64key://!!not base64!!"}, VarKEK, "not base64"},
		{"unknown scheme", []string{dbVar, keys, "PROGRESSDB_KEK=vault://k"}, VarKEK, "unknown scheme"},
		{"no URL", []string{dbVar, keys, "PROGRESSDB_KEK=hunter2hunter2"}, VarKEK, "not a URL"},
		{"KEK without key store", []string{dbVar, "PROGRESSDB_KEK=" + testKEK}, VarKeystorePath, "required with PROGRESSDB_KEK"},
		{"key store without KEK", []string{dbVar, keys}, VarKeystorePath, "PROGRESSDB_KEK is not"},
		{"key store is DB_PATH", []string{dbVar, "PROGRESSDB_KEK=" + testKEK, "PROGRESSDB_KEYSTORE_PATH=" + db}, VarKeystorePath, "must not be PROGRESSDB_DB_PATH"},
		{"key store inside DB_PATH", []string{dbVar, "PROGRESSDB_KEK=" + testKEK, "PROGRESSDB_KEYSTORE_PATH=" + filepath.Join(db, "keys")}, VarKeystorePath, "inside it"},
		{"key store holds DB_PATH", []string{dbVar, "PROGRESSDB_KEK=" + testKEK, "PROGRESSDB_KEYSTORE_PATH=" + dir}, VarKeystorePath, "hold it"},
		{"key store inside DB_PATH through a link", []string{dbVar, "PROGRESSDB_KEK=" + testKEK, "PROGRESSDB_KEYSTORE_PATH=" + filepath.Join(dir, "link")}, VarKeystorePath, "inside it"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Load(tt.env)
			var ce *Error
			if !errors.As(err, &ce) {
				t.Fatalf("Load: %v, want *Error", err)
			}
			if ce.Var != tt.wantVar || !strings.Contains(ce.Rule, tt.ruleHas) {
				t.Errorf("error %q: want %s and a rule mentioning %q", err, tt.wantVar, tt.ruleHas)
			}
			for _, kv := range tt.env {
				if v, ok := strings.CutPrefix(kv, "PROGRESSDB_KEK="); ok && len(strings.TrimSpace(v)) > len("base64key://") &&
					strings.Contains(err.Error(), strings.TrimPrefix(v, "base64key://")) {
					t.Errorf("error %q shows the KEK", err)
				}
			}
		})
	}
}

func TestSealingAccepted(t *testing.T) {
	dir := t.TempDir()
	c := mustLoad(t, "PROGRESSDB_DB_PATH="+filepath.Join(dir, "data"), "PROGRESSDB_KEK="+testKEK,
		"PROGRESSDB_KEYSTORE_PATH="+filepath.Join(dir, "data-keys"))
	if c.KEK != testKEK || c.KeystorePath != filepath.Join(dir, "data-keys") {
		t.Fatalf("KEK, KeystorePath = %q, %q", c.KEK, c.KeystorePath)
	}
	// A cluster node seals too (spec §11.1): one key store per shard
	// under the path.
	c = mustLoad(t, "PROGRESSDB_DB_PATH="+filepath.Join(dir, "data"), "PROGRESSDB_KEK="+testKEK,
		"PROGRESSDB_KEYSTORE_PATH="+filepath.Join(dir, "data-keys"), "PROGRESSDB_CLUSTER_ETCD=http://127.0.0.1:2379",
		"PROGRESSDB_NODE_ID=n1", "PROGRESSDB_ADVERTISE_URL=http://127.0.0.1:8080", "PROGRESSDB_CLUSTER_SECRET=0123456789abcdef0123")
	if c.KEK != testKEK || !c.Cluster.Enabled() {
		t.Fatalf("cluster node: KEK set %v, cluster %v", c.KEK != "", c.Cluster.Enabled())
	}
}
