package config

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// clusterEnv is a valid cluster node's settings; a case overrides one.
func clusterEnv(over ...string) []string {
	base := []string{
		"PROGRESSDB_CLUSTER_ETCD=http://127.0.0.1:2379",
		"PROGRESSDB_NODE_ID=node-1",
		"PROGRESSDB_ADVERTISE_URL=http://127.0.0.1:8080",
		"PROGRESSDB_CLUSTER_SECRET=0123456789abcdef",
	}
	return append(base, over...) // later entries win
}

func writePEM(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "etcd.pem")
	if err := os.WriteFile(p, []byte("-----BEGIN CERTIFICATE-----\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestClusterSettings(t *testing.T) {
	c := mustLoad(t, clusterEnv("PROGRESSDB_CLUSTER_ETCD=http://a:2379, https://b:2379")...)
	if !c.Cluster.Enabled() || !slices.Equal(c.Cluster.Endpoints(), []string{"http://a:2379", "https://b:2379"}) {
		t.Fatalf("endpoints = %v", c.Cluster.Endpoints())
	}
	if c.Cluster.Shards != 16 || c.Cluster.ClusterName != "progressdb" || c.Cluster.OwnerTTL.String() != "10s" {
		t.Fatalf("defaults: %+v", c.Cluster)
	}
	// A single node ignores the cluster settings, as it always did.
	single := mustLoad(t, "PROGRESSDB_CLUSTER_SHARDS=0", "PROGRESSDB_NODE_ID=not valid")
	if single.Cluster.Enabled() {
		t.Fatal("cluster enabled without PROGRESSDB_CLUSTER_ETCD")
	}
	for _, p := range c.Redacted() {
		if strings.Contains(p[1], "0123456789abcdef") {
			t.Fatalf("%s leaks the cluster secret", p[0])
		}
	}
}

func TestClusterInvalid(t *testing.T) {
	tests := []struct {
		env     string // one NAME=value, over a valid cluster node's
		ruleHas string
		value   string // the value the error shows, when not env's
	}{
		{"PROGRESSDB_CLUSTER_ETCD=127.0.0.1:2379", "etcd client URLs", ""},
		{"PROGRESSDB_CLUSTER_ETCD=http://a:2379,,http://b:2379", "etcd client URLs", ""},
		{"PROGRESSDB_CLUSTER_ETCD=ftp://a:2379", "etcd client URLs", ""},
		{"PROGRESSDB_CLUSTER_NAME=a/b", "prefixes every etcd key", ""},
		{"PROGRESSDB_CLUSTER_NAME=-x", "prefixes every etcd key", ""},
		{"PROGRESSDB_NODE_ID=", "required in a cluster", ""},
		{"PROGRESSDB_NODE_ID=node 1", "required in a cluster", ""},
		{"PROGRESSDB_ADVERTISE_URL=", "required in a cluster", ""},
		{"PROGRESSDB_ADVERTISE_URL=10.0.0.7:8080", "required in a cluster", ""},
		{"PROGRESSDB_CLUSTER_SECRET=", "at least 16 characters", ""},
		{"PROGRESSDB_CLUSTER_SECRET=short", "at least 16 characters", "<redacted>"},
		{"PROGRESSDB_CLUSTER_SECRET= 0123456789abcdef", "no space", "<redacted>"},
		{"PROGRESSDB_CLUSTER_SHARDS=0", "from 1 to 1024", ""},
		{"PROGRESSDB_CLUSTER_SHARDS=1025", "from 1 to 1024", ""},
		{"PROGRESSDB_CLUSTER_SHARDS=many", "whole number", ""},
		{"PROGRESSDB_CLUSTER_LEASE_TTL=2s", "from 3s to 5m", ""},
		{"PROGRESSDB_CLUSTER_LEASE_TTL=1h", "from 3s to 5m", ""},
		{"PROGRESSDB_CLUSTER_LEASE_TTL=4500ms", "whole seconds", ""},
		{"PROGRESSDB_CLUSTER_LEASE_TTL=soon", "duration", ""},
		{"PROGRESSDB_CLUSTER_DEAD_AFTER=500ms", "from 1s to 168h", ""},
		{"PROGRESSDB_CLUSTER_DEAD_AFTER=never", "duration", ""},
		{"PROGRESSDB_CLUSTER_ETCD_CA_FILE=/nonexistent/ca.pem", "readable PEM file", ""},
		{"PROGRESSDB_CLUSTER_ETCD_CERT_FILE=/nonexistent/cert.pem", "set both", "<key>"},
	}
	for _, tt := range tests {
		t.Run(tt.env, func(t *testing.T) {
			name, value, _ := strings.Cut(tt.env, "=")
			if tt.value != "" {
				value = tt.value
			}
			_, err := Load(clusterEnv(tt.env))
			var ce *Error
			if !errors.As(err, &ce) {
				t.Fatalf("Load: %v (%T), want *Error", err, err)
			}
			if tt.value == "<key>" {
				// Only the certificate is set: the error names the key.
				name, value = VarClusterEtcdKey, ""
			}
			if ce.Var != name || ce.Value != value {
				t.Errorf("Var, Value = %q, %q; want %q, %q", ce.Var, ce.Value, name, value)
			}
			if !strings.Contains(ce.Rule, tt.ruleHas) {
				t.Errorf("Rule = %q, want it to mention %q", ce.Rule, tt.ruleHas)
			}
		})
	}
}
