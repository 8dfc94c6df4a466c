package deploy

// The Kubernetes manifests are decoded strictly into the API types of
// k8s.io/api (an unknown or misspelt field is an error; nothing is
// downloaded), checked against each other (names, keys, ports, labels),
// and then run: each pod's container command, arguments and environment,
// with its volumes as directories, starts the real ocierofs-mirror, whose
// probes and metrics must answer on the port the manifests name.

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"
)

// imageUID is the user of ocierofs's image (internal/imagebuild.UID).
const imageUID = 65532

// manifestDirs are the deployments, each applied as a whole
// (kubectl apply -f DIR).
var manifestDirs = []string{"kubernetes/single", "kubernetes/nats"}

// object is one decoded document of a manifest file.
type object struct {
	file, kind, name string
	obj              any
}

// newObject is the typed object of an apiVersion and kind; the kinds the
// manifests may hold and no others.
func newObject(apiVersion, kind string) (any, error) {
	switch apiVersion + " " + kind {
	case "v1 Secret":
		return &corev1.Secret{}, nil
	case "v1 ConfigMap":
		return &corev1.ConfigMap{}, nil
	case "v1 Service":
		return &corev1.Service{}, nil
	case "v1 PersistentVolumeClaim":
		return &corev1.PersistentVolumeClaim{}, nil
	case "apps/v1 Deployment":
		return &appsv1.Deployment{}, nil
	case "apps/v1 StatefulSet":
		return &appsv1.StatefulSet{}, nil
	}
	return nil, fmt.Errorf("apiVersion %q kind %q: not a kind these manifests use", apiVersion, kind)
}

// decodeStrict decodes one YAML document into its API type, refusing
// unknown and duplicate fields.
func decodeStrict(doc []byte) (object, error) {
	var tm struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Metadata   struct {
			Name string `json:"name"`
		} `json:"metadata"`
	}
	if err := yaml.Unmarshal(doc, &tm); err != nil {
		return object{}, err
	}
	obj, err := newObject(tm.APIVersion, tm.Kind)
	if err != nil {
		return object{}, err
	}
	if err := yaml.UnmarshalStrict(doc, obj); err != nil {
		return object{}, fmt.Errorf("%s %s: %w", tm.Kind, tm.Metadata.Name, err)
	}
	if tm.Metadata.Name == "" {
		return object{}, fmt.Errorf("a %s without a name", tm.Kind)
	}
	return object{kind: tm.Kind, name: tm.Metadata.Name, obj: obj}, nil
}

// splitDocs splits a YAML stream at its "---" lines; documents of only
// comments are dropped.
func splitDocs(b []byte) [][]byte {
	var docs [][]byte
	for _, d := range bytes.Split(append([]byte("\n"), b...), []byte("\n---")) {
		empty := true
		for _, l := range strings.Split(string(d), "\n") {
			if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
				empty = false
			}
		}
		if !empty {
			docs = append(docs, d)
		}
	}
	return docs
}

// loadDir decodes every .yaml file of dir.
func loadDir(t *testing.T, dir string) []object {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests in %s: %v", dir, err)
	}
	var objs []object
	seen := map[string]string{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, doc := range splitDocs(b) {
			o, err := decodeStrict(doc)
			if err != nil {
				t.Errorf("%s: %v", f, err)
				continue
			}
			o.file = f
			key := o.kind + "/" + o.name
			if prev, ok := seen[key]; ok {
				t.Errorf("%s: %s again (first in %s)", f, key, prev)
			}
			seen[key] = f
			objs = append(objs, o)
		}
	}
	return objs
}

func find[T any](objs []object, name string) *T {
	for _, o := range objs {
		if v, ok := o.obj.(*T); ok && o.name == name {
			return v
		}
	}
	return nil
}

func all[T any](objs []object) []*T {
	var out []*T
	for _, o := range objs {
		if v, ok := o.obj.(*T); ok {
			out = append(out, v)
		}
	}
	return out
}

