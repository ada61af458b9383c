package deploy

import (
	"bytes"
	"errors"
	"io"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/progressdb/progressdb/internal/testcerts"
	"github.com/progressdb/progressdb/server/internal/app"
	"github.com/progressdb/progressdb/server/internal/testtools"
	"github.com/progressdb/progressdb/server/pkg/config"
)

// The mutual-TLS overlay of the cluster example
// (deploy/kubernetes-cluster-tls), as kubectl renders it: every pod
// mounts the secret progressdb-cluster-tls where its TLS settings name
// the files, advertises https://, and probes over HTTPS. With a
// certificate of the shape certificate.yaml asks cert-manager for (one
// wildcard name over the pods), each pod's settings pass serve's checks,
// the certificate naming its advertise host among them.
func TestKubernetesClusterTLSOverlay(t *testing.T) {
	kubectl := testtools.Need(t, "kubectl", "kustomization not rendered")
	root := repoRoot(t)
	out, err := exec.Command(kubectl, "kustomize", filepath.Join(root, "deploy", "kubernetes-cluster-tls")).Output()
	if err != nil {
		t.Fatalf("kubectl kustomize: %v", err)
	}
	objects := map[string]k8sObject{}
	var sts struct {
		Spec struct {
			Template struct {
				Spec struct {
					Containers []struct {
						Name         string `yaml:"name"`
						VolumeMounts []struct {
							Name      string `yaml:"name"`
							MountPath string `yaml:"mountPath"`
						} `yaml:"volumeMounts"`
						ReadinessProbe struct {
							HTTPGet struct {
								Scheme string `yaml:"scheme"`
							} `yaml:"httpGet"`
						} `yaml:"readinessProbe"`
						LivenessProbe struct {
							HTTPGet struct {
								Scheme string `yaml:"scheme"`
							} `yaml:"httpGet"`
						} `yaml:"livenessProbe"`
						StartupProbe struct {
							HTTPGet struct {
								Scheme string `yaml:"scheme"`
							} `yaml:"httpGet"`
						} `yaml:"startupProbe"`
					} `yaml:"containers"`
					Volumes []struct {
						Name   string `yaml:"name"`
						Secret struct {
							SecretName string `yaml:"secretName"`
						} `yaml:"secret"`
					} `yaml:"volumes"`
				} `yaml:"spec"`
			} `yaml:"template"`
		} `yaml:"spec"`
	}
	dec := yaml.NewDecoder(bytes.NewReader(out))
	for {
		var node yaml.Node
		if err := dec.Decode(&node); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		var o k8sObject
		if err := node.Decode(&o); err != nil {
			t.Fatal(err)
		}
		objects[o.Kind+"/"+o.Metadata.Name] = o
		if o.Kind == "StatefulSet" {
			if err := node.Decode(&sts); err != nil {
				t.Fatal(err)
			}
		}
	}
	set, ok := objects["StatefulSet/progressdb-cluster"]
	if !ok || len(sts.Spec.Template.Spec.Containers) != 1 {
		t.Fatal("no StatefulSet/progressdb-cluster of one container")
	}
	c := sts.Spec.Template.Spec.Containers[0]
	mount := ""
	for _, m := range c.VolumeMounts {
		if m.Name == "tls" {
			mount = m.MountPath
		}
	}
	secretOK := false
	for _, v := range sts.Spec.Template.Spec.Volumes {
		secretOK = secretOK || (v.Name == "tls" && v.Secret.SecretName == "progressdb-cluster-tls")
	}
	if mount == "" || !secretOK {
		t.Fatalf("the tls volume: mounted at %q, secret progressdb-cluster-tls %v", mount, secretOK)
	}
	for name, scheme := range map[string]string{"readiness": c.ReadinessProbe.HTTPGet.Scheme,
		"liveness": c.LivenessProbe.HTTPGet.Scheme, "startup": c.StartupProbe.HTTPGet.Scheme} {
		if scheme != "HTTPS" {
			t.Errorf("%s probe scheme %q, want HTTPS: the listener serves HTTPS only", name, scheme)
		}
	}

	// The secret's files, as cert-manager would issue them for namespace chat.
	files := t.TempDir()
	ca := testcerts.NewCA(t, "cluster CA")
	ca.WriteCA(t, files, "ca.crt")
	leaf := ca.Issue(t, "progressdb-cluster", testcerts.Options{Hosts: []string{"*.progressdb-cluster-nodes.chat.svc"}})
	if c, k := leaf.Write(t, files, "tls"); !strings.HasSuffix(c, "tls.crt") || !strings.HasSuffix(k, "tls.key") {
		t.Fatal("testcerts names the files <name>.crt and <name>.key")
	}
	secret := map[string]string{"PROGRESSDB_CLUSTER_SECRET": "0123456789abcdef0123", "PROGRESSDB_ADMIN_TOKEN": "a"}
	for _, pod := range []string{"progressdb-cluster-0", "progressdb-cluster-2"} {
		env := podEnviron(t, objects, set.Spec.Template.Spec.Containers[0], pod, "chat", secret)
		var environ []string
		for k, v := range env {
			if strings.HasPrefix(v, mount+"/") {
				v = filepath.Join(files, strings.TrimPrefix(v, mount+"/"))
			}
			environ = append(environ, k+"="+v)
		}
		environ = append(environ, "PROGRESSDB_DB_PATH="+t.TempDir(), "PROGRESSDB_RETENTION_AUDIT_PATH="+t.TempDir())
		cfg, err := config.Load(environ)
		if err != nil {
			t.Fatalf("pod %s: %v", pod, err)
		}
		if !cfg.ClusterTLS() || !strings.HasPrefix(cfg.AdvertiseURL, "https://"+pod+".") {
			t.Errorf("pod %s: mutual TLS %v, advertise URL %q", pod, cfg.ClusterTLS(), cfg.AdvertiseURL)
		}
		if err := app.Check(cfg); err != nil {
			t.Errorf("pod %s: %v", pod, err)
		}
	}
}
