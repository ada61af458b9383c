package cli

import (
	"encoding/json"
	"strings"
	"testing"
)

// Erasure outputs name the database acted on (README: every output
// does), and an erasure that found nothing of its author says so instead
// of completing with zeros alone.
func TestErasureOutputsNameTheDatabase(t *testing.T) {
	h, _ := sealedHarness(t, testKEK(9))
	writeSealed(t, h.environ, 1)

	out := h.mustRun("erasure", "request", "nobody")
	if !strings.Contains(out, "database:        ") || !strings.Contains(out, h.dbPath) {
		t.Errorf("erasure request names no database:\n%s", out)
	}
	if !strings.Contains(out, "nothing of this author was found") {
		t.Errorf("an erasure of an author who never wrote says nothing of it:\n%s", out)
	}
	var st struct {
		ErasureID string   `json:"erasure_id"`
		Database  database `json:"database"`
	}
	if err := json.Unmarshal([]byte(h.mustRun("erasure", "request", "nobody", "--json")), &st); err != nil || st.Database.Path != h.dbPath || st.Database.ID == "" {
		t.Errorf("erasure request --json: %+v (%v), want its database", st, err)
	}
	if out := h.mustRun("erasure", "status", st.ErasureID); !strings.Contains(out, "database:        ") {
		t.Errorf("erasure status names no database:\n%s", out)
	}

	wrote := h.mustRun("erasure", "request", "alice")
	if strings.Contains(wrote, "nothing of this author") {
		t.Errorf("an erasure that destroyed keys says it found nothing:\n%s", wrote)
	}
}
