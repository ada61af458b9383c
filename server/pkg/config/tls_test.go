package config

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Every TLS setting is refused, naming it, when it is incomplete, names
// no readable file, or cannot work with the others (spec §14). The files'
// content is checked when the server loads them (app).
func TestTLSSettingsInvalid(t *testing.T) {
	dir := t.TempDir()
	f := filepath.Join(dir, "x.pem")
	if err := os.WriteFile(f, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "missing.pem")
	tlsNode := []string{"PROGRESSDB_CLUSTER_TLS_CA_FILE=" + f, "PROGRESSDB_CLUSTER_TLS_CERT_FILE=" + f,
		"PROGRESSDB_CLUSTER_TLS_KEY_FILE=" + f, "PROGRESSDB_ADVERTISE_URL=https://127.0.0.1:8080"}
	tests := []struct {
		name     string
		env      []string
		wantVar  string
		wantVal  string
		ruleHas  string
		inCluser bool
	}{
		{"cert without key", []string{VarTLSCert + "=" + f}, VarTLSKey, "", "set both", false},
		{"key without cert", []string{VarTLSKey + "=" + f}, VarTLSCert, "", "set both", false},
		{"unreadable cert", []string{VarTLSCert + "=" + missing, VarTLSKey + "=" + f}, VarTLSCert, missing, "readable PEM file", false},
		{"unreadable key", []string{VarTLSCert + "=" + f, VarTLSKey + "=" + dir}, VarTLSKey, dir, "readable PEM file", false},
		{"unreadable client CA", []string{VarTLSCert + "=" + f, VarTLSKey + "=" + f, VarTLSClientCA + "=" + missing}, VarTLSClientCA, missing, "readable PEM file", false},
		{"client CA without TLS", []string{VarTLSClientCA + "=" + f}, VarTLSClientCA, f, "over TLS only", false},
		{"unreadable CA", []string{VarTLSCA + "=" + missing}, VarTLSCA, missing, "readable PEM file", false},
		{"client cert without key", []string{VarTLSClientCert + "=" + f}, VarTLSClientKey, "", "set both", false},
		{"client key without cert", []string{VarTLSClientKey + "=" + f}, VarTLSClientCert, "", "set both", false},
		{"unreadable client key", []string{VarTLSClientCert + "=" + f, VarTLSClientKey + "=" + missing}, VarTLSClientKey, missing, "readable PEM file", false},
		{"cluster CA missing", append(tlsNode, VarClusterTLSCA+"="), VarClusterTLSCA, "", "all three", true},
		{"cluster cert missing", append(tlsNode, VarClusterTLSCert+"="), VarClusterTLSCert, "", "all three", true},
		{"cluster key missing", append(tlsNode, VarClusterTLSKey+"="), VarClusterTLSKey, "", "all three", true},
		{"cluster key unreadable", append(tlsNode, VarClusterTLSKey+"="+missing), VarClusterTLSKey, missing, "readable PEM file", true},
		{"cluster TLS with http advertise URL", append(tlsNode, VarAdvertiseURL+"=http://127.0.0.1:8080"), VarAdvertiseURL, "http://127.0.0.1:8080", "https://", true},
		{"client CA on a node without mutual TLS", []string{VarTLSCert + "=" + f, VarTLSKey + "=" + f, VarTLSClientCA + "=" + f,
			VarAdvertiseURL + "=https://127.0.0.1:8080"}, VarTLSClientCA, f, "mutual TLS between the nodes", true},
		{"server TLS with http advertise URL", []string{VarTLSCert + "=" + f, VarTLSKey + "=" + f}, VarAdvertiseURL, "http://127.0.0.1:8080", "HTTPS only", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := tt.env
			if tt.inCluser {
				env = clusterEnv(env...)
			}
			_, err := Load(env)
			var ce *Error
			if !errors.As(err, &ce) {
				t.Fatalf("Load: %v (%T), want *Error", err, err)
			}
			if ce.Var != tt.wantVar || ce.Value != tt.wantVal || !strings.Contains(ce.Rule, tt.ruleHas) {
				t.Errorf("got %s=%q: %s; want %s=%q mentioning %q", ce.Var, ce.Value, ce.Rule, tt.wantVar, tt.wantVal, tt.ruleHas)
			}
		})
	}
}

// The TLS settings that work: a single node's certificate with a client
// CA, a cluster node with only its cluster certificate (the listener
// serves TLS with it, so a client CA is allowed), and the cluster files
// on a single node, which ignores them like the other cluster settings.
func TestTLSSettingsValid(t *testing.T) {
	f := filepath.Join(t.TempDir(), "x.pem")
	if err := os.WriteFile(f, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, env := range [][]string{
		{VarTLSCert + "=" + f, VarTLSKey + "=" + f, VarTLSClientCA + "=" + f, VarTLSCA + "=" + f,
			VarTLSClientCert + "=" + f, VarTLSClientKey + "=" + f},
		clusterEnv(VarClusterTLSCA+"="+f, VarClusterTLSCert+"="+f, VarClusterTLSKey+"="+f, VarTLSClientCA+"="+f,
			VarAdvertiseURL+"=https://node-1.example:8080"),
		{VarClusterTLSCert + "=" + f},
	} {
		c, err := Load(env)
		if err != nil {
			t.Errorf("Load(%q): %v", env, err)
			continue
		}
		if c.Cluster.Enabled() && (!c.ServesTLS() || !c.ClusterTLS()) {
			t.Errorf("cluster node with its certificate: ServesTLS %v, ClusterTLS %v", c.ServesTLS(), c.ClusterTLS())
		}
	}
}