// TestStrictDecoding: the decoder does refuse what the API server would
// not know, so that the manifests' passing means something.
func TestStrictDecoding(t *testing.T) {
	for what, doc := range map[string]string{
		"misspelt field": "apiVersion: v1\nkind: Service\nmetadata:\n  name: x\nspec:\n  selectr:\n    a: b\n",
		"unknown field":  "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: x\nspec:\n  replicas: 1\n  strategy:\n    type: Recreate\n    maxSurge: 1\n",
		"duplicate key":  "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\n  name: y\n",
		"wrong type":     "apiVersion: v1\nkind: Service\nmetadata:\n  name: x\nspec:\n  ports: 8080\n",
		"unknown kind":   "apiVersion: v1\nkind: Pod\nmetadata:\n  name: x\n",
	} {
		if _, err := decodeStrict([]byte(doc)); err == nil {
			t.Errorf("%s: decoded without error", what)
		}
	}
	if _, err := decodeStrict([]byte("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\ndata:\n  a: b\n")); err != nil {
		t.Errorf("a valid ConfigMap: %v", err)
	}
}

// podTemplates are the workloads of a deployment, by name.
func podTemplates(objs []object) map[string]*corev1.PodTemplateSpec {
	out := map[string]*corev1.PodTemplateSpec{}
	for _, d := range all[appsv1.Deployment](objs) {
		out[d.Name] = &d.Spec.Template
	}
	for _, s := range all[appsv1.StatefulSet](objs) {
		out[s.Name] = &s.Spec.Template
	}
	return out
}

// TestManifests checks that the objects of each deployment fit together
// and follow the mirror's rules.
func TestManifests(t *testing.T) {
	for _, dir := range manifestDirs {
		t.Run(filepath.Base(dir), func(t *testing.T) {
			objs := loadDir(t, dir)
			checkManifests(t, objs)
		})
	}
}

func checkManifests(t *testing.T, objs []object) {
	pods := podTemplates(objs)
	if len(pods) == 0 {
		t.Fatal("no Deployment or StatefulSet")
	}
	for _, d := range all[appsv1.Deployment](objs) {
		checkSelector(t, "Deployment "+d.Name, d.Spec.Selector.MatchLabels, d.Spec.Template.Labels)
		embedded := !slices.ContainsFunc(d.Spec.Template.Spec.Containers[0].Env, func(e corev1.EnvVar) bool { return e.Name == "OCIEROFS_NATS" })
		if embedded {
			// The embedded NATS server locks its store: one pod at a time.
			if d.Spec.Replicas == nil || *d.Spec.Replicas != 1 || d.Spec.Strategy.Type != appsv1.RecreateDeploymentStrategyType {
				t.Errorf("Deployment %s has the queue embedded: want 1 replica and strategy Recreate, got %v %q", d.Name, d.Spec.Replicas, d.Spec.Strategy.Type)
			}
		}
	}
	for _, s := range all[appsv1.StatefulSet](objs) {
		checkSelector(t, "StatefulSet "+s.Name, s.Spec.Selector.MatchLabels, s.Spec.Template.Labels)
	}
	for name, pt := range pods {
		checkPod(t, objs, name, pt)
	}
	services := all[corev1.Service](objs)
	if len(services) == 0 {
		t.Error("no Service for the notifications")
	}
	for _, svc := range services {
		var matched []*corev1.PodTemplateSpec
		for _, pt := range pods {
			if len(svc.Spec.Selector) > 0 && labelsMatch(svc.Spec.Selector, pt.Labels) {
				matched = append(matched, pt)
			}
		}
		if len(matched) == 0 {
			t.Errorf("Service %s selects no pod (selector %v)", svc.Name, svc.Spec.Selector)
		}
		for _, pt := range matched {
			for _, p := range svc.Spec.Ports {
				if _, ok := containerPort(pt.Spec.Containers[0], p.TargetPort); !ok {
					t.Errorf("Service %s port %s: target %s is no port of the pods", svc.Name, p.Name, p.TargetPort.String())
				}
				if args := pt.Spec.Containers[0].Args; slices.Contains(args, "--worker") {
					t.Errorf("Service %s sends notifications to workers (serve --worker refuses them)", svc.Name)
				}
			}
		}
	}
}

