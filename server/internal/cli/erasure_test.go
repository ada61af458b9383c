package cli

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/progressdb/progressdb/audit"
	"github.com/progressdb/progressdb/server/internal/retention"
	"github.com/progressdb/progressdb/server/pkg/keystore"
	"github.com/progressdb/progressdb/server/pkg/store"
)

// writeErasureTrail writes one signed run that purged m1 and m2 for
// erasure e1, the receipt of it and the public key, and returns their
// paths and the audit file's.
func writeErasureTrail(t *testing.T) (root, receipt, pubPath, file string) {
	t.Helper()
	return writeErasureTrailSigned(t, true)
}

// writeErasureTrailSigned is writeErasureTrail, the run unsigned unless
// sign (a server without an audit signing key).
func writeErasureTrailSigned(t *testing.T, sign bool) (root, receipt, pubPath, file string) {
	t.Helper()
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	opts := audit.Options{SigningKey: priv}
	if !sign {
		opts = audit.Options{}
	}
	dir := t.TempDir()
	root = filepath.Join(dir, "audit")
	start := time.Now().UTC()
	w, err := audit.CreateWith(root, "run000000001", audit.Header{StartedAt: start, Trigger: audit.TriggerErasure}, opts)
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
	if !strings.Contains(out, "receipt of erasure e1 (2 items in 1 audit file ") || !strings.Contains(out, "verifies") {
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

// writeSigningKey writes an ed25519 key pair (PEM) under dir.
func writeSigningKey(t *testing.T, dir string) (priv, pub string) {
	t.Helper()
	pk, sk, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	skDER, err := x509.MarshalPKCS8PrivateKey(sk)
	if err != nil {
		t.Fatal(err)
	}
	pkDER, err := x509.MarshalPKIXPublicKey(pk)
	if err != nil {
		t.Fatal(err)
	}
	priv, pub = filepath.Join(dir, "audit.key"), filepath.Join(dir, "audit.pub")
	if err := os.WriteFile(priv, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: skDER}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(pub, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pkDER}), 0o600); err != nil {
		t.Fatal(err)
	}
	return priv, pub
}

