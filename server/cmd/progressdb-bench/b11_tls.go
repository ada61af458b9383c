package main

import (
	"crypto/tls"
	"fmt"
	"os"
	"path/filepath"

	"github.com/progressdb/progressdb/server/internal/testtools/testcerts"
	"github.com/progressdb/progressdb/server/pkg/config"
)

// b11TLS is the cluster CA of B11's runs with mutual TLS; a nil *b11TLS
// is plain HTTP.
type b11TLS struct {
	ca     *testcerts.CA
	caFile string
}

// certFailure is how testcerts' Fatal ends a bench run: newB11TLS and
// nodeEnv recover it into an error.
type certFailure struct{ msg string }

type certTB struct{}

func (certTB) Helper()           {}
func (certTB) Fatal(args ...any) { panic(certFailure{fmt.Sprint(args...)}) }

// catchCert turns a certFailure panic into *err.
func catchCert(err *error) {
	if r := recover(); r != nil {
		f, ok := r.(certFailure)
		if !ok {
			panic(r)
		}
		*err = fmt.Errorf("make certificates: %s", f.msg)
	}
}

// newB11TLS makes a CA in dir.
func newB11TLS(dir string) (tc *b11TLS, err error) {
	defer catchCert(&err)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	ca := testcerts.NewCA(certTB{}, "B11 cluster CA")
	return &b11TLS{ca: ca, caFile: ca.WriteCA(certTB{}, dir, "ca.crt")}, nil
}

// nodeEnv gives node id a certificate naming 127.0.0.1, written in dir,
// and returns the settings that turn mutual TLS on.
func (tc *b11TLS) nodeEnv(dir, id string) (env []string, err error) {
	if tc == nil {
		return nil, nil
	}
	defer catchCert(&err)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	cert, key := tc.ca.Issue(certTB{}, id, testcerts.Options{}).Write(certTB{}, dir, filepath.Base(dir)+"-tls")
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
