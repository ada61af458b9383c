package certs

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"testing"
	"time"

	"github.com/progressdb/progressdb/internal/testcerts"
)

// A verification reused for a connection's certificate never outlives
// the certificate: past its NotAfter the next request is checked again and
// refused. A refusal is reused too, and one CA's answer is never taken
// for another's.
func TestVerifyCacheKeepsExpiryAndPools(t *testing.T) {
	ca, other := testcerts.NewCA(t, "CA"), testcerts.NewCA(t, "other CA")
	now := time.Now()
	leaf := ca.Issue(t, "node", testcerts.Options{NotAfter: now.Add(30 * time.Second)})
	parsed, err := x509.ParseCertificate(leaf.TLS(t).Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	cs := &tls.ConnectionState{PeerCertificates: []*x509.Certificate{parsed}}
	// One pool throughout, as a Guard holds one: the cache keys on it.
	pool := ca.Pool()
	var c verifyCache
	if err := c.verify(cs, pool, now); err != nil {
		t.Fatalf("a valid certificate: %v", err)
	}
	if err := c.verify(cs, pool, now.Add(10*time.Second)); err != nil {
		t.Fatalf("the same certificate again: %v", err)
	}
	if err := c.verify(cs, other.Pool(), now); err == nil {
		t.Fatal("the certificate passed for another CA's pool")
	}
	if err := c.verify(cs, pool, now.Add(31*time.Second)); err == nil {
		t.Fatal("the certificate passed after it expired")
	}
	if err := c.verify(&tls.ConnectionState{}, pool, now); !errors.Is(err, ErrNoCertificate) {
		t.Fatalf("no certificate: %v, want ErrNoCertificate", err)
	}
	if err := c.verify(nil, pool, now); !errors.Is(err, ErrNotTLS) {
		t.Fatalf("no TLS: %v, want ErrNotTLS", err)
	}
}
