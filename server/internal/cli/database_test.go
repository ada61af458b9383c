package cli

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/progressdb/progressdb/server/pkg/store"
)

// folderID is the identity a database folder records.
func folderID(t *testing.T, path string) string {
	t.Helper()
	id, err := store.FolderDatabaseID(path)
	if err != nil || id == "" {
		t.Fatalf("identity of %s: %q %v", path, id, err)
	}
	return id
}

// createThread creates thread tid on the server at addr (open /v1).
func createThread(t *testing.T, addr, tid string) {
	t.Helper()
	res, err := http.Post("http://"+addr+"/v1/threads", "application/json",
		strings.NewReader(`{"id":"`+tid+`","title":"x","author":"u"}`))
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusCreated {
		t.Fatalf("create %s at %s: %d", tid, addr, res.StatusCode)
	}
}

// The reproduction: an operator's shell names the server at
// PROGRESSDB_ADDR, and runs backup create from a folder that holds an
// unrelated ./data. Before, the command backed up the local database
// without a word; now it acts on the server only when told to (--server or
// PROGRESSDB_SERVER, never opening ./data), and every output names the
// database it acted on, so the local one is never taken for the server's.
func TestCommandsActOnTheDatabaseTheyAreToldOf(t *testing.T) {
	served := newHarness(t)
	served.mustRun("seed", "--threads", "30", "--messages", "1")
	addr := startBinaryServer(t, serverEnv(served))
	servedID := folderID(t, served.dbPath)
	servedAbs, _ := filepath.Abs(served.dbPath)

	local := newHarness(t)
	local.mustRun("seed", "--threads", "4", "--messages", "1")
	localID := folderID(t, local.dbPath)
	cwd := filepath.Dir(local.dbPath) // holds ./data
	shell := []string{"PATH=" + os.Getenv("PATH"), "PROGRESSDB_ADDR=" + addr, "PROGRESSDB_ADMIN_TOKEN=adm", "PROGRESSDB_LOG_LEVEL=warn"}

	backupOf := func(environ []string, args ...string) backupReport {
		t.Helper()
		code, out, errOut := runBinaryIn(t, cwd, environ, append([]string{"backup", "create", "--json"}, args...)...)
		var rep backupReport
		if code != exitOK || json.Unmarshal([]byte(out), &rep) != nil {
			t.Fatalf("backup create %v: exit %d\n%s%s", args, code, out, errOut)
		}
		return rep
	}
	// No server named: the folder PROGRESSDB_DB_PATH names (./data here),
	// and the output says so.
	rep := backupOf(shell, "--out", "z.tar")
	if rep.Manifest.Threads != 4 || rep.Database.ID != localID || rep.Database.Path != "./data" || rep.Database.Server != "" {
		t.Fatalf("backup of ./data: %d threads, database %+v; want 4 of %s at ./data", rep.Manifest.Threads, rep.Database, localID)
	}
	// PROGRESSDB_SERVER: the server's database, ./data untouched.
	rep = backupOf(append(shell, "PROGRESSDB_SERVER=http://"+addr), "--out", "z2.tar")
	if rep.Manifest.Threads != 30 || rep.Database.ID != servedID || rep.Database.Server != "http://"+addr || rep.Database.Path != servedAbs {
		t.Fatalf("backup through PROGRESSDB_SERVER: %d threads, database %+v; want 30 of %s at %s", rep.Manifest.Threads, rep.Database, servedID, servedAbs)
	}
	if _, err := os.Stat(filepath.Join(cwd, "z2.tar")); err != nil {
		t.Fatalf("the streamed backup is not where --out said: %v", err)
	}
	// --server, for every command that reads or changes a database.
	srv := "--server=http://" + addr
	for _, args := range [][]string{
		{"retention", "status", "--json", srv},
		{"legal-hold", "list", "--json", srv},
		{"retention", "pause", "--json", srv},
		{"retention", "resume", "--json", srv},
	} {
		code, out, errOut := runBinaryIn(t, cwd, shell, args...)
		var got struct {
			Database database `json:"database"`
		}
		if code != exitOK || json.Unmarshal([]byte(out), &got) != nil || got.Database.ID != servedID || got.Database.Server != "http://"+addr {
			t.Fatalf("%v: exit %d, database %+v, want %s\n%s%s", args, code, got.Database, servedID, out, errOut)
		}
	}
	code, out, errOut := runBinaryIn(t, cwd, shell, "retention", "run", "--dry-run", srv)
	if code != exitOK || !strings.Contains(out, "database:        "+servedID+" at "+servedAbs+", through the server at http://"+addr) {
		t.Fatalf("retention run --server: exit %d\n%s%s", code, out, errOut)
	}
	// Nothing at ./data and no server named: an error that says how to
	// name one, not a guess.
	code, _, errOut = runBinaryIn(t, t.TempDir(), shell, "backup", "create", "--out", "z.tar")
	if code != exitFailed || !strings.Contains(errOut, "no database at ./data") || !strings.Contains(errOut, "--server URL") {
		t.Fatalf("backup create with nothing at ./data: exit %d, %s", code, errOut)
	}
	code, _, errOut = runBinaryIn(t, cwd, shell, "thread", "get", "x", "--server", "db.example:8080")
	if code != exitUsage || !strings.Contains(errOut, "--server") {
		t.Fatalf("--server that is no URL: exit %d, %s", code, errOut)
	}
}

