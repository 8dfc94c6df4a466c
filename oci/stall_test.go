package oci

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
)

const stallBlob = "/v2/library/x/blobs/sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

// stallServer answers every request by h; a handler stalls as a registry
// that stopped sending would, by waiting on the channel given, which is
// closed when the test ends (a server that has not read the whole request
// does not notice that the client went away).
func stallServer(t *testing.T, h func(w http.ResponseWriter, r *http.Request, stall <-chan struct{})) *httptest.Server {
	t.Helper()
	stall := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { h(w, r, stall) }))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(stall) })
	return srv
}

func stallClient(d time.Duration) *http.Client {
	return &http.Client{Transport: Remote{StallTimeout: d}.transport()}
}

// wantStall checks that err is the StallError of a request to path on srv,
// that it came within twice the bound, and that it names the blob and the
// registry.
func wantStall(t *testing.T, err error, srv *httptest.Server, start time.Time, d time.Duration, names ...string) {
	t.Helper()
	took := time.Since(start)
	var se *StallError
	if !errors.As(err, &se) {
		t.Fatalf("err = %v (%T), want a StallError", err, err)
	}
	if !Transient(err) {
		t.Errorf("a stall is not transient: no retry would take it")
	}
	if took < d || took > 2*d {
		t.Errorf("failed after %s, want between %s and %s", took, d, 2*d)
	}
	for _, n := range append(names, strings.TrimPrefix(srv.URL, "http://")) {
		if !strings.Contains(err.Error(), n) {
			t.Errorf("error %q does not name %s", err, n)
		}
	}
}

func TestStallDownload(t *testing.T) {
	const d = 300 * time.Millisecond
	srv := stallServer(t, func(w http.ResponseWriter, r *http.Request, stall <-chan struct{}) {
		w.Header().Set("Content-Length", "2048")
		w.Write(make([]byte, 1024)) // half the blob, then nothing
		w.(http.Flusher).Flush()
		<-stall
	})
	resp, err := stallClient(d).Get(srv.URL + stallBlob)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	start := time.Now()
	n, err := io.Copy(io.Discard, resp.Body)
	if n != 1024 {
		t.Errorf("read %d bytes before the stall, want 1024", n)
	}
	wantStall(t, err, srv, start, d, "blob sha256:0123456789abcdef", "library/x")
}

func TestStallNoAnswer(t *testing.T) {
	const d = 300 * time.Millisecond
	srv := stallServer(t, func(w http.ResponseWriter, r *http.Request, stall <-chan struct{}) { <-stall })
	start := time.Now()
	_, err := stallClient(d).Get(srv.URL + "/v2/library/x/manifests/latest")
	wantStall(t, err, srv, start, d, "manifest latest of library/x")
}

func TestStallUpload(t *testing.T) {
	const d = 300 * time.Millisecond
	// The registry reads the first bytes of the upload and no more; the
	// client's writes then block once the socket buffers are full.
	srv := stallServer(t, func(w http.ResponseWriter, r *http.Request, stall <-chan struct{}) {
		io.CopyN(io.Discard, r.Body, 4096)
		<-stall
	})
	req, err := http.NewRequest(http.MethodPatch, srv.URL+"/v2/library/x/blobs/uploads/abc", io.LimitReader(zeros{}, 1<<30))
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	resp, err := stallClient(d).Do(req)
	if err == nil {
		resp.Body.Close()
	}
	wantStall(t, err, srv, start, d, "upload (PATCH) to library/x")
}

// A transfer that is slow but never stops for the bound is not cut.
func TestStallSlowButMoving(t *testing.T) {
	const d = 300 * time.Millisecond
	srv := stallServer(t, func(w http.ResponseWriter, r *http.Request, stall <-chan struct{}) {
		w.Header().Set("Content-Length", "8")
		for range 8 {
			w.Write([]byte{1})
			w.(http.Flusher).Flush()
			time.Sleep(d / 3)
		}
	})
	resp, err := stallClient(d).Get(srv.URL + stallBlob)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || !bytes.Equal(b, bytes.Repeat([]byte{1}, 8)) {
		t.Fatalf("read %v, %v; want the 8 bytes sent over about %s", b, err, 8*d/3)
	}
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) { clear(p); return len(p), nil }

// A reader that pauses between reads longer than the bound is not cut: a
// layer below is read only as far as the layer above needs it.
func TestStallReaderPauses(t *testing.T) {
	const d = 200 * time.Millisecond
	srv := stallServer(t, func(w http.ResponseWriter, r *http.Request, stall <-chan struct{}) {
		w.Header().Set("Content-Length", "4")
		w.Write([]byte{1, 2, 3, 4})
	})
	resp, err := stallClient(d).Get(srv.URL + stallBlob)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var got []byte
	for {
		time.Sleep(2 * d)
		var b [1]byte
		n, err := resp.Body.Read(b[:])
		got = append(got, b[:n]...)
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("after %d bytes: %v", len(got), err)
		}
	}
	if !bytes.Equal(got, []byte{1, 2, 3, 4}) {
		t.Errorf("read %v", got)
	}
}

func TestTransient(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"nil", nil, false},
		{"a stall", &StallError{Method: "GET", URL: "http://h/v2/r/blobs/sha256:00", Idle: time.Second}, true},
		{"cut stream", fmt.Errorf("tar: %w", io.ErrUnexpectedEOF), true},
		{"refused", &net.OpError{Op: "dial", Err: syscall.ECONNREFUSED}, true},
		{"429", &transport.Error{StatusCode: http.StatusTooManyRequests}, true},
		{"503", &transport.Error{StatusCode: http.StatusServiceUnavailable}, true},
		{"404", &transport.Error{StatusCode: http.StatusNotFound}, false},
		{"401", &transport.Error{StatusCode: http.StatusUnauthorized}, false},
		{"bad content", errors.New("digest does not match"), false},
	} {
		if got := Transient(tc.err); got != tc.want {
			t.Errorf("%s: Transient = %v, want %v", tc.name, got, tc.want)
		}
	}
}
