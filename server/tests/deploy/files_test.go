package deploy

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/progressdb/progressdb/server/internal/buildinfo"
	"github.com/progressdb/progressdb/server/internal/testtools"
	"github.com/progressdb/progressdb/server/pkg/config"
)

// unitSettings reads the [Service] settings of a unit file (a key may
// repeat).
func unitSettings(t *testing.T, path string) map[string][]string {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	settings := map[string][]string{}
	section := ""
	for _, line := range strings.Split(string(raw), "\n") {
		line = strings.TrimSpace(line)
		switch {
		case line == "" || strings.HasPrefix(line, "#"):
		case strings.HasPrefix(line, "["):
			section = line
		case section == "[Service]":
			k, v, _ := strings.Cut(line, "=")
			settings[k] = append(settings[k], v)
		}
	}
	return settings
}

func TestSystemdUnit(t *testing.T) {
	path := filepath.Join(repoRoot(t), "deploy", "systemd", "progressdb.service")
	s := unitSettings(t, path)
	for k, want := range map[string]string{
		"ProtectSystem":   "strict",
		"NoNewPrivileges": "yes",
		"DynamicUser":     "yes",
		"ProtectHome":     "yes",
		"PrivateTmp":      "yes",
		"KillSignal":      "SIGTERM",
	} {
		if got := s[k]; len(got) != 1 || got[0] != want {
			t.Errorf("%s=%v, want %s", k, got, want)
		}
	}
	// The database and the backups must be in the directories
	// ProtectSystem=strict leaves writable, the backups outside the
	// database's, and the settings must load.
	env := map[string]string{}
	var environ []string
	for _, e := range s["Environment"] {
		k, v, _ := strings.Cut(e, "=")
		env[k] = v
		environ = append(environ, e)
	}
	state := strings.Fields(strings.Join(s["StateDirectory"], " "))
	if len(state) == 0 || state[0] != "progressdb" || env["PROGRESSDB_DB_PATH"] != "/var/lib/progressdb" {
		t.Errorf("StateDirectory %v, PROGRESSDB_DB_PATH %q: the database must be in the state directory progressdb", state, env["PROGRESSDB_DB_PATH"])
	}
	backups, ok := strings.CutPrefix(env["PROGRESSDB_BACKUP_PATH"], "/var/lib/")
	if !ok || !slices.Contains(state[1:], backups) {
		t.Errorf("PROGRESSDB_BACKUP_PATH %q is not a state directory of its own (StateDirectory %v)", env["PROGRESSDB_BACKUP_PATH"], state)
	}
	if cfg, err := config.Load(environ); err != nil {
		t.Errorf("the unit's settings do not load: %v", err)
	} else {
		checkAuditOutsideDB(t, cfg)
	}
	if audit, ok := strings.CutPrefix(env["PROGRESSDB_RETENTION_AUDIT_PATH"], "/var/lib/"); !ok || !slices.Contains(state[1:], audit) {
		t.Errorf("PROGRESSDB_RETENTION_AUDIT_PATH %q is not a state directory of its own (StateDirectory %v)", env["PROGRESSDB_RETENTION_AUDIT_PATH"], state)
	}
	exec0 := strings.Fields(strings.Join(s["ExecStart"], ""))
	if len(exec0) != 2 || exec0[1] != "serve" {
		t.Fatalf("ExecStart %v, want <binary> serve", exec0)
	}

	analyze := testtools.Need(t, "systemd-analyze", "Debian package systemd; unit not verified")
	// verify checks that ExecStart's binary exists; the test binary stands
	// in for the installed one, the rest of the unit is as shipped.
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := os.ReadFile(path)
	unit := filepath.Join(t.TempDir(), "progressdb.service")
	copied := strings.Replace(string(raw), "ExecStart="+exec0[0], "ExecStart="+self, 1)
	if err := os.WriteFile(unit, []byte(copied), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, analyze, "verify", unit).CombinedOutput()
	if err != nil || len(bytes.TrimSpace(out)) > 0 {
		t.Errorf("systemd-analyze verify: %v\n%s", err, out)
	}
	// The exposure level (0 safest, 10 unprotected; --threshold counts
	// tenths) stays at 2 or below.
	out, err = exec.CommandContext(ctx, analyze, "security", "--offline=yes", "--threshold=20", unit).CombinedOutput()
	if err != nil {
		var exit *exec.ExitError
		if errors.As(err, &exit) && strings.Contains(string(out), "Overall exposure level") {
			t.Errorf("systemd-analyze security: exposure above 2:\n%s", lastLines(out, 3))
		} else {
			t.Logf("systemd-analyze security --offline not available here: %v", err)
		}
	} else {
		t.Log(strings.TrimSpace(lastLines(out, 1)))
	}
}

