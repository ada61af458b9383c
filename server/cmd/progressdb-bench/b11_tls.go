package main

import (
	"crypto/tls"
	"fmt"
	"os"
	"path/filepath"

	"github.com/progressdb/progressdb/internal/testcerts"
	"github.com/progressdb/progressdb/server/pkg/config"
)

// b11TLS is the cluster CA of B11's runs with mutual TLS; a nil *b11TLS
// is plain HTTP.
type b11TLS struct {
	ca     *testcerts.CA
	caFile string
}

// newB11TLS makes a CA in dir.
func newB11TLS(dir string) (*b11TLS, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	tc := &b11TLS{}
	err := testcerts.Catch(func(t testcerts.TB) {
		tc.ca = testcerts.NewCA(t, "B11 cluster CA")
		tc.caFile = tc.ca.WriteCA(t, dir, "ca.crt")
	})
	if err != nil {
		return nil, fmt.Errorf("make the cluster CA: %w", err)
	}
	return tc, nil
}

// nodeEnv gives node id a certificate naming 127.0.0.1, written in dir,
// and returns the settings that turn mutual TLS on.
func (tc *b11TLS) nodeEnv(dir, id string) ([]string, error) {
	if tc == nil {
		return nil, nil
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	var cert, key string
	err := testcerts.Catch(func(t testcerts.TB) {
		cert, key = tc.ca.Issue(t, id, testcerts.Options{}).Write(t, dir, filepath.Base(dir)+"-tls")
	})
	if err != nil {
		return nil, fmt.Errorf("node %s's certificate: %w", id, err)
	}
	return []string{config.VarClusterTLSCA + "=" + tc.caFile, config.VarClusterTLSCert + "=" + cert,
		config.VarClusterTLSKey + "=" + key}, nil
}

// clientConfig is the bench client's TLS: it trusts the CA.
func (tc *b11TLS) clientConfig() *tls.Config {
	if tc == nil {
		return nil
	}
	return testcerts.ClientConfig(tc.ca.Pool())
}
