package certs

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"time"
)

// Sentinels of Verify.
var (
	// ErrNotTLS: the request did not come over TLS.
	ErrNotTLS = errors.New("not a TLS connection")
	// ErrNoCertificate: the peer presented no certificate.
	ErrNoCertificate = errors.New("no client certificate presented")
)

// Verify checks the certificate the peer of cs presented against pool, as
// a client certificate, at now, and returns it. The listener asks for
// client certificates without checking them (tls.RequestClientCert): which
// CA must have signed one depends on the route (Guard).
func Verify(cs *tls.ConnectionState, pool *x509.CertPool, now time.Time) (*x509.Certificate, error) {
	if cs == nil {
		return nil, ErrNotTLS
	}
	if len(cs.PeerCertificates) == 0 {
		return nil, ErrNoCertificate
	}
	leaf := cs.PeerCertificates[0]
	inter := x509.NewCertPool()
	for _, c := range cs.PeerCertificates[1:] {
		inter.AddCert(c)
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool, Intermediates: inter, CurrentTime: now,
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		return nil, fmt.Errorf("certificate %q: %w", leaf.Subject.String(), err)
	}
	return leaf, nil
}
