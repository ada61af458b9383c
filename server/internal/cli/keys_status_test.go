package cli

import (
	"encoding/json"
	"strings"
	"testing"
)

// `keys status` says how many threads are sealed and how many still
// plain: all plain on a database written before sealing, all sealed after
// `keys encrypt-existing`, the same through a running server (GET
// /admin/database?threads=true) as on the folder. Before, nothing said
// how much of a database was still plain.
func TestKeysStatusCountsSealedAndPlainThreads(t *testing.T) {
	environ := plainDatabase(t, 30)
	h := &harness{t: t, environ: environ}
	status := func(h *harness) keysStatusReport {
		t.Helper()
		var rep keysStatusReport
		if err := json.Unmarshal([]byte(h.mustRun("keys", "status", "--json")), &rep); err != nil {
			t.Fatal(err)
		}
		return rep
	}
	if rep := status(h); rep.Threads.Sealed != 0 || rep.Threads.Plain != 30 || rep.Database.Path == "" {
		t.Fatalf("before sealing: %+v, want 30 plain", rep)
	}
	if out := h.mustRun("keys", "status"); !strings.Contains(out, "threads:         0 sealed, 30 plain") || !strings.Contains(out, "keys encrypt-existing") {
		t.Fatalf("before sealing:\n%s", out)
	}
	h.mustRun("keys", "encrypt-existing")
	if rep := status(h); rep.Threads.Sealed != 30 || rep.Threads.Plain != 0 {
		t.Fatalf("after encrypt-existing: %+v, want 30 sealed", rep)
	}

	addr := startServer(t, append(environ, "PROGRESSDB_ADMIN_TOKEN=adm"))
	shell := &harness{t: t, environ: append(environ, "PROGRESSDB_ADDR="+addr, "PROGRESSDB_ADMIN_TOKEN=adm")}
	if rep := status(shell); rep.Threads.Sealed != 30 || rep.Threads.Plain != 0 || rep.Database.Server != "http://"+addr || rep.Database.ID == "" {
		t.Fatalf("through the server: %+v, want 30 sealed, naming the server", rep)
	}
}
