// Package testregistry is the registry harness of the tests: it runs the
// real registry the end-to-end tests push to and pull from (Debian's
// docker-registry) on a loopback address, and holds the faulty response
// bodies their proxies put in front of it (a download that drops, stalls or
// trickles). Only tests import it.
//
//	reg := testregistry.New(t, testregistry.Config{})
//	ref := reg.Host + "/app:1"
//
// Under go test -short no registry starts: Binary skips the test, so the
// fast tier needs no docker-registry; make test runs these tests.
package testregistry

import (
	"bytes"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// Registry is one docker-registry process on a loopback address.
type Registry struct {
	Host string // IP:PORT
	TLS  bool   // serves HTTPS

	cmd  *exec.Cmd
	logs *Buffer
	done chan struct{} // closed when the process has exited
}

// Config is what a registry has beyond a plain one on 127.0.0.1.
type Config struct {
	// Htpasswd, if set, is the path of a bcrypt htpasswd file that every
	// request must authenticate against.
	Htpasswd string
	// Cert and Key, if set, are PEM files: the registry serves HTTPS, on
	// TLSIP.
	Cert, Key string
	// Extra is appended to the configuration file (notifications, say).
	Extra string
}

// TLSIP is the address of HTTPS registries: go-containerregistry falls
// back to plain HTTP for 127.0.0.1 (and private networks); on 127.0.0.2 it
// talks HTTPS only, as to any registry on the internet.
const TLSIP = "127.0.0.2"

// ShortReason is why a test that needs a registry skips under -short.
const ShortReason = "-short: no docker-registry; make test runs it"

// Binary finds docker-registry, or says why the test cannot run: it skips
// under -short, and a missing binary fails the test in CI (CI set) and
// skips it elsewhere.
func Binary(t testing.TB) string {
	t.Helper()
	if testing.Short() {
		t.Skip(ShortReason)
	}
	for _, p := range []string{"docker-registry", "/usr/bin/docker-registry"} {
		if bin, err := exec.LookPath(p); err == nil {
			return bin
		}
	}
	const why = "no docker-registry binary (Debian package docker-registry: apt-get install -y docker-registry)"
	if os.Getenv("CI") != "" {
		t.Fatal(why)
	}
	t.Skip(why)
	return ""
}

// FreePort asks the kernel for a free TCP port on 127.0.0.1.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

const configFile = `version: 0.1
log:
  level: error
  accesslog:
    disabled: true
storage:
  filesystem:
    rootdirectory: %s
  delete:
    enabled: true
  maintenance:
    uploadpurging:
      enabled: false
http:
  addr: %s:%d
  secret: ocierofs-test
%s%s%s`

// Start starts docker-registry (bin) with its storage and configuration
// under dir, and waits until it answers. A port taken between the probe
// and the start is retried on another.
func Start(bin, dir string, c Config) (*Registry, error) {
	auth, tlsConf := "", ""
	if c.Htpasswd != "" {
		auth = fmt.Sprintf("auth:\n  htpasswd:\n    realm: ocierofs-test\n    path: %s\n", c.Htpasswd)
	}
	ip := "127.0.0.1"
	if c.Cert != "" {
		tlsConf = fmt.Sprintf("  tls:\n    certificate: %s\n    key: %s\n", c.Cert, c.Key)
		ip = TLSIP
	}
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ {
		port, err := FreePort()
		if err != nil {
			return nil, err
		}
		cfg := filepath.Join(dir, "config.yml")
		storage := filepath.Join(dir, "storage")
		if err := os.MkdirAll(storage, 0o755); err != nil {
			return nil, err
		}
		if err := os.WriteFile(cfg, fmt.Appendf(nil, configFile, storage, ip, port, tlsConf, auth, c.Extra), 0o644); err != nil {
			return nil, err
		}
		r := &Registry{Host: fmt.Sprintf("%s:%d", ip, port), TLS: c.Cert != "", logs: &Buffer{}, done: make(chan struct{})}
		r.cmd = exec.Command(bin, "serve", cfg)
		r.cmd.Stdout, r.cmd.Stderr = r.logs, r.logs
		// The registry must not outlive a test binary that dies.
		r.cmd.SysProcAttr = dieWithParent()
		if err := r.cmd.Start(); err != nil {
			return nil, fmt.Errorf("start %s: %w", bin, err)
		}
		go func() { r.cmd.Wait(); close(r.done) }()
		if err := r.waitReady(15 * time.Second); err != nil {
			r.Stop()
			lastErr = err
			continue // most likely the port was taken in between: try another
		}
		return r, nil
	}
	return nil, lastErr
}

// New starts a registry of the test's own, in a directory of the test,
// and stops it when the test ends. It skips as Binary does, and fails the
// test if the registry does not start.
func New(t testing.TB, c Config) *Registry {
	t.Helper()
	bin := Binary(t)
	r, err := Start(bin, t.TempDir(), c)
	if err != nil {
		t.Fatalf("registry: %v", err)
	}
	t.Cleanup(r.Stop)
	return r
}

// waitReady polls /v2/ until the registry answers (200, or 401 with auth).
func (r *Registry) waitReady(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	c := &http.Client{Timeout: time.Second}
	scheme := "http"
	if r.TLS {
		scheme = "https"
		c.Transport = &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}} //nolint:gosec // only asks whether it is up
	}
	for time.Now().Before(deadline) {
		select {
		case <-r.done:
			return fmt.Errorf("docker-registry exited: %s", r.logs.String())
		default:
		}
		resp, err := c.Get(scheme + "://" + r.Host + "/v2/")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK || resp.StatusCode == http.StatusUnauthorized {
				return nil
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("docker-registry on %s did not answer /v2/ in %s: %s", r.Host, timeout, r.logs.String())
}

// Stop kills the registry and waits for it to exit.
func (r *Registry) Stop() {
	if r.cmd.Process != nil {
		r.cmd.Process.Kill()
	}
	<-r.done
}

// PID is the registry's process id, for whoever measures the CPU time the
// registry spends (the convert benchmark, TestConvertFigures).
func (r *Registry) PID() int { return r.cmd.Process.Pid }

// Logs is what the registry wrote (its first MiB), for error messages.
func (r *Registry) Logs() string { return r.logs.String() }

// shared is the registry of a test binary, started by the first test that
// asks for it and stopped by StopShared.
var shared struct {
	mu  sync.Mutex
	reg *Registry
	dir string
	err error
}

// Shared returns the registry of this test binary (no auth), started by
// the first call. It lives until StopShared, which the binary's TestMain
// calls after the tests; tests that share it use repositories of their own.
func Shared(t testing.TB) *Registry {
	t.Helper()
	bin := Binary(t)
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if shared.reg == nil && shared.err == nil {
		shared.dir, shared.err = os.MkdirTemp("", "ocierofs-registry-")
		if shared.err == nil {
			shared.reg, shared.err = Start(bin, shared.dir, Config{})
		}
	}
	if shared.err != nil {
		t.Fatalf("registry: %v", shared.err)
	}
	return shared.reg
}

// StopShared stops the registry Shared started, if any, and removes its
// storage.
func StopShared() {
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if shared.reg != nil {
		shared.reg.Stop()
		os.RemoveAll(shared.dir)
		shared.reg = nil
	}
	shared.err = errors.New("the shared registry was stopped")
}

// Buffer collects a process's output, safe for concurrent writes; it
// keeps the first MiB and drops the rest.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *Buffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.b.Len() > 1<<20 {
		return len(p), nil
	}
	return s.b.Write(p)
}

func (s *Buffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
