package app

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/progressdb/progressdb/audit"
	"github.com/progressdb/progressdb/server/internal/retention"
	"github.com/progressdb/progressdb/server/pkg/config"
	"github.com/progressdb/progressdb/server/pkg/store"
	"github.com/progressdb/progressdb/server/pkg/store/storetest"
)

// waitErasure polls an erasure's status until it is completed or failed.
func waitErasure(t *testing.T, base, id string) retention.ErasureStatus {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		code, body := call(t, "GET", base+"/admin/erasures/"+id, "", adminAuth)
		if code != http.StatusOK {
			t.Fatalf("erasure status: %d %s", code, body)
		}
		var st retention.ErasureStatus
		if err := json.Unmarshal([]byte(body), &st); err != nil {
			t.Fatal(err)
		}
		if st.Status == retention.ErasureCompleted || st.Status == retention.ErasureFailed {
			return st
		}
		if time.Now().After(deadline) {
			t.Fatalf("erasure still %s: %s", st.Status, body)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// signingKeyFiles writes an audit signing key and its public key.
func signingKeyFiles(t *testing.T, dir string) (priv, pub string) {
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

// A subject erasure through a real server: the author's keys go in every
// thread but the held one, their messages (live, edited, soft-deleted) are
// purged with cause subject and counted, threads they created read null
// while others' messages stay, the held thread keeps theirs and is
// listed; the receipt verifies offline; no ciphertext of theirs is left in
// any file of DB_PATH, and the author is in no file of either store.
func TestServeErasesASubject(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	db, keys, auditDir := filepath.Join(dir, "data"), filepath.Join(dir, "keys"), filepath.Join(dir, "audit")
	priv, pub := signingKeyFiles(t, dir)
	const ann, bob = "AnnErased-Q4", "BobStays-Q4"
	env := []string{"PROGRESSDB_DB_PATH=" + db, "PROGRESSDB_KEK=" + sealKEK(), "PROGRESSDB_KEYSTORE_PATH=" + keys,
		"PROGRESSDB_ADMIN_TOKEN=" + testAdminToken, "PROGRESSDB_RETENTION_AUDIT_PATH=" + auditDir, "PROGRESSDB_AUDIT_SIGNING_KEY=" + priv}
	addr, stop := serveFor(t, env)
	base := "http://" + addr
	post := func(path, body string) {
		t.Helper()
		if code, out := call(t, "POST", base+path, body, nil); code != http.StatusCreated {
			t.Fatalf("POST %s: %d %s", path, code, out)
		}
	}
	post("/v1/threads", `{"id":"t1","title":"ann's plans","author":"`+ann+`"}`)
	post("/v1/threads/t1/messages", `{"id":"a1","author":"`+ann+`","body":"one"}`)
	post("/v1/threads/t1/messages", `{"id":"a2","author":"`+ann+`","body":"two"}`)
	post("/v1/threads/t1/messages", `{"id":"b1","author":"`+bob+`","body":"bob's"}`)
	if code, out := call(t, "PUT", base+"/v1/threads/t1/messages/a1", `{"body":"one, edited"}`, nil); code != http.StatusOK {
		t.Fatalf("edit: %d %s", code, out)
	}
	post("/v1/threads", `{"id":"t2","title":"bob's","author":"`+bob+`"}`)
	post("/v1/threads/t2/messages", `{"id":"a3","author":"`+ann+`","body":"three"}`)
	if code, out := call(t, "DELETE", base+"/v1/threads/t2/messages/a3", "", nil); code != http.StatusNoContent {
		t.Fatalf("delete: %d %s", code, out)
	}
	post("/v1/threads", `{"id":"t3","title":"held","author":"`+bob+`"}`)
	post("/v1/threads/t3/messages", `{"id":"a4","author":"`+ann+`","body":"kept"}`)
	if code, out := call(t, "PUT", base+"/admin/threads/t3/legal_hold", `{"legal_hold":true}`, adminAuth); code != http.StatusOK {
		t.Fatalf("hold: %d %s", code, out)
	}
	stop()

	// Ann's ciphertexts, as the files hold them. A sealed database opens
	// only with its KEK and key store, even to read ciphertexts.
	var sealed []string
	cfg, err := config.Load(env)
	if err != nil {
		t.Fatal(err)
	}
	st, err := OpenStore(context.Background(), cfg, slog.New(slog.DiscardHandler), store.Options{}, KeepPlain)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range [][2]string{{"t1", "a1"}, {"t1", "a2"}, {"t2", "a3"}} {
		vs, err := st.ListVersions(context.Background(), m[0], m[1])
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range vs {
			sealed = append(sealed, v.Sealed)
		}
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	if len(sealed) != 5 {
		t.Fatalf("ann's sealed versions: %d, want 5", len(sealed))
	}
	storetest.RequireAll(t, db, sealed...)

	addr, stop = serveFor(t, env)
	defer func() {
		if stop != nil {
			stop()
		}
	}()
	base = "http://" + addr
	code, body := call(t, "POST", base+"/admin/erasures", `{"author":"`+ann+`"}`, adminAuth)
	if code != http.StatusAccepted {
		t.Fatalf("request: %d %s", code, body)
	}
	var acc retention.ErasureAccepted
	if err := json.Unmarshal([]byte(body), &acc); err != nil {
		t.Fatal(err)
	}
	got := waitErasure(t, base, acc.ErasureID)
	if got.Status != retention.ErasureCompleted || got.KeysDestroyed != 2 || got.MessagesPurged != 3 ||
		got.VersionsPurged != 5 || !slices.Equal(got.HeldThreads, []string{"t3"}) || !slices.Contains(got.RunIDs, acc.RunID) ||
		got.CompletedAt.IsZero() || !strings.HasPrefix(got.Subject, "hmac-sha256:") {
		t.Fatalf("status %+v; want completed, 2 keys, 3 messages, 5 versions (a tombstone is one), t3 held", got)
	}

	for _, m := range []string{"t1/messages/a1", "t1/messages/a2", "t2/messages/a3"} {
		if code, out := call(t, "GET", base+"/v1/threads/"+m+"?include_deleted=true", "", nil); code != http.StatusNotFound {
			t.Errorf("%s after the erasure: %d %s", m, code, out)
		}
	}
	if _, out := call(t, "GET", base+"/v1/threads/t1", "", nil); !strings.Contains(string(out), `"title":null`) || !strings.Contains(string(out), `"author":null`) {
		t.Errorf("thread ann created: %s", out)
	}
	if _, out := call(t, "GET", base+"/v1/threads/t1/messages/b1", "", nil); !strings.Contains(string(out), bob) {
		t.Errorf("bob's message in ann's thread: %s", out)
	}
	if _, out := call(t, "GET", base+"/v1/threads/t3/messages/a4", "", nil); !strings.Contains(string(out), `"kept"`) || !strings.Contains(string(out), ann) {
		t.Errorf("ann's message in the held thread: %s", out)
	}

	code, body = call(t, "GET", base+"/admin/erasures/"+acc.ErasureID+"/receipt", "", adminAuth)
	if code != http.StatusOK || strings.Contains(string(body), ann) {
		t.Fatalf("receipt: %d %s", code, body)
	}
	var rc audit.Receipt
	if err := json.Unmarshal([]byte(body), &rc); err != nil {
		t.Fatal(err)
	}
	var items []string
	for _, it := range rc.Items {
		items = append(items, it.ItemID)
	}
	slices.Sort(items)
	if !slices.Equal(items, []string{"a1", "a2", "a3"}) || rc.Subject != got.Subject || !slices.Equal(rc.HeldThreads, []string{"t3"}) {
		t.Errorf("receipt items %v, subject %s, held %v", items, rc.Subject, rc.HeldThreads)
	}
	pk, err := audit.LoadPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	if ps := audit.VerifyReceipt(rc, auditDir, pk); len(ps) != 0 {
		t.Errorf("the receipt does not verify: %v", ps)
	}
	stop()
	stop = nil

	storetest.RequireNone(t, db, sealed...)
	storetest.RequireNone(t, db, ann)
	storetest.RequireNone(t, keys, ann)
	storetest.RequireNone(t, auditDir, ann)
}