func checkSelector(t *testing.T, what string, sel, labels map[string]string) {
	t.Helper()
	if len(sel) == 0 || !labelsMatch(sel, labels) {
		t.Errorf("%s: selector %v does not select its own pods %v", what, sel, labels)
	}
}

func labelsMatch(sel, labels map[string]string) bool {
	for k, v := range sel {
		if labels[k] != v {
			return false
		}
	}
	return true
}

// containerPort resolves a port by number or name.
func containerPort(c corev1.Container, p intstr.IntOrString) (int32, bool) {
	for _, cp := range c.Ports {
		if p.Type == intstr.String && cp.Name == p.StrVal || p.Type == intstr.Int && cp.ContainerPort == p.IntVal {
			return cp.ContainerPort, true
		}
	}
	return 0, false
}

func checkPod(t *testing.T, objs []object, name string, pt *corev1.PodTemplateSpec) {
	t.Helper()
	spec := pt.Spec
	if len(spec.Containers) != 1 {
		t.Fatalf("%s: %d containers, want the mirror alone", name, len(spec.Containers))
	}
	c := spec.Containers[0]
	if !slices.Equal(c.Command, []string{"/usr/local/bin/ocierofs-mirror"}) || len(c.Args) == 0 || c.Args[0] != "serve" {
		t.Errorf("%s: runs %q %q, want ocierofs-mirror serve", name, c.Command, c.Args)
	}
	// Non-root, as the image's user.
	psc := spec.SecurityContext
	if psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.RunAsUser == nil || *psc.RunAsUser != imageUID {
		t.Errorf("%s: pod security context %+v: want runAsNonRoot and runAsUser %d", name, psc, imageUID)
	}
	if sc := c.SecurityContext; sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem ||
		sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
		t.Errorf("%s: container security context %+v: want a read-only root and no privilege escalation", name, sc)
	}
	// The listen port is the container port the probes and Prometheus use.
	listen := flagValue(c.Args, "--listen")
	_, portStr, err := net.SplitHostPort(listen)
	if err != nil {
		t.Errorf("%s: --listen %q: %v", name, listen, err)
	}
	port, _ := strconv.Atoi(portStr)
	probes := map[string]*corev1.Probe{"liveness": c.LivenessProbe, "readiness": c.ReadinessProbe}
	wantPath := map[string]string{"liveness": "/healthz", "readiness": "/readyz"}
	for kind, p := range probes {
		if p == nil || p.HTTPGet == nil {
			t.Errorf("%s: no HTTP %s probe", name, kind)
			continue
		}
		if p.HTTPGet.Path != wantPath[kind] {
			t.Errorf("%s: %s probe on %s, want %s", name, kind, p.HTTPGet.Path, wantPath[kind])
		}
		if got, ok := containerPort(c, p.HTTPGet.Port); !ok || int(got) != port {
			t.Errorf("%s: %s probe on port %s (%d), the mirror listens on %d", name, kind, p.HTTPGet.Port.String(), got, port)
		}
	}
	ann := pt.Annotations
	if ann["prometheus.io/scrape"] != "true" || ann["prometheus.io/path"] != "/metrics" || ann["prometheus.io/port"] != strconv.Itoa(port) {
		t.Errorf("%s: scrape annotations %v, want scrape true, path /metrics, port %d", name, ann, port)
	}
	// Every reference resolves: Secrets and ConfigMaps with their keys,
	// volumes and their mounts.
	for _, e := range c.Env {
		if e.ValueFrom == nil {
			continue
		}
		if r := e.ValueFrom.SecretKeyRef; r != nil {
			if _, ok := secretData(objs, r.Name)[r.Key]; !ok {
				t.Errorf("%s: env %s: Secret %s has no key %s", name, e.Name, r.Name, r.Key)
			}
		}
		if r := e.ValueFrom.ConfigMapKeyRef; r != nil {
			if cm := find[corev1.ConfigMap](objs, r.Name); cm == nil || cm.Data[r.Key] == "" {
				t.Errorf("%s: env %s: ConfigMap %s has no key %s", name, e.Name, r.Name, r.Key)
			}
		}
	}
	volumes := map[string]corev1.Volume{}
	for _, v := range spec.Volumes {
		volumes[v.Name] = v
		switch {
		case v.Secret != nil:
			data := secretData(objs, v.Secret.SecretName)
			if data == nil {
				t.Errorf("%s: volume %s: no Secret %s", name, v.Name, v.Secret.SecretName)
			}
			for _, it := range v.Secret.Items {
				if _, ok := data[it.Key]; !ok {
					t.Errorf("%s: volume %s: Secret %s has no key %s", name, v.Name, v.Secret.SecretName, it.Key)
				}
			}
		case v.ConfigMap != nil:
			if find[corev1.ConfigMap](objs, v.ConfigMap.Name) == nil {
				t.Errorf("%s: volume %s: no ConfigMap %s", name, v.Name, v.ConfigMap.Name)
			}
		case v.PersistentVolumeClaim != nil:
			if find[corev1.PersistentVolumeClaim](objs, v.PersistentVolumeClaim.ClaimName) == nil {
				t.Errorf("%s: volume %s: no PersistentVolumeClaim %s", name, v.Name, v.PersistentVolumeClaim.ClaimName)
			}
		}
	}
	mounted := map[string]bool{}
	for _, m := range c.VolumeMounts {
		if _, ok := volumes[m.Name]; !ok {
			t.Errorf("%s: mount %s of no volume", name, m.Name)
		}
		mounted[m.MountPath] = true
	}
	for v := range volumes {
		if !slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return m.Name == v }) {
			t.Errorf("%s: volume %s is not mounted", name, v)
		}
	}
	// The root is read-only: what the mirror writes must be a volume.
	if !mounted["/tmp"] {
		t.Errorf("%s: no volume on /tmp, where converted layers wait", name)
	}
	if store := flagValue(c.Args, "--nats-store"); store != "" && !underMount(store, c.VolumeMounts) {
		t.Errorf("%s: --nats-store %s is on no volume", name, store)
	}
	for _, f := range []string{"--config", "--secret-file"} {
		if p := flagValue(c.Args, f); p != "" && !underMount(p, c.VolumeMounts) {
			t.Errorf("%s: %s %s is on no volume", name, f, p)
		}
	}
}