func lastLines(b []byte, n int) string {
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

func TestDockerfile(t *testing.T) {
	root := repoRoot(t)
	raw, err := os.ReadFile(filepath.Join(root, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	var froms, users, volumes []string
	env := map[string]string{}
	for _, line := range strings.Split(string(raw), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		switch strings.ToUpper(f[0]) {
		case "FROM":
			froms = append(froms, f[1])
		case "USER":
			users = append(users, f[1])
		case "VOLUME":
			volumes = append(volumes, strings.Trim(strings.Join(f[1:], ""), `[]"`))
		}
	}
	for _, m := range regexp.MustCompile(`(PROGRESSDB_[A-Z_]+)=(\S+)`).FindAllStringSubmatch(string(raw), -1) {
		env[m[1]] = m[2]
	}
	if len(froms) < 2 {
		t.Errorf("%d FROM lines: want a multi-stage build", len(froms))
	}
	if len(users) == 0 {
		t.Error("no USER: the server would run as root")
	}
	for _, u := range users {
		if name, _, _ := strings.Cut(u, ":"); name == "root" || name == "0" {
			t.Errorf("USER %s is root", u)
		}
	}
	if db := env["PROGRESSDB_DB_PATH"]; db == "" || len(volumes) != 1 || volumes[0] != db {
		t.Errorf("VOLUME %v must be PROGRESSDB_DB_PATH %q", volumes, db)
	}
	if !strings.HasPrefix(env["PROGRESSDB_ADDR"], "0.0.0.0:") {
		t.Errorf("PROGRESSDB_ADDR %q: a container must listen beyond loopback", env["PROGRESSDB_ADDR"])
	}

	// The build stamps version and commit into the buildinfo package; a
	// wrong -X path would be ignored without a word.
	pkg := reflect.TypeFor[buildinfo.Info]().PkgPath()
	for _, want := range []string{"-X " + pkg + ".version=${VERSION}", "-X " + pkg + ".commit=${COMMIT}"} {
		if !strings.Contains(string(raw), want) {
			t.Errorf("Dockerfile does not stamp %q", want)
		}
	}
	checkDockerignore(t, root)

	docker := testtools.Need(t, "docker", "image not built")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := exec.CommandContext(ctx, docker, "info").Run(); err != nil {
		t.Skip("no Docker daemon answers (docker info failed): image not built")
	}
	if testing.Short() {
		t.Skip("-short: docker build skipped")
	}
	ctx, cancel = context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, docker, "build", "--quiet", "-t", "progressdb:test", root)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("docker build: %v\n%s", err, lastLines(out.Bytes(), 30))
	}
}

func TestKubernetesManifests(t *testing.T) {
	dir := filepath.Join(repoRoot(t), "deploy", "kubernetes")
	type probe struct {
		HTTPGet *struct {
			Path string `yaml:"path"`
			Port any    `yaml:"port"`
		} `yaml:"httpGet"`
	}
	type container struct {
		Name  string `yaml:"name"`
		Ports []struct {
			Name          string `yaml:"name"`
			ContainerPort int    `yaml:"containerPort"`
		} `yaml:"ports"`
		Env []struct {
			Name  string `yaml:"name"`
			Value string `yaml:"value"`
		} `yaml:"env"`
		EnvFrom []struct {
			ConfigMapRef *envSource `yaml:"configMapRef"`
			SecretRef    *envSource `yaml:"secretRef"`
		} `yaml:"envFrom"`
		VolumeMounts []struct {
			Name      string `yaml:"name"`
			MountPath string `yaml:"mountPath"`
		} `yaml:"volumeMounts"`
		ReadinessProbe  *probe `yaml:"readinessProbe"`
		LivenessProbe   *probe `yaml:"livenessProbe"`
		SecurityContext struct {
			AllowPrivilegeEscalation *bool `yaml:"allowPrivilegeEscalation"`
		} `yaml:"securityContext"`
	}
	type object struct {
		Kind     string `yaml:"kind"`
		Metadata struct {
			Name string `yaml:"name"`
		} `yaml:"metadata"`
		Data map[string]string `yaml:"data"` // a ConfigMap's
		Spec struct {
			Replicas    *int   `yaml:"replicas"`
			ServiceName string `yaml:"serviceName"`
			Template    struct {
				Spec struct {
					SecurityContext struct {
						RunAsNonRoot bool `yaml:"runAsNonRoot"`
					} `yaml:"securityContext"`
					Containers []container `yaml:"containers"`
				} `yaml:"spec"`
			} `yaml:"template"`
			VolumeClaimTemplates []struct {
				Metadata struct {
					Name string `yaml:"name"`
				} `yaml:"metadata"`
			} `yaml:"volumeClaimTemplates"`
		} `yaml:"spec"`
	}

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
	objects := map[string]object{}
	for _, res := range kust.Resources {
		f, err := os.Open(filepath.Join(dir, res))
		if err != nil {
			t.Fatalf("kustomization lists %s: %v", res, err)
		}
		dec := yaml.NewDecoder(f)
		for {
			var o object
			if err := dec.Decode(&o); errors.Is(err, io.EOF) {
				break
			} else if err != nil {
				t.Fatalf("%s: %v", res, err)
			}
			objects[o.Kind+"/"+o.Metadata.Name] = o
		}
		f.Close()
	}

	sts, ok := objects["StatefulSet/progressdb"]
	if !ok {
		t.Fatalf("no StatefulSet/progressdb among %v", objects)
	}
	if _, ok := objects["Service/"+sts.Spec.ServiceName]; !ok {
		t.Errorf("serviceName %q names no Service", sts.Spec.ServiceName)
	}
	if r := sts.Spec.Replicas; r == nil || *r != 1 {
		t.Errorf("replicas %v: one process opens a database", r)
	}
	if !sts.Spec.Template.Spec.SecurityContext.RunAsNonRoot {
		t.Error("pod securityContext lacks runAsNonRoot")
	}
	if len(sts.Spec.Template.Spec.Containers) != 1 {
		t.Fatalf("%d containers, want 1", len(sts.Spec.Template.Spec.Containers))
	}
	c := sts.Spec.Template.Spec.Containers[0]
	// A variable under env: wins over every envFrom source, so the secret
	// could not change it: settings come from envFrom alone.
	for _, e := range c.Env {
		t.Errorf("env: sets %s: env: wins over envFrom, so the secret cannot override it; put it in the ConfigMap", e.Name)
	}
	// The ConfigMap's defaults come first and the secret last (a later
	// source wins), and the secret is required: a pod without it would
	// serve /v1 with no API key to the whole cluster.
	env := map[string]string{}
	var sources []string
	for _, from := range c.EnvFrom {
		switch {
		case from.ConfigMapRef != nil:
			sources = append(sources, "configMap")
			cm, ok := objects["ConfigMap/"+from.ConfigMapRef.Name]
			if !ok {
				t.Errorf("envFrom names ConfigMap %q, which the kustomization does not create", from.ConfigMapRef.Name)
			}
			for k, v := range cm.Data {
				env[k] = v
			}
		case from.SecretRef != nil:
			sources = append(sources, "secret")
			if o := from.SecretRef.Optional; o != nil && *o {
				t.Errorf("secret %q is optional: a pod without it serves /v1 with no API key", from.SecretRef.Name)
			}
		}
	}
	if want := []string{"configMap", "secret"}; !slices.Equal(sources, want) {
		t.Errorf("envFrom sources %v, want %v: the secret last, so it overrides the defaults", sources, want)
	}
	var environ []string
	for k, v := range env {
		environ = append(environ, k+"="+v)
	}
	if cfg, err := config.Load(environ); err != nil {
		t.Errorf("the ConfigMap's settings do not load: %v", err)
	} else {
		checkAuditOutsideDB(t, cfg)
	}
	if env["PROGRESSDB_RETENTION_ENABLED"] == "true" {
		t.Error("the ConfigMap turns retention on: everywhere else it is off unless the operator turns it on (in the secret)")
	}
	claims := map[string]bool{}
	for _, v := range sts.Spec.VolumeClaimTemplates {
		claims[v.Metadata.Name] = true
	}
	onClaim := false
	for _, m := range c.VolumeMounts {
		if claims[m.Name] && m.MountPath == env["PROGRESSDB_DB_PATH"] {
			onClaim = true
		}
	}
	if !onClaim {
		t.Errorf("PROGRESSDB_DB_PATH %q is not the mount of a volumeClaimTemplate", env["PROGRESSDB_DB_PATH"])
	}
	// Scheduled backups go to a volume of their own: losing the data
	// volume must not take them with it.
	mounts := map[string]string{}
	for _, m := range c.VolumeMounts {
		if claims[m.Name] {
			mounts[m.MountPath] = m.Name
		}
	}
	for _, v := range []string{"PROGRESSDB_BACKUP_PATH", "PROGRESSDB_RETENTION_AUDIT_PATH"} {
		if p := env[v]; mounts[p] == "" || mounts[p] == mounts[env["PROGRESSDB_DB_PATH"]] {
			t.Errorf("%s %q is not the mount of a volumeClaimTemplate other than the database's", v, p)
		}
	}
	port := 0
	for _, p := range c.Ports {
		if p.Name == "http" {
			port = p.ContainerPort
		}
	}
	if want := "0.0.0.0:" + strconv.Itoa(port); port == 0 || env["PROGRESSDB_ADDR"] != want {
		t.Errorf("PROGRESSDB_ADDR %q, want %q (the http containerPort)", env["PROGRESSDB_ADDR"], want)
	}
	for name, p := range map[string]*probe{"readinessProbe": c.ReadinessProbe, "livenessProbe": c.LivenessProbe} {
		if p == nil || p.HTTPGet == nil || p.HTTPGet.Path != "/healthz" || (p.HTTPGet.Port != "http" && p.HTTPGet.Port != port) {
			t.Errorf("%s must GET /healthz on the http port", name)
		}
	}
	if a := c.SecurityContext.AllowPrivilegeEscalation; a == nil || *a {
		t.Error("container allows privilege escalation")
	}

	kubectl := testtools.Need(t, "kubectl", "kustomization not rendered")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if out, err := exec.CommandContext(ctx, kubectl, "kustomize", dir).CombinedOutput(); err != nil {
		t.Errorf("kubectl kustomize %s: %v\n%s", dir, err, out)
	}
}

// envSource is an envFrom entry's reference to a ConfigMap or a secret.
type envSource struct {
	Name     string `yaml:"name"`
	Optional *bool  `yaml:"optional"`
}

// checkDockerignore makes sure .dockerignore keeps every file the build
// needs in the context: go.mod, go.sum and the non-test sources and
// embedded files of the packages the binary is built from.
func checkDockerignore(t *testing.T, root string) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(root, ".dockerignore"))
	if err != nil {
		t.Fatal(err)
	}
	var patterns []string
	for _, line := range strings.Split(string(raw), "\n") {
		if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "#") {
			patterns = append(patterns, strings.TrimPrefix(line, "/"))
		}
	}
	needed := []string{"go.mod", "go.sum"}
	for _, dir := range []string{"api", "audit", "server"} {
		err := filepath.WalkDir(filepath.Join(root, dir), func(p string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			rel, _ := filepath.Rel(root, p)
			if strings.Contains(rel, "testdata") || strings.HasSuffix(rel, "_test.go") {
				return nil
			}
			if strings.HasSuffix(rel, ".go") || strings.HasSuffix(rel, ".yaml") {
				needed = append(needed, filepath.ToSlash(rel))
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range needed {
		for _, pat := range patterns {
			if ignored(pat, p) {
				t.Errorf(".dockerignore pattern %q leaves %s out of the build context", pat, p)
			}
		}
	}
}

// ignored reports whether a .dockerignore pattern covers path: the path
// itself or one of its parent folders matches, "**/" matching any depth.
func ignored(pattern, path string) bool {
	rest, anyDepth := strings.CutPrefix(pattern, "**/")
	parts := strings.Split(path, "/")
	for end := 1; end <= len(parts); end++ {
		starts := []int{0}
		if anyDepth {
			starts = starts[:0]
			for start := range end {
				starts = append(starts, start)
			}
		}
		for _, start := range starts {
			if ok, _ := filepath.Match(rest, strings.Join(parts[start:end], "/")); ok {
				return true
			}
		}
	}
	return false
}

// checkAuditOutsideDB fails when scheduled backups are on and the audit
// trail lies inside the database's folder: serve warns of it at start, and a
// database copied back by hand would bring an old trail with it, so the
// purges made since could not be replayed (docs/backup.md).
func checkAuditOutsideDB(t *testing.T, cfg config.Config) {
	t.Helper()
	if cfg.Backup.Path == "" {
		return
	}
	rel, err := filepath.Rel(cfg.DBPath, cfg.Retention.AuditPath)
	if err != nil || rel == "." || !strings.HasPrefix(rel, "..") {
		t.Errorf("audit folder %q is inside PROGRESSDB_DB_PATH %q while backups are on: set PROGRESSDB_RETENTION_AUDIT_PATH outside it", cfg.Retention.AuditPath, cfg.DBPath)
	}
}
