package cli

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"testing"
)

// GET /admin/database of a restored copy, served by the built binary,
// names its origin as `restore --json` does; the original has none.
func TestRestoredCopyServesItsOrigin(t *testing.T) {
	h := newHarness(t)
	h.mustRun("seed", "--threads", "2")
	root := t.TempDir()
	archive := filepath.Join(root, "b.tar")
	h.mustRun("backup", "create", "--out", archive)
	audit := filepath.Join(root, "audit")
	if err := os.Mkdir(audit, 0o700); err != nil {
		t.Fatal(err)
	}
	copyDB := filepath.Join(root, "copy")
	var rep restoreReport
	if err := json.Unmarshal([]byte(h.mustRun("restore", archive, "--db", copyDB, "--audit", audit, "--json")), &rep); err != nil || rep.OriginID == "" {
		t.Fatalf("restore --json: %+v (%v)", rep, err)
	}
	get := func(db string) map[string]any {
		t.Helper()
		env := serverEnv(h, "PROGRESSDB_DB_PATH="+db, "PROGRESSDB_RETENTION_AUDIT_PATH="+audit)
		addr := startBinaryServer(t, env)
		req, _ := http.NewRequest(http.MethodGet, "http://"+addr+"/admin/database", nil)
		req.Header.Set("Authorization", "Bearer adm")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		var d map[string]any
		if err := json.NewDecoder(res.Body).Decode(&d); err != nil || res.StatusCode != http.StatusOK {
			t.Fatalf("GET /admin/database: %d, %v", res.StatusCode, err)
		}
		return d
	}
	if d := get(copyDB); d["origin_id"] != rep.OriginID || d["database_id"] != rep.DatabaseID {
		t.Errorf("the copy's /admin/database %v, want origin_id %s and database_id %s", d, rep.OriginID, rep.DatabaseID)
	}
	if d := get(h.dbPath); d["origin_id"] != nil {
		t.Errorf("the original's /admin/database names an origin: %v", d)
	}
}
