package cli

import (
	"bytes"
	"encoding/base64"
	"path/filepath"
	"strings"
	"testing"
)

// PROGRESSDB_KEK and PROGRESSDB_KEYSTORE_PATH through the built binary
// (spec §12): config check and serve refuse a bad one with exit 2 naming
// the variable, never showing the key; config check shows a good KEK as
// <redacted>.
func TestSealingSettingsThroughTheBinary(t *testing.T) {
	dir := t.TempDir()
	db := filepath.Join(dir, "data")
	key := base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{0x42}, 32))
	short := base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{0x42}, 16))
	base := []string{"PROGRESSDB_DB_PATH=" + db, "PROGRESSDB_ADDR=127.0.0.1:0"}
	for _, tt := range []struct {
		name, names, secret string
		env                 []string
	}{
		{"short key", "PROGRESSDB_KEK", short, []string{"PROGRESSDB_KEK=base64key://" + short, "PROGRESSDB_KEYSTORE_PATH=" + filepath.Join(dir, "keys")}},
		{"empty key", "PROGRESSDB_KEK", "", []string{"PROGRESSDB_KEK=base64key://", "PROGRESSDB_KEYSTORE_PATH=" + filepath.Join(dir, "keys")}},
		{"undecodable key", "PROGRESSDB_KEK", "%%%not-base64%%%", []string{"PROGRESSDB_KEK=base64key://%%%not-base64%%%", "PROGRESSDB_KEYSTORE_PATH=" + filepath.Join(dir, "keys")}},
		{"no key store", "PROGRESSDB_KEYSTORE_PATH", key, []string{"PROGRESSDB_KEK=base64key://" + key}},
		{"key store inside DB_PATH", "PROGRESSDB_KEYSTORE_PATH", key, []string{"PROGRESSDB_KEK=base64key://" + key, "PROGRESSDB_KEYSTORE_PATH=" + filepath.Join(db, "keys")}},
	} {
		for _, cmd := range [][]string{{"config", "check"}, {"serve"}} {
			code, out, errOut := runBinary(t, append(append([]string{}, base...), tt.env...), cmd...)
			if code != exitUsage || !strings.Contains(errOut, tt.names) {
				t.Errorf("%s, %s: exit %d, stderr %q; want 2 naming %s", tt.name, cmd[0], code, errOut, tt.names)
			}
			if tt.secret != "" && strings.Contains(out+errOut, tt.secret) {
				t.Errorf("%s, %s: the output shows the key:\n%s%s", tt.name, cmd[0], out, errOut)
			}
		}
	}
	code, out, errOut := runBinary(t, append(base, "PROGRESSDB_KEK=base64key://"+key, "PROGRESSDB_KEYSTORE_PATH="+filepath.Join(dir, "keys")),
		"config", "check")
	if code != exitOK || !strings.Contains(out, "PROGRESSDB_KEK=<redacted>\n") || strings.Contains(out+errOut, key) {
		t.Fatalf("config check: exit %d\n%s%s", code, out, errOut)
	}
}
