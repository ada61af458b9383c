package cli

import (
	"context"
	"encoding/base64"
	"strings"
	"testing"

	"github.com/progressdb/progressdb/server/pkg/keystore"
)

// generate-kek prints one base64key:// URL of 32 fresh random bytes and
// nothing else, so that $(progressdb keys generate-kek) is the key; the
// keeper it names opens; two runs never print the same key.
func TestKeysGenerateKEK(t *testing.T) {
	seen := map[string]bool{}
	for range 2 {
		code, out, errOut := runBinary(t, nil, "keys", "generate-kek")
		if code != exitOK || errOut != "" {
			t.Fatalf("exit %d, stderr %q", code, errOut)
		}
		url, ok := strings.CutSuffix(out, "\n")
		if !ok || strings.ContainsAny(url, "\n \t") {
			t.Fatalf("stdout is not one line holding the URL alone: %q", out)
		}
		key, ok := strings.CutPrefix(url, "base64key://")
		if !ok {
			t.Fatalf("not a base64key:// URL: %q", url)
		}
		raw, err := base64.StdEncoding.DecodeString(key)
		if err != nil || len(raw) != 32 {
			t.Fatalf("key is not the standard base64 of 32 bytes: %d bytes, %v", len(raw), err)
		}
		if _, err := keystore.OpenKEK(context.Background(), url); err != nil {
			t.Fatalf("the printed URL does not open: %v", err)
		}
		if seen[url] {
			t.Fatal("two runs printed the same key")
		}
		seen[url] = true
	}
	code, out, errOut := runBinary(t, nil, "keys", "generate-kek", "extra")
	if code != exitUsage || out != "" || !strings.Contains(errOut, `unexpected argument "extra"`) {
		t.Fatalf("with an argument: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
}