func underMount(p string, mounts []corev1.VolumeMount) bool {
	for _, m := range mounts {
		if strings.HasPrefix(p, m.MountPath+"/") {
			return true
		}
	}
	return false
}

// flagValue is the value of --name=VALUE or --name VALUE in args.
func flagValue(args []string, name string) string {
	for i, a := range args {
		if v, ok := strings.CutPrefix(a, name+"="); ok {
			return v
		}
		if a == name && i+1 < len(args) {
			return args[i+1]
		}
	}
	return ""
}

// secretData is a Secret's data and stringData together.
func secretData(objs []object, name string) map[string]string {
	s := find[corev1.Secret](objs, name)
	if s == nil {
		return nil
	}
	out := map[string]string{}
	for k, v := range s.Data {
		out[k] = string(v)
	}
	for k, v := range s.StringData {
		out[k] = v
	}
	return out
}

// ---------------------------------------------------------------------------
// Running what the manifests describe.

var mirrorBin struct {
	once sync.Once
	path string
	err  error
}

// buildMirror builds ocierofs-mirror from the module beside this one.
func buildMirror(t *testing.T) string {
	t.Helper()
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go command to build ocierofs-mirror")
	}
	mirrorBin.once.Do(func() {
		dir, err := os.MkdirTemp("", "ocierofs-deploy-")
		if err != nil {
			mirrorBin.err = err
			return
		}
		mirrorBin.path = filepath.Join(dir, "ocierofs-mirror")
		cmd := exec.Command("go", "build", "-o", mirrorBin.path, "./cmd/ocierofs-mirror")
		cmd.Dir = ".."
		if out, err := cmd.CombinedOutput(); err != nil {
			mirrorBin.err = fmt.Errorf("go build ./cmd/ocierofs-mirror: %v\n%s", err, out)
		}
	})
	if mirrorBin.err != nil {
		t.Fatal(mirrorBin.err)
	}
	return mirrorBin.path
}

