package client_test

import (
	"context"
	"crypto/ed25519"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/progressdb/progressdb/client"
)

// With sealing configured, a subject erasure through the client: the
// author's messages are gone, the others' stay, the status completes and
// the receipt lists what was erased.
func TestErasure(t *testing.T) {
	kek := "base64key://" + base64.StdEncoding.EncodeToString([]byte(strings.Repeat("\x07", 32)))
	// The receipt is given only with signed audit footers.
	_, sk, err := ed25519.GenerateKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(sk)
	if err != nil {
		t.Fatal(err)
	}
	keyPath := filepath.Join(t.TempDir(), "audit-signing.pem")
	if err := os.WriteFile(keyPath, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	base := serve(t, "PROGRESSDB_KEK="+kek, "PROGRESSDB_KEYSTORE_PATH="+filepath.Join(t.TempDir(), "keys"),
		"PROGRESSDB_AUDIT_SIGNING_KEY="+keyPath)
	c := newClient(t, base)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	check(c.CreateThread(ctx, client.NewThread{Id: ptr("t-1"), Title: "Plans", Author: "bob"})).must(t)
	check(c.AppendMessage(ctx, "t-1", client.NewMessage{Id: ptr("m-ann"), Author: "ann", Body: "mine"})).must(t)
	check(c.AppendMessage(ctx, "t-1", client.NewMessage{Id: ptr("m-bob"), Author: "bob", Body: "his"})).must(t)

	acc := check(c.RequestErasure(ctx, "ann")).must(t)
	if acc.ErasureId == "" || acc.RunId == "" {
		t.Fatalf("accepted %+v", acc)
	}
	st := check(c.WaitErasure(ctx, acc.ErasureId, 20*time.Millisecond)).must(t)
	if st.Status != client.ErasureStatusStatusCompleted || st.MessagesPurged != 1 || st.CompletedAt == nil || strings.Contains(st.Subject, "ann") {
		t.Fatalf("erasure %+v", st)
	}
	wantCode(t, errOf(c.GetMessage(ctx, "t-1", "m-ann", true)), 404, client.ErrorCodeNotFound)
	if m := check(c.GetMessage(ctx, "t-1", "m-bob", false)).must(t); m.Body != "his" {
		t.Fatalf("bob's message %+v", m)
	}
	rc := check(c.ErasureReceipt(ctx, acc.ErasureId)).must(t)
	if rc.ErasureId != acc.ErasureId || rc.Subject != st.Subject || len(rc.Items) != 1 || rc.Items[0].ItemId != "m-ann" || !rc.CompletedAt.Equal(*st.CompletedAt) {
		t.Fatalf("receipt %+v", rc)
	}
	wantCode(t, errOf(c.Erasure(ctx, "0000000000000000")), 404, client.ErrorCodeNotFound)
}
