package deploy

import (
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/progressdb/progressdb/server/internal/testtools"
	"github.com/progressdb/progressdb/server/pkg/config"
)

// k8sEnv is a container's env: entry.
type k8sEnv struct {
	Name      string `yaml:"name"`
	Value     string `yaml:"value"`
	ValueFrom *struct {
		FieldRef *struct {
			FieldPath string `yaml:"fieldPath"`
		} `yaml:"fieldRef"`
	} `yaml:"valueFrom"`
}

type k8sContainer struct {
	Name    string   `yaml:"name"`
	Args    []string `yaml:"args"`
	Env     []k8sEnv `yaml:"env"`
	EnvFrom []struct {
		ConfigMapRef *envSource `yaml:"configMapRef"`
		SecretRef    *envSource `yaml:"secretRef"`
	} `yaml:"envFrom"`
	Ports []struct {
		Name          string `yaml:"name"`
		ContainerPort int    `yaml:"containerPort"`
	} `yaml:"ports"`
	VolumeMounts []struct {
		Name      string `yaml:"name"`
		MountPath string `yaml:"mountPath"`
	} `yaml:"volumeMounts"`
	ReadinessProbe *struct {
		HTTPGet *struct {
			Path string `yaml:"path"`
		} `yaml:"httpGet"`
	} `yaml:"readinessProbe"`
}

type k8sObject struct {
	Kind     string `yaml:"kind"`
	Metadata struct {
		Name string `yaml:"name"`
	} `yaml:"metadata"`
	Data map[string]string `yaml:"data"`
	Spec struct {
		MaxUnavailable any `yaml:"maxUnavailable"`
		Selector       struct {
			MatchLabels map[string]string `yaml:"matchLabels"`
		} `yaml:"selector"`
		Replicas                 *int   `yaml:"replicas"`
		ServiceName              string `yaml:"serviceName"`
		ClusterIP                string `yaml:"clusterIP"`
		PublishNotReadyAddresses bool   `yaml:"publishNotReadyAddresses"`
		Template                 struct {
			Spec struct {
				InitContainers []k8sContainer `yaml:"initContainers"`
				Containers     []k8sContainer `yaml:"containers"`
			} `yaml:"spec"`
		} `yaml:"template"`
		VolumeClaimTemplates []struct {
			Metadata struct {
				Name string `yaml:"name"`
			} `yaml:"metadata"`
		} `yaml:"volumeClaimTemplates"`
	} `yaml:"spec"`
}

