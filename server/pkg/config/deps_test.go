package config

import (
	"os/exec"
	"strings"
	"testing"
)

// TestDependsOnNoInternalPackage: configuration is a public package that
// every command reads first; it must not lean on an internal package, nor
// pull the key store (Pebble and the cloud KMS drivers) into it.
func TestDependsOnNoInternalPackage(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	for _, p := range strings.Fields(string(out)) {
		if strings.Contains(p, "/internal/") || strings.HasSuffix(p, "/server/pkg/keystore") ||
			strings.HasPrefix(p, "github.com/cockroachdb/pebble") || strings.HasPrefix(p, "gocloud.dev") {
			t.Errorf("config depends on %s", p)
		}
	}
}
