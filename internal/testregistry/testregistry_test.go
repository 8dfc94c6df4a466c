package testregistry

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"
)

// blobServer serves size bytes at every path, with a Content-Length.
func blobServer(t *testing.T, size int) (host string, blob []byte) {
	blob = bytes.Repeat([]byte("0123456789abcdef"), size/16)
	return Serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.ServeContent(w, r, "blob", time.Time{}, bytes.NewReader(blob))
	})), blob
}

// proxied serves upstream through Proxy with body wrapping every response
// body.
func proxied(t *testing.T, upstream string, body func(*http.Response) io.ReadCloser) string {
	rp := Proxy(t, upstream)
	rp.ModifyResponse = func(resp *http.Response) error {
		resp.Body = body(resp)
		return nil
	}
	return Serve(t, rp)
}

// A dropped download delivers what came before the drop, then breaks.
func TestDropAfter(t *testing.T) {
	t.Parallel()
	up, blob := blobServer(t, 256<<10)
	host := proxied(t, up, func(resp *http.Response) io.ReadCloser { return DropAfter(resp.Body, resp.ContentLength/2) })
	resp, err := http.Get("http://" + host + "/b")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	got, err := io.ReadAll(resp.Body)
	if err == nil {
		t.Fatalf("read %d of %d bytes without an error", len(got), len(blob))
	}
	if len(got) != len(blob)/2 || !bytes.Equal(got, blob[:len(got)]) {
		t.Errorf("got %d bytes before the drop (%v), want the first %d", len(got), err, len(blob)/2)
	}
}

// A stalled download sends half and then nothing, until the client goes.
func TestStallAfter(t *testing.T) {
	t.Parallel()
	up, blob := blobServer(t, 256<<10)
	host := proxied(t, up, func(resp *http.Response) io.ReadCloser {
		return StallAfter(resp.Request.Context(), resp.Body, resp.ContentLength/2)
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	rq, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+host+"/b", nil)
	resp, err := http.DefaultClient.Do(rq)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	half := make([]byte, len(blob)/2)
	if _, err := io.ReadFull(resp.Body, half); err != nil || !bytes.Equal(half, blob[:len(half)]) {
		t.Fatalf("first half: %v", err)
	}
	more := make(chan error, 1)
	go func() {
		_, err := resp.Body.Read(make([]byte, 1))
		more <- err
	}()
	select {
	case err := <-more:
		t.Fatalf("a read past the stall returned (%v) before the client gave up", err)
	case <-time.After(200 * time.Millisecond):
	}
	cancel()
	if err := <-more; !errors.Is(err, context.Canceled) {
		t.Errorf("read after giving up: %v, want context.Canceled", err)
	}
}

// A throttled download delivers everything, counted, at about the rate.
func TestThrottle(t *testing.T) {
	t.Parallel()
	up, blob := blobServer(t, 40<<10)
	var sent atomic.Int64
	const rate = 200 << 10
	host := proxied(t, up, func(resp *http.Response) io.ReadCloser { return Throttle(resp.Body, rate, &sent) })
	start := time.Now()
	resp, err := http.Get("http://" + host + "/b")
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || !bytes.Equal(got, blob) {
		t.Fatalf("read %d of %d bytes: %v", len(got), len(blob), err)
	}
	if n := sent.Load(); n != int64(len(blob)) {
		t.Errorf("sent counts %d bytes, want %d", n, len(blob))
	}
	// 40 KiB at 200 KiB/s: four chunks of 10 KiB, 50 ms each.
	if d := time.Since(start); d < 150*time.Millisecond {
		t.Errorf("%d bytes at %d bytes/s came in %s", len(blob), rate, d)
	}
}

// A registry with htpasswd wants the password; the shared one answers
// without, and stays the same until StopShared.
func TestRegistry(t *testing.T) {
	hash, err := bcrypt.GenerateFromPassword([]byte("pw"), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	htpasswd := filepath.Join(t.TempDir(), "htpasswd")
	if err := os.WriteFile(htpasswd, []byte("u:"+string(hash)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r := New(t, Config{Htpasswd: htpasswd})
	status := func(host, user string) int {
		rq, _ := http.NewRequest(http.MethodGet, "http://"+host+"/v2/", nil)
		if user != "" {
			rq.SetBasicAuth(user, "pw")
		}
		resp, err := http.DefaultClient.Do(rq)
		if err != nil {
			t.Fatalf("%s: %v\n%s", host, err, r.Logs())
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if c := status(r.Host, ""); c != http.StatusUnauthorized {
		t.Errorf("without a password: %d, want 401", c)
	}
	if c := status(r.Host, "u"); c != http.StatusOK {
		t.Errorf("with the password: %d, want 200", c)
	}
	s := Shared(t)
	if c := status(s.Host, ""); c != http.StatusOK {
		t.Errorf("shared registry: %d, want 200", c)
	}
	if Shared(t) != s {
		t.Error("a second Shared started another registry")
	}
	StopShared()
	if _, err := http.Get("http://" + s.Host + "/v2/"); err == nil {
		t.Error("the shared registry still answers after StopShared")
	}
}
