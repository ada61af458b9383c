package app

import (
	"bytes"
	"encoding/json"
	"os"
	"testing"

	"github.com/progressdb/progressdb/audit"
)

// footerReplicas reads what the footer of the sealed audit file at path
// says of a replicated shard's replicas' erase.
func footerReplicas(t *testing.T, path string) *audit.ReplicaErasures {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := bytes.Split(bytes.TrimSuffix(data, []byte("\n")), []byte("\n"))
	var f struct {
		Msg string `json:"msg"`
		audit.Footer
	}
	if err := json.Unmarshal(lines[len(lines)-1], &f); err != nil || f.Msg != audit.MsgFooter {
		t.Fatalf("%s's last line %s: %v", path, lines[len(lines)-1], err)
	}
	return f.Replicas
}
