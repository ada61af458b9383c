package cli

import (
	"net/http"
	"testing"

	"github.com/progressdb/progressdb/audit"
)

// serveOnce starts the built binary's server with environ, waits until it
// answers /healthz, and stops it with SIGTERM: one start.
func serveOnce(t *testing.T, environ []string) {
	t.Helper()
	_, _, stop := startServeStop(t, environ, http.DefaultClient, "http")
	stop()
}

// formatRecords returns the headers of the format records in the trail.
func formatRecords(t *testing.T, root string) []audit.Header {
	t.Helper()
	steps, _, err := audit.Steps(root, audit.Head{})
	if err != nil {
		t.Fatal(err)
	}
	var out []audit.Header
	for _, st := range steps {
		if st.Header != nil && st.Header.Trigger == audit.TriggerFormat {
			out = append(out, *st.Header)
		}
	}
	return out
}

// The first start with a KEK on a plain database raises its format and
// leaves exactly one record of it (format 1 to 2) in the audit trail,
// which verifies; a second start writes none. encrypt-existing on a plain
// database records its raise too.
func TestFormatRaiseInTheTrail(t *testing.T) {
	environ := plainDatabase(t, 2)
	trail := envValue(environ, "PROGRESSDB_RETENTION_AUDIT_PATH")
	for start := 1; start <= 2; start++ {
		serveOnce(t, environ)
		got := formatRecords(t, trail)
		if len(got) != 1 || got[0].FormatFrom != 1 || got[0].FormatTo != 2 {
			t.Fatalf("after start %d: format records %+v, want one from 1 to 2", start, got)
		}
		if code, out, errOut := runBinary(t, environ, "audit", "verify", trail); code != exitOK {
			t.Fatalf("audit verify after start %d: exit %d\n%s%s", start, code, out, errOut)
		}
	}

	environ = plainDatabase(t, 2)
	trail = envValue(environ, "PROGRESSDB_RETENTION_AUDIT_PATH")
	if code, out, errOut := runBinary(t, environ, "keys", "encrypt-existing"); code != exitOK {
		t.Fatalf("encrypt-existing: exit %d\n%s%s", code, out, errOut)
	}
	if got := formatRecords(t, trail); len(got) != 1 || got[0].FormatTo != 2 {
		t.Fatalf("after encrypt-existing: format records %+v, want one to 2", got)
	}
	if code, out, errOut := runBinary(t, environ, "audit", "verify", trail); code != exitOK {
		t.Fatalf("audit verify after encrypt-existing: exit %d\n%s%s", code, out, errOut)
	}
}

// envValue is the value of name in environ, "" when unset.
func envValue(environ []string, name string) string {
	v := ""
	for _, kv := range environ {
		if len(kv) > len(name) && kv[:len(name)+1] == name+"=" {
			v = kv[len(name)+1:]
		}
	}
	return v
}