// A folder held by a running process is acted on through the server at
// PROGRESSDB_ADDR only when that server proves, by the identity the folder
// records, that it serves the folder. Before, a shell whose
// PROGRESSDB_ADDR named another server acted on that server's database:
// legal-hold set put a hold on a thread of the wrong database.
func TestAHeldFolderIsActedOnOnlyThroughItsServer(t *testing.T) {
	a, b := newHarness(t), newHarness(t)
	a.createDB()
	b.createDB()
	addrA, addrB := startBinaryServer(t, serverEnv(a)), startBinaryServer(t, serverEnv(b))
	createThread(t, addrA, "victim")
	createThread(t, addrB, "victim")
	idA, idB := folderID(t, a.dbPath), folderID(t, b.dbPath)

	wrong := serverEnv(a, "PROGRESSDB_ADDR="+addrB)
	for _, args := range [][]string{
		{"legal-hold", "set", "victim"},
		{"thread", "get", "victim"},
		{"retention", "policy", "set", "victim", "--max-messages", "3"},
		{"retention", "run", "--dry-run"},
		{"backup", "create", "--out", filepath.Join(t.TempDir(), "b.tar")},
	} {
		code, out, errOut := runBinary(t, wrong, args...)
		if code != exitFailed || !strings.Contains(errOut, idA) || !strings.Contains(errOut, idB) || !strings.Contains(errOut, "--server URL") {
			t.Fatalf("%v with PROGRESSDB_ADDR naming another server: exit %d, want 1 naming %s and %s\n%s%s", args, code, idA, idB, out, errOut)
		}
	}
	code, out, errOut := runBinary(t, wrong, "retention", "status")
	if code != exitFailed || !strings.Contains(out, "source:          files") || !strings.Contains(errOut, idB) {
		t.Fatalf("retention status with PROGRESSDB_ADDR naming another server: exit %d\n%s%s", code, out, errOut)
	}
	code, out, errOut = runBinary(t, serverEnv(b, "PROGRESSDB_ADDR="+addrB), "thread", "get", "victim", "--json")
	var rep threadReport
	if code != exitOK || json.Unmarshal([]byte(out), &rep) != nil || rep.Thread.LegalHold || rep.Database.ID != idB {
		t.Fatalf("B's thread after the refused commands: exit %d, %+v\n%s%s", code, rep, out, errOut)
	}

	right := serverEnv(a, "PROGRESSDB_ADDR="+addrA)
	code, out, errOut = runBinary(t, right, "legal-hold", "set", "victim")
	want := "database:        " + idA + " at " + a.dbPath + ", through the server at http://" + addrA
	if code != exitOK || !strings.Contains(out, want) || !strings.Contains(out, "legal hold:      yes") {
		t.Fatalf("legal-hold set through the server holding the folder: exit %d, want %q\n%s%s", code, want, out, errOut)
	}
}