// readKustomization decodes every object of the resources a kustomization
// lists, by kind/name.
func readKustomization(t *testing.T, dir string) map[string]k8sObject {
	t.Helper()
	var kust struct {
		Resources []string `yaml:"resources"`
	}
	raw, err := os.ReadFile(filepath.Join(dir, "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(raw, &kust); err != nil {
		t.Fatalf("kustomization.yaml: %v", err)
	}
	objects := map[string]k8sObject{}
	for _, res := range kust.Resources {
		f, err := os.Open(filepath.Join(dir, res))
		if err != nil {
			t.Fatalf("kustomization lists %s: %v", res, err)
		}
		dec := yaml.NewDecoder(f)
		for {
			var o k8sObject
			if err := dec.Decode(&o); errors.Is(err, io.EOF) {
				break
			} else if err != nil {
				t.Fatalf("%s: %v", res, err)
			}
			objects[o.Kind+"/"+o.Metadata.Name] = o
		}
		f.Close()
	}
	return objects
}

var k8sVarRef = regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`)

// podEnviron is the environment Kubernetes gives container c of pod (in
// namespace ns): the ConfigMap, the secret (here secret's keys), then env:
// with $(VAR) references expanded, as the kubelet does.
func podEnviron(t *testing.T, objects map[string]k8sObject, c k8sContainer, pod, ns string, secret map[string]string) map[string]string {
	t.Helper()
	env := map[string]string{}
	for _, from := range c.EnvFrom {
		switch {
		case from.ConfigMapRef != nil:
			cm, ok := objects["ConfigMap/"+from.ConfigMapRef.Name]
			if !ok {
				t.Errorf("%s: envFrom names ConfigMap %q, which the kustomization does not create", c.Name, from.ConfigMapRef.Name)
			}
			for k, v := range cm.Data {
				env[k] = v
			}
		case from.SecretRef != nil:
			if o := from.SecretRef.Optional; o != nil && *o {
				t.Errorf("%s: secret %q is optional: a node without it has no cluster secret", c.Name, from.SecretRef.Name)
			}
			for k, v := range secret {
				env[k] = v
			}
		}
	}
	for _, e := range c.Env {
		v := e.Value
		if e.ValueFrom != nil && e.ValueFrom.FieldRef != nil {
			switch e.ValueFrom.FieldRef.FieldPath {
			case "metadata.name":
				v = pod
			case "metadata.namespace":
				v = ns
			default:
				t.Errorf("%s: env %s from field %s", c.Name, e.Name, e.ValueFrom.FieldRef.FieldPath)
			}
		}
		env[e.Name] = k8sVarRef.ReplaceAllStringFunc(v, func(ref string) string {
			return env[k8sVarRef.FindStringSubmatch(ref)[1]]
		})
	}
	return env
}

// The cluster example (deploy/kubernetes-cluster): three nodes whose node
// IDs are their pods' names, reachable at their advertised URLs through a
// headless service that publishes them before they are ready; a Job
// creates the cluster with exactly the pods' names (no init container: it
// waits for the nodes to report what they hold); each node's
// settings load as a valid cluster node's; data and audit trail on claims
// of their own.
func TestKubernetesClusterManifests(t *testing.T) {
	dir := filepath.Join(repoRoot(t), "deploy", "kubernetes-cluster")
	objects := readKustomization(t, dir)
	sts, ok := objects["StatefulSet/progressdb-cluster"]
	if !ok {
		t.Fatalf("no StatefulSet/progressdb-cluster among %v", slices.Sorted(maps.Keys(objects)))
	}
	if sts.Spec.Replicas == nil || *sts.Spec.Replicas != 3 {
		t.Fatalf("replicas %v, want 3", sts.Spec.Replicas)
	}
	replicas := *sts.Spec.Replicas
	headless, ok := objects["Service/"+sts.Spec.ServiceName]
	if !ok || headless.Spec.ClusterIP != "None" || !headless.Spec.PublishNotReadyAddresses {
		t.Errorf("serviceName %q: want a headless Service publishing pods before they are ready: %+v", sts.Spec.ServiceName, headless.Spec)
	}
	spec := sts.Spec.Template.Spec
	if len(spec.Containers) != 1 || len(spec.InitContainers) != 0 {
		t.Fatalf("%d containers and %d init containers, want 1 and 0: a node must start before the cluster is created", len(spec.Containers), len(spec.InitContainers))
	}
	node := spec.Containers[0]
	var pods []string
	for i := range replicas {
		pods = append(pods, sts.Metadata.Name+"-"+strconv.Itoa(i))
	}
	job, ok := objects["Job/progressdb-cluster-create"]
	if !ok || len(job.Spec.Template.Spec.Containers) != 1 {
		t.Fatalf("want a Job progressdb-cluster-create of one container: %+v", job.Spec.Template.Spec)
	}
	create := job.Spec.Template.Spec.Containers[0]
	if want := []string{"cluster", "create", "--nodes", strings.Join(pods, ","), "--wait", "10m"}; !slices.Equal(create.Args, want) {
		t.Errorf("create Job args %q, want %q: the cluster's nodes are the pods", create.Args, want)
	}
	if !reflect.DeepEqual(create.EnvFrom, node.EnvFrom) {
		t.Error("the create Job's settings differ from the node's: it must create the cluster the nodes join")
	}
	jobEnv := podEnviron(t, objects, create, "progressdb-cluster-create-x", "chat", map[string]string{
		"PROGRESSDB_CLUSTER_SECRET": "0123456789abcdef0123", "PROGRESSDB_API_KEY": "k", "PROGRESSDB_ADMIN_TOKEN": "a"})
	var jobEnviron []string
	for k, v := range jobEnv {
		jobEnviron = append(jobEnviron, k+"="+v)
	}
	if cfg, err := config.Load(jobEnviron); err != nil || !cfg.Cluster.Enabled() || slices.Contains(pods, cfg.NodeID) {
		t.Errorf("create Job: settings %v, node ID %q: want a cluster's, under a node ID no pod has", err, cfg.NodeID)
	}

	port := 0
	for _, p := range node.Ports {
		if p.Name == "http" {
			port = p.ContainerPort
		}
	}
	secret := map[string]string{
		"PROGRESSDB_CLUSTER_SECRET": "0123456789abcdef0123", "PROGRESSDB_API_KEY": "k", "PROGRESSDB_ADMIN_TOKEN": "a",
	}
	for _, pod := range pods {
		env := podEnviron(t, objects, node, pod, "chat", secret)
		var environ []string
		for k, v := range env {
			environ = append(environ, k+"="+v)
		}
		cfg, err := config.Load(environ)
		if err != nil {
			t.Fatalf("pod %s: settings do not load: %v", pod, err)
		}
		if !cfg.Cluster.Enabled() || cfg.NodeID != pod {
			t.Errorf("pod %s: cluster %v, node ID %q", pod, cfg.Cluster.Enabled(), cfg.NodeID)
		}
		if want := fmt.Sprintf("http://%s.%s.chat.svc:%d", pod, sts.Spec.ServiceName, port); cfg.AdvertiseURL != want {
			t.Errorf("pod %s: advertise URL %q, want %q", pod, cfg.AdvertiseURL, want)
		}
		if want := "0.0.0.0:" + strconv.Itoa(port); cfg.Addr != want {
			t.Errorf("pod %s: PROGRESSDB_ADDR %q, want %q", pod, cfg.Addr, want)
		}
		checkAuditOutsideDB(t, cfg)
		claims := map[string]bool{}
		for _, v := range sts.Spec.VolumeClaimTemplates {
			claims[v.Metadata.Name] = true
		}
		mounts := map[string]string{}
		for _, m := range node.VolumeMounts {
			if claims[m.Name] {
				mounts[m.MountPath] = m.Name
			}
		}
		if db, audit := mounts[cfg.DBPath], mounts[cfg.Retention.AuditPath]; db == "" || audit == "" || db == audit {
			t.Errorf("database %q and audit trail %q need claims of their own: %v", cfg.DBPath, cfg.Retention.AuditPath, mounts)
		}
	}
	// Voluntary disruptions take one node, and so its shards, at a time.
	pdb, ok := objects["PodDisruptionBudget/"+sts.Metadata.Name]
	if !ok || pdb.Spec.MaxUnavailable != 1 || !maps.Equal(pdb.Spec.Selector.MatchLabels, sts.Spec.Selector.MatchLabels) {
		t.Errorf("want a PodDisruptionBudget of maxUnavailable 1 over the StatefulSet's pods: %+v", pdb.Spec)
	}
	if p := node.ReadinessProbe; p == nil || p.HTTPGet == nil || p.HTTPGet.Path != "/healthz" {
		t.Error("the node needs a readiness probe on /healthz")
	}

	kubectl := testtools.Need(t, "kubectl", "kustomization not rendered")
	if out, err := exec.Command(kubectl, "kustomize", dir).CombinedOutput(); err != nil {
		t.Errorf("kubectl kustomize %s: %v\n%s", dir, err, out)
	}
}
