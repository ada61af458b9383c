package cli

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/progressdb/progressdb/audit"
)

// writeErasureTrail writes one signed run that purged m1 and m2 for
// erasure e1, the receipt of it and the public key, and returns their
// paths and the audit file's.
func writeErasureTrail(t *testing.T) (root, receipt, pubPath, file string) {
	t.Helper()
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	root = filepath.Join(dir, "audit")
	start := time.Now().UTC()
	w, err := audit.CreateWith(root, "run000000001", audit.Header{StartedAt: start, Trigger: audit.TriggerErasure},
		audit.Options{SigningKey: priv})
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"m1", "m2"} {
		if err := w.Item(audit.Item{ItemType: audit.ItemMessage, ItemID: id, ThreadID: "t1", Status: audit.StatusPurged,
			Cause: audit.CauseSubject, ErasureID: "e1"}); err != nil {
			t.Fatal(err)
		}
	}
	f := w.Counts()
	f.FinishedAt, f.Status = start, audit.RunCompleted
	if file, err = w.Close(f); err != nil {
		t.Fatal(err)
	}
	rc := audit.Receipt{Format: audit.ReceiptFormat, ErasureID: "e1", RequestedAt: start, CompletedAt: start,
		Subject: "hmac-sha256:00", HeldThreads: []string{}}
	if err := audit.AddReceiptFiles(&rc, root, []string{"run000000001"}); err != nil {
		t.Fatal(err)
	}
	data, err := json.Marshal(rc)
	if err != nil {
		t.Fatal(err)
	}
	receipt = filepath.Join(dir, "receipt.json")
	if err := os.WriteFile(receipt, data, 0o600); err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	pubPath = filepath.Join(dir, "audit.pub")
	if err := os.WriteFile(pubPath, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return root, receipt, pubPath, file
}

// erasure verify: exit 0 on a true receipt; 1 naming the file and line
// of an edited audit line; 2 without a key or with a file that is not a
// receipt.
func TestErasureVerify(t *testing.T) {
	root, receipt, pub, file := writeErasureTrail(t)
	h := newHarness(t, "PROGRESSDB_RETENTION_AUDIT_PATH="+root)
	out := h.mustRun("erasure", "verify", receipt, "--public-key", pub)
	if !strings.Contains(out, "receipt of erasure e1 (2 items in 1 audit files") || !strings.Contains(out, "verifies") {
		t.Errorf("output %q", out)
	}
	var rep receiptReport
	if err := json.Unmarshal([]byte(h.mustRun("erasure", "verify", receipt, "--public-key", pub, "--audit", root, "--json")), &rep); err != nil {
		t.Fatal(err)
	}
	if !rep.Verified || rep.Items != 2 || len(rep.Problems) != 0 {
		t.Errorf("report %+v", rep)
	}

	if code, _, errOut := h.run("erasure", "verify", receipt); code != exitUsage || !strings.Contains(errOut, "--public-key") {
		t.Errorf("without a key: exit %d, %q", code, errOut)
	}
	if code, _, errOut := h.run("erasure", "verify", pub, "--public-key", pub); code != exitUsage || !strings.Contains(errOut, "not a receipt") {
		t.Errorf("a key as the receipt: exit %d, %q", code, errOut)
	}

	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, bytes.Replace(data, []byte(`"m2"`), []byte(`"m3"`), 1), 0o640); err != nil {
		t.Fatal(err)
	}
	code, out, _ := h.run("erasure", "verify", receipt, "--public-key", pub)
	rel := filepath.ToSlash(strings.TrimPrefix(file, root+string(filepath.Separator)))
	if code != exitFailed || !strings.Contains(out, "FAIL "+rel+":3: line changed") || !strings.Contains(out, "does NOT verify") {
		t.Errorf("edited line: exit %d, output %q", code, out)
	}
}
