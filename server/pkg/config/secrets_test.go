package config

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// writeSecret writes content to a file of mode perm and returns its path.
func writeSecret(t *testing.T, content string, perm os.FileMode) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(p, []byte(content), perm); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, perm); err != nil { // past the umask
		t.Fatal(err)
	}
	return p
}

// Each secret's …_FILE fills the secret from the file, without the
// trailing newline an editor or echo leaves, and config check shows the
// path, never the content.
func TestSecretFilesAreRead(t *testing.T) {
	dir := t.TempDir()
	c := mustLoad(t,
		"PROGRESSDB_ADMIN_TOKEN_FILE="+writeSecret(t, "admin-from-file\n", 0o600),
		"PROGRESSDB_API_KEY_FILE="+writeSecret(t, "key-from-file\r\n", 0o600),
		"PROGRESSDB_KEK_FILE="+writeSecret(t, testKEK+"\n", 0o600),
		"PROGRESSDB_KEYSTORE_PATH="+filepath.Join(dir, "keys"),
		"PROGRESSDB_DB_PATH="+filepath.Join(dir, "data"),
	)
	if c.AdminToken != "admin-from-file" || c.APIKey != "key-from-file" || c.KEK != testKEK {
		t.Errorf("secrets from files: admin %q, api key %q, kek ok %v", c.AdminToken, c.APIKey, c.KEK == testKEK)
	}
	node := mustLoad(t, "PROGRESSDB_CLUSTER_ETCD=http://127.0.0.1:1",
		"PROGRESSDB_NODE_ID=n1", "PROGRESSDB_ADVERTISE_URL=http://127.0.0.1:2",
		"PROGRESSDB_CLUSTER_SECRET_FILE="+writeSecret(t, "a-cluster-secret-of-some-length", 0o400))
	if node.Cluster.Secret != "a-cluster-secret-of-some-length" {
		t.Errorf("cluster secret from its file: %q", node.Cluster.Secret)
	}
	for _, p := range node.Redacted() {
		if strings.Contains(p[1], "a-cluster-secret") {
			t.Errorf("%s shows the cluster secret", p[0])
		}
	}
	shown := map[string]string{}
	for _, p := range c.Redacted() {
		shown[p[0]] = p[1]
		for _, s := range []string{"admin-from-file", "key-from-file", testKEK[len("base64key://"):]} {
			if strings.Contains(p[1], s) {
				t.Errorf("%s shows a secret: %q", p[0], p[1])
			}
		}
	}
	for _, name := range []string{VarAdminToken, VarAPIKey, VarKEK} {
		if shown[name] != "<redacted>" {
			t.Errorf("%s = %q, want <redacted>", name, shown[name])
		}
	}
	if shown[VarKEKFile] != c.KEKFile || c.KEKFile == "" {
		t.Errorf("%s = %q, want the file's path %q", VarKEKFile, shown[VarKEKFile], c.KEKFile)
	}
}

// A secret set both ways, or a file that cannot serve, is refused naming
// the variable and the path, never the content.
func TestSecretFilesRefused(t *testing.T) {
	good := writeSecret(t, "s3cr3t-token\n", 0o600)
	tests := []struct {
		name, env, wantVar, ruleHas string
	}{
		{"both admin token forms", "PROGRESSDB_ADMIN_TOKEN=s3cr3t-token", VarAdminTokenFile, VarAdminToken},
		{"both API key forms", "PROGRESSDB_API_KEY=s3cr3t-token", VarAPIKeyFile, VarAPIKey},
		{"both KEK forms", "PROGRESSDB_KEK=" + testKEK, VarKEKFile, VarKEK},
		{"both cluster secret forms", "PROGRESSDB_CLUSTER_SECRET=s3cr3t-token", VarClusterSecretFile, VarClusterSecret},
	}
	for _, tc := range tests {
		_, err := Load([]string{tc.env, tc.wantVar + "=" + good})
		var ce *Error
		if !errors.As(err, &ce) || ce.Var != tc.wantVar || !strings.Contains(ce.Rule, tc.ruleHas) || ce.Value != good {
			t.Errorf("%s: err = %v, want %s=%q naming %s", tc.name, err, tc.wantVar, good, tc.ruleHas)
		}
		if err != nil && strings.Contains(err.Error(), "s3cr3t") {
			t.Errorf("%s: the error shows the secret: %v", tc.name, err)
		}
	}
	files := []struct {
		name, path, ruleHas string
	}{
		{"missing file", filepath.Join(t.TempDir(), "absent"), "no such file"},
		{"empty file", writeSecret(t, "\n", 0o600), "empty"},
		{"a folder", t.TempDir(), "not a regular file"},
		{"a token with a tab inside", writeSecret(t, "s3cr3t\ttoken\n", 0o600), "control characters"},
	}
	for _, f := range files {
		_, err := Load([]string{"PROGRESSDB_ADMIN_TOKEN_FILE=" + f.path})
		var ce *Error
		if !errors.As(err, &ce) || ce.Var != VarAdminTokenFile || ce.Value != f.path || !strings.Contains(ce.Rule, f.ruleHas) {
			t.Errorf("%s: err = %v, want %s=%q: …%s…", f.name, err, VarAdminTokenFile, f.path, f.ruleHas)
		}
		if err != nil && strings.Contains(err.Error(), "s3cr3t") {
			t.Errorf("%s: the error shows the secret: %v", f.name, err)
		}
	}
}

// A secret's file the group or others can read earns a warning naming the
// variable and how to fix it, like an open database folder does; sealing
// without an audit signing key earns one naming that key.
func TestWarnings(t *testing.T) {
	dir := t.TempDir()
	open := writeSecret(t, "s3cr3t-token", 0o644)
	closed := writeSecret(t, "an-api-key", 0o600)
	c := mustLoad(t, "PROGRESSDB_ADMIN_TOKEN_FILE="+open, "PROGRESSDB_API_KEY_FILE="+closed,
		"PROGRESSDB_KEK="+testKEK, "PROGRESSDB_KEYSTORE_PATH="+filepath.Join(dir, "keys"),
		"PROGRESSDB_DB_PATH="+filepath.Join(dir, "data"))
	var got []string
	for _, w := range c.Warnings() {
		got = append(got, w.Event+" "+w.String())
	}
	joined := strings.Join(got, "\n")
	if len(got) != 2 || !strings.Contains(joined, "secret_file_readable_by_others "+VarAdminTokenFile) ||
		!strings.Contains(joined, "chmod 600 "+open) || !strings.Contains(joined, "sealing_without_signing_key "+VarAuditSigningKey) {
		t.Errorf("warnings:\n%s\nwant the open admin token file and the missing signing key", joined)
	}
	c = mustLoad(t, "PROGRESSDB_API_KEY_FILE="+closed, "PROGRESSDB_AUDIT_SIGNING_KEY="+closed,
		"PROGRESSDB_KEK="+testKEK, "PROGRESSDB_KEYSTORE_PATH="+filepath.Join(dir, "keys"),
		"PROGRESSDB_DB_PATH="+filepath.Join(dir, "data"))
	if w := c.Warnings(); len(w) != 0 {
		t.Errorf("warnings = %v, want none", w)
	}
}