func TestMain(m *testing.M) {
	code := m.Run()
	if mirrorBin.path != "" {
		os.RemoveAll(filepath.Dir(mirrorBin.path))
	}
	os.Exit(code)
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// process is a program a test started, killed when the test ends.
type process struct {
	cmd  *exec.Cmd
	out  *bytes.Buffer
	mu   *sync.Mutex
	done chan struct{}
}

type lockedWriter struct {
	mu *sync.Mutex
	b  *bytes.Buffer
}

func (w lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

func start(t *testing.T, env []string, name string, args ...string) *process {
	t.Helper()
	p := &process{out: &bytes.Buffer{}, mu: &sync.Mutex{}, done: make(chan struct{})}
	p.cmd = exec.Command(name, args...)
	p.cmd.Env = env
	p.cmd.Stdout = lockedWriter{p.mu, p.out}
	p.cmd.Stderr = p.cmd.Stdout
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(20 * time.Second):
			p.cmd.Process.Kill()
			<-p.done
		}
	})
	return p
}

func (p *process) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.String()
}

// get answers a GET with status and body; the secret, if set, goes along.
func request(method, url, secret, body string) (int, string, error) {
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		return 0, "", err
	}
	if secret != "" {
		req.Header.Set("Authorization", "Bearer "+secret)
	}
	c := &http.Client{Timeout: 10 * time.Second}
	resp, err := c.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	var b bytes.Buffer
	b.ReadFrom(resp.Body)
	return resp.StatusCode, b.String(), nil
}

