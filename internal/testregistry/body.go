package testregistry

import (
	"context"
	"errors"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// DropAfter is a response body that ends with an error after n bytes of
// rc. Under an httputil.ReverseProxy the error aborts the response, which
// closes the client's connection in the middle of the body.
func DropAfter(rc io.ReadCloser, n int64) io.ReadCloser {
	return &faultyBody{rc: rc, left: n}
}

// StallAfter is a response body that sends n bytes of rc and then nothing
// more until ctx is done (the request's context: the client went away).
func StallAfter(ctx context.Context, rc io.ReadCloser, n int64) io.ReadCloser {
	return &faultyBody{rc: rc, left: n, stall: ctx}
}

type faultyBody struct {
	rc    io.ReadCloser
	left  int64
	stall context.Context // nil: drop
}

func (f *faultyBody) Read(p []byte) (int, error) {
	if f.left <= 0 && f.stall != nil {
		<-f.stall.Done()
		return 0, errors.New("test proxy: the client gave up on a stalled download")
	}
	if f.left <= 0 {
		return 0, errors.New("test proxy: connection dropped")
	}
	if int64(len(p)) > f.left {
		p = p[:f.left]
	}
	n, err := f.rc.Read(p)
	f.left -= int64(n)
	return n, err
}

func (f *faultyBody) Close() error { return f.rc.Close() }

// Throttle is a response body that sends rc at about rate bytes a second
// (a twentieth of it every 50 ms), adding what it sent to sent.
func Throttle(rc io.ReadCloser, rate int, sent *atomic.Int64) io.ReadCloser {
	return &slowBody{rc: rc, rate: rate, sent: sent}
}

type slowBody struct {
	rc   io.ReadCloser
	rate int
	sent *atomic.Int64
}

func (s *slowBody) Read(p []byte) (int, error) {
	if chunk := s.rate / 20; len(p) > chunk {
		p = p[:chunk]
	}
	n, err := s.rc.Read(p)
	s.sent.Add(int64(n))
	time.Sleep(50 * time.Millisecond)
	return n, err
}

func (s *slowBody) Close() error { return s.rc.Close() }

// Proxy is a reverse proxy to the registry at upstream (HOST:PORT, plain
// HTTP) that writes through at once, so that a body that breaks has
// delivered the headers and what came before, and logs nothing.
func Proxy(t testing.TB, upstream string) *httputil.ReverseProxy {
	t.Helper()
	u, err := url.Parse("http://" + upstream)
	if err != nil {
		t.Fatal(err)
	}
	rp := httputil.NewSingleHostReverseProxy(u)
	rp.FlushInterval = -1
	rp.ErrorLog = log.New(io.Discard, "", 0)
	return rp
}

// Serve serves h on 127.0.0.1 until the test ends and returns its
// HOST:PORT.
func Serve(t testing.TB, h http.Handler) string {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}