// erasure request, status, receipt and verify through a sealed server, as
// an operator runs them: the receipt written by one verifies offline; a
// server without sealing refuses the request naming PROGRESSDB_KEK.
func TestErasureThroughTheServer(t *testing.T) {
	h := newHarness(t)
	dir := t.TempDir()
	priv, pub := writeSigningKey(t, dir)
	kek := "base64key://" + base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{9}, 32))
	base := serverEnv(h, "PROGRESSDB_KEK="+kek, "PROGRESSDB_KEYSTORE_PATH="+filepath.Join(dir, "keys"),
		"PROGRESSDB_AUDIT_SIGNING_KEY="+priv)
	addr := startBinaryServer(t, base)
	cli := append(append([]string(nil), base...), "PROGRESSDB_ADDR="+addr)
	for _, req := range [][2]string{
		{"/v1/threads", `{"id":"t1","title":"x","author":"ann"}`},
		{"/v1/threads/t1/messages", `{"id":"m1","author":"ann","body":"gone"}`},
		{"/v1/threads/t1/messages", `{"id":"m2","author":"bob","body":"stays"}`},
	} {
		res, err := http.Post("http://"+addr+req[0], "application/json", strings.NewReader(req[1]))
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != http.StatusCreated {
			t.Fatalf("POST %s: %d", req[0], res.StatusCode)
		}
	}

	code, out, errOut := runBinary(t, cli, "erasure", "request", "ann", "--json")
	var acc retention.ErasureAccepted
	if code != exitOK || json.Unmarshal([]byte(out), &acc) != nil || acc.ErasureID == "" {
		t.Fatalf("request: exit %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	var st retention.ErasureStatus
	for deadline := time.Now().Add(time.Minute); st.Status != retention.ErasureCompleted; time.Sleep(20 * time.Millisecond) {
		code, out, errOut := runBinary(t, cli, "erasure", "status", acc.ErasureID, "--json")
		if code != exitOK || json.Unmarshal([]byte(out), &st) != nil || st.Status == retention.ErasureFailed || time.Now().After(deadline) {
			t.Fatalf("status: exit %d\nstdout: %s\nstderr: %s", code, out, errOut)
		}
	}
	if st.MessagesPurged != 1 || st.KeysDestroyed != 1 {
		t.Errorf("status %+v", st)
	}
	if code, out, _ := runBinary(t, cli, "erasure", "status", acc.ErasureID); code != exitOK || !strings.Contains(out, "status:          completed") {
		t.Errorf("status for people: exit %d, %s", code, out)
	}
	receipt := filepath.Join(dir, "receipt.json")
	if code, out, errOut := runBinary(t, cli, "erasure", "receipt", acc.ErasureID, "--out", receipt); code != exitOK {
		t.Fatalf("receipt: exit %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	if code, out, errOut := runBinary(t, cli, "erasure", "verify", receipt, "--public-key", pub); code != exitOK ||
		!strings.Contains(out, "(1 item in 1 audit file ") {
		t.Fatalf("verify: exit %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	if code, _, errOut := runBinary(t, cli, "erasure", "status", "nope"); code != exitFailed || !strings.Contains(errOut, "not found") {
		t.Errorf("status of an unknown erasure: exit %d, %s", code, errOut)
	}

	plain := newHarness(t)
	penv := serverEnv(plain)
	paddr := startBinaryServer(t, penv)
	code, _, errOut = runBinary(t, append(penv, "PROGRESSDB_ADDR="+paddr), "erasure", "request", "ann")
	if code != exitFailed || !strings.Contains(errOut, "PROGRESSDB_KEK") {
		t.Errorf("request without sealing: exit %d, %s", code, errOut)
	}
}

// With no server holding the database, erasure request runs the erasure
// in the command (under the lease, the audit signed) and waits for it;
// status and receipt read the database; the receipt verifies.
func TestErasureOnTheDatabase(t *testing.T) {
	dir := t.TempDir()
	priv, pub := writeSigningKey(t, dir)
	kek := "base64key://" + base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{5}, 32))
	keys := filepath.Join(dir, "keys")
	h := newHarness(t, "PROGRESSDB_KEK="+kek, "PROGRESSDB_KEYSTORE_PATH="+keys, "PROGRESSDB_AUDIT_SIGNING_KEY="+priv)

	ctx := context.Background()
	keeper, err := keystore.OpenKEK(ctx, kek)
	if err != nil {
		t.Fatal(err)
	}
	defer keeper.Close()
	ks, err := keystore.Open(ctx, keys, keystore.Options{Keeper: keeper})
	if err != nil {
		t.Fatal(err)
	}
	st, err := store.Open(h.dbPath, store.Options{Sealer: ks, Closer: ks})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.CreateThread(ctx, store.Thread{ID: "t1", Title: "x", Author: "bob"}); err != nil {
		t.Fatal(err)
	}
	for _, m := range []store.Message{{ID: "m1", Author: "ann", Body: []byte(`1`)}, {ID: "m2", Author: "ann", Body: []byte(`2`)},
		{ID: "m3", Author: "bob", Body: []byte(`3`)}} {
		if _, err := st.AppendMessage(ctx, "t1", m); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}

	var got retention.ErasureStatus
	if err := json.Unmarshal([]byte(h.mustRun("erasure", "request", "ann", "--json")), &got); err != nil {
		t.Fatal(err)
	}
	if got.Status != retention.ErasureCompleted || got.MessagesPurged != 2 || got.KeysDestroyed != 1 {
		t.Fatalf("erasure run by the command: %+v", got)
	}
	if out := h.mustRun("erasure", "status", got.ErasureID); !strings.Contains(out, "keys_destroyed=1 versions_purged=2 messages_purged=2") {
		t.Errorf("status: %s", out)
	}
	receipt := filepath.Join(dir, "receipt.json")
	h.mustRun("erasure", "receipt", got.ErasureID, "--out", receipt)
	if out := h.mustRun("erasure", "verify", receipt, "--public-key", pub); !strings.Contains(out, "(2 items in 1 audit file ") {
		t.Errorf("verify: %s", out)
	}

	plain := newHarness(t)
	plain.createDB()
	if code, _, errOut := plain.run("erasure", "request", "ann"); code != exitFailed || !strings.Contains(errOut, "PROGRESSDB_KEK") {
		t.Errorf("request on a database without sealing: exit %d, %s", code, errOut)
	}
}