// waitOK polls url until it answers 200, or fails the test.
func waitOK(t *testing.T, p *process, url string) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		code, body, err := request("GET", url, "", "")
		if err == nil && code == http.StatusOK {
			return
		}
		select {
		case <-p.done:
			t.Fatalf("the mirror exited before %s answered:\n%s", url, p.output())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %d %q %v after 60s; the mirror said:\n%s", url, code, body, err, p.output())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// localPod is a pod's container made to run here: its volumes are
// directories of the test, its arguments and environment point into them.
type localPod struct {
	args, env []string
	port      int // the port of --listen, as the manifests give it
	url       string
	secret    string // the webhook secret, if the pod has one
}

// runnable maps the pod's container onto this machine. secrets may
// replace values of the Secret (the NATS URL of the test's cluster).
func runnable(t *testing.T, objs []object, pt *corev1.PodTemplateSpec, secrets map[string]string) localPod {
	t.Helper()
	c := pt.Spec.Containers[0]
	root := t.TempDir()
	volumes := map[string]corev1.Volume{}
	for _, v := range pt.Spec.Volumes {
		volumes[v.Name] = v
	}
	data := func(name string) map[string]string {
		d := secretData(objs, name)
		for k, v := range secrets {
			if _, ok := d[k]; ok {
				d[k] = v
			}
		}
		return d
	}
	type mapping struct{ from, to string }
	var maps []mapping
	var lp localPod
	for i, m := range c.VolumeMounts {
		dir := filepath.Join(root, "vol"+strconv.Itoa(i))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		v := volumes[m.Name]
		files := map[string]string{}
		switch {
		case v.ConfigMap != nil:
			cm := find[corev1.ConfigMap](objs, v.ConfigMap.Name)
			for k, val := range cm.Data {
				files[k] = val
			}
		case v.Secret != nil:
			d := data(v.Secret.SecretName)
			if len(v.Secret.Items) == 0 {
				for k, val := range d {
					files[k] = val
				}
			}
			for _, it := range v.Secret.Items {
				files[it.Path] = d[it.Key]
				if it.Key == "webhook-secret" {
					lp.secret = d[it.Key]
				}
			}
		}
		for name, content := range files {
			if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		maps = append(maps, mapping{m.MountPath, dir})
	}
	sort.Slice(maps, func(i, j int) bool { return len(maps[i].from) > len(maps[j].from) })
	local := func(s string) string {
		for _, m := range maps {
			if s == m.from || strings.HasPrefix(s, m.from+"/") {
				return m.to + s[len(m.from):]
			}
			if i := strings.Index(s, "="+m.from+"/"); i >= 0 {
				return s[:i+1] + m.to + s[i+1+len(m.from):]
			}
		}
		return s
	}
	listen := flagValue(c.Args, "--listen")
	_, ps, _ := net.SplitHostPort(listen)
	lp.port, _ = strconv.Atoi(ps)
	here := freePort(t)
	lp.url = fmt.Sprintf("http://127.0.0.1:%d", here)
	for _, a := range c.Args {
		if a == "--listen="+listen {
			a = fmt.Sprintf("--listen=127.0.0.1:%d", here)
		}
		lp.args = append(lp.args, local(a))
	}
	home := filepath.Join(root, "home")
	os.MkdirAll(home, 0o755)
	lp.env = []string{"PATH=/usr/bin:/bin", "HOME=" + home, "TMPDIR=" + local("/tmp")}
	for _, e := range c.Env {
		val := e.Value
		if f := e.ValueFrom; f != nil {
			switch {
			case f.SecretKeyRef != nil:
				val = data(f.SecretKeyRef.Name)[f.SecretKeyRef.Key]
				if e.Name == "OCIEROFS_WEBHOOK_SECRET" {
					lp.secret = val
				}
			case f.ConfigMapKeyRef != nil:
				val = find[corev1.ConfigMap](objs, f.ConfigMapKeyRef.Name).Data[f.ConfigMapKeyRef.Key]
			case f.ResourceFieldRef != nil:
				q, ok := c.Resources.Limits[corev1.ResourceName(strings.TrimPrefix(f.ResourceFieldRef.Resource, "limits."))]
				if !ok {
					t.Fatalf("env %s: no %s in the container's resources", e.Name, f.ResourceFieldRef.Resource)
				}
				val = strconv.FormatInt(q.Value(), 10)
			default:
				t.Fatalf("env %s: a source the test does not know", e.Name)
			}
		}
		lp.env = append(lp.env, e.Name+"="+local(val))
	}
	return lp
}

// checkServing checks what the probes and Prometheus ask of a running
// pod, and that notifications need the webhook secret.
func checkServing(t *testing.T, p *process, lp localPod, takesNotifications bool) {
	t.Helper()
	waitOK(t, p, lp.url+"/healthz")
	waitOK(t, p, lp.url+"/readyz")
	code, body, err := request("GET", lp.url+"/metrics", "", "")
	if err != nil || code != http.StatusOK || !strings.Contains(body, "ocierofs_mirror_queue_depth") {
		t.Errorf("/metrics: %d %v\n%.300s", code, err, body)
	}
	if !takesNotifications {
		return
	}
	if lp.secret == "" {
		t.Fatal("the pod takes notifications without a webhook secret")
	}
	const event = `{"events":[{"action":"push","target":{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"sha256:0123456789012345678901234567890123456789012345678901234567890123","repository":"apps/deploy-test","tag":"v1"},"request":{"useragent":"docker/27"}}]}`
	if code, body, err := request("POST", lp.url+"/notify", "", event); err != nil || code != http.StatusUnauthorized {
		t.Errorf("POST /notify without the secret: %d %q %v, want 401", code, body, err)
	}
	code, body, err = request("POST", lp.url+"/notify", lp.secret, event)
	if err != nil || code != http.StatusOK || !strings.Contains(body, `"queued"`) {
		t.Errorf("POST /notify with the secret: %d %q %v, want the event queued\n%s", code, body, err, p.output())
	}
}

// TestRunSingle runs the Deployment of kubernetes/single as the kubelet
// would, its volumes as directories: serve with its queue embedded on the
// state volume, the webhook secret from the Secret's file.
func TestRunSingle(t *testing.T) {
	bin := buildMirror(t)
	objs := loadDir(t, "kubernetes/single")
	pt := podTemplates(objs)["ocierofs-mirror"]
	if pt == nil {
		t.Fatal("no ocierofs-mirror workload")
	}
	lp := runnable(t, objs, pt, nil)
	p := start(t, lp.env, bin, lp.args...)
	checkServing(t, p, lp, true)
}

// natsServer builds the NATS server of ocierofs's go.mod.
func natsServer(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "nats-server")
	cmd := exec.Command("go", "build", "-o", bin, "github.com/nats-io/nats-server/v2")
	cmd.Dir = ".."
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build nats-server: %v\n%s", err, out)
	}
	return bin
}

const natsNodeConf = `server_name: n%d
listen: 127.0.0.1:%d
http: 127.0.0.1:%d
jetstream { store_dir: %q }
authorization { user: %q, password: %q }
cluster {
  name: ocierofs-deploy-test
  listen: 127.0.0.1:%d
  routes: [%s]
}
`

// TestRunNATS runs kubernetes/nats: a frontend and a worker on a NATS
// cluster of three nodes (the ConfigMap asks for three replicas), reached
// with the user and password of the Secret's URL.
func TestRunNATS(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a NATS cluster of three nodes")
	}
	bin := buildMirror(t)
	objs := loadDir(t, "kubernetes/nats")
	natsURL := secretData(objs, "ocierofs-mirror")["nats-url"]
	urls := strings.Split(natsURL, ",")
	if len(urls) != 3 {
		t.Fatalf("nats-url %q: want the three nodes", natsURL)
	}
	user, pass, err := userPassword(urls[0])
	if err != nil {
		t.Fatal(err)
	}
	ns := natsServer(t)
	var client, clusterPorts, monitor []int
	for range 3 {
		client = append(client, freePort(t))
		clusterPorts = append(clusterPorts, freePort(t))
		monitor = append(monitor, freePort(t))
	}
	var routes []string
	for _, p := range clusterPorts {
		routes = append(routes, fmt.Sprintf("nats-route://127.0.0.1:%d", p))
	}
	var local []string
	for i := range 3 {
		// The Secret's URL, pointed at this node.
		u := urls[i]
		at := strings.LastIndex(u, "@")
		local = append(local, fmt.Sprintf("%s@127.0.0.1:%d", u[:at], client[i]))
	}
	startNode := func(i int) *process {
		dir := t.TempDir()
		conf := filepath.Join(dir, "nats.conf")
		os.WriteFile(conf, fmt.Appendf(nil, natsNodeConf, i, client[i], monitor[i], filepath.Join(dir, "js"), user, pass, clusterPorts[i], strings.Join(routes, ", ")), 0o600)
		return start(t, os.Environ(), ns, "-c", conf)
	}
	pods := podTemplates(objs)
	front := runnable(t, objs, pods["ocierofs-mirror-frontend"], map[string]string{"nats-url": strings.Join(local, ",")})
	work := runnable(t, objs, pods["ocierofs-mirror-worker"], map[string]string{"nats-url": strings.Join(local, ",")})
	// The frontend starts when one node of three is up, as pods of a
	// StatefulSet may: with no JetStream leader yet it must wait, not exit.
	nodes := []*process{startNode(0)}
	pf := start(t, front.env, bin, front.args...)
	time.Sleep(7 * time.Second) // beyond a JetStream request's timeout
	nodes = append(nodes, startNode(1), startNode(2))
	for i, n := range nodes {
		waitOK(t, n, fmt.Sprintf("http://127.0.0.1:%d/healthz", monitor[i]))
	}
	checkServing(t, pf, front, true)
	pw := start(t, work.env, bin, work.args...)
	checkServing(t, pw, work, false)
	if code, _, err := request("POST", work.url+"/notify", work.secret, `{"events":[]}`); err != nil || code == http.StatusOK {
		t.Errorf("a worker took a notification: %d %v", code, err)
	}
}

// userPassword is the user and password of a nats://USER:PASSWORD@HOST URL.
func userPassword(u string) (string, string, error) {
	rest, ok := strings.CutPrefix(u, "nats://")
	at := strings.LastIndex(rest, "@")
	if !ok || at < 0 {
		return "", "", fmt.Errorf("%q: want nats://USER:PASSWORD@HOST:PORT", u)
	}
	user, pass, ok := strings.Cut(rest[:at], ":")
	if !ok {
		return "", "", errors.New("the NATS URL has a user without a password")
	}
	return user, pass, nil
}
