package lazy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"syscall"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/ocierofs/ocierofs/oci"
)

// Source reads byte ranges of blobs.
type Source interface {
	// Open returns the bytes [off, off+n) of blob dg; with n < 0, from off
	// to the end. The stream may end early with an error.
	Open(ctx context.Context, dg v1.Hash, off, n int64) (io.ReadCloser, error)
	// String names the source in messages: the repository or the layout.
	String() string
}

// Registry is the source of the blobs of repo, read with client (from
// oci.Remote.BlobClient: logged in, with the stall watchdog).
func Registry(client *http.Client, repo name.Repository) Source {
	return registrySource{client, repo}
}

type registrySource struct {
	client *http.Client
	repo   name.Repository
}

func (s registrySource) String() string { return s.repo.String() }

func (s registrySource) Open(ctx context.Context, dg v1.Hash, off, n int64) (io.ReadCloser, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, oci.BlobURL(s.repo, dg), nil)
	if err != nil {
		return nil, err
	}
	ranged := off > 0 || n >= 0
	if ranged {
		end := ""
		if n >= 0 {
			end = strconv.FormatInt(off+n-1, 10)
		}
		req.Header.Set("Range", fmt.Sprintf("bytes=%d-%s", off, end))
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return nil, err
	}
	switch {
	case resp.StatusCode == http.StatusPartialContent && ranged:
	case resp.StatusCode == http.StatusOK:
		// A registry that ignores Range sends the whole blob: skip to off.
		if _, err := io.CopyN(io.Discard, resp.Body, off); err != nil {
			resp.Body.Close()
			return nil, fmt.Errorf("blob %s of %s: %w", dg, s.repo, err)
		}
	default:
		resp.Body.Close()
		return nil, &StatusError{Blob: dg, Source: s.repo.String(), Status: resp.StatusCode}
	}
	if n < 0 {
		return resp.Body, nil
	}
	return readCloser{io.LimitReader(resp.Body, n), resp.Body}, nil
}

// StatusError is a registry's answer other than the bytes asked for.
type StatusError struct {
	Blob   v1.Hash
	Source string
	Status int
}

func (e *StatusError) Error() string {
	return fmt.Sprintf("blob %s of %s: registry answered %d %s", e.Blob, e.Source, e.Status, http.StatusText(e.Status))
}

// transient reports errors that a retry may cure: a registry's 408, 429
// and 5xx, broken connections, stalls and short streams.
func transient(err error) bool {
	var se *StatusError
	var ne net.Error
	switch {
	case errors.As(err, &se):
		return se.Status == http.StatusRequestTimeout || se.Status == http.StatusTooManyRequests || se.Status >= 500
	case errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, syscall.ECONNRESET),
		errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.EPIPE):
		return true
	case errors.As(err, &ne):
		return true
	}
	return oci.Transient(err)
}

type readCloser struct {
	io.Reader
	io.Closer
}

// Layout is the source of the blobs of the OCI layout in dir.
func Layout(dir string) Source { return layoutSource(dir) }

type layoutSource string

func (s layoutSource) String() string { return "oci:" + string(s) }

// Path is the file of blob dg in the layout.
func (s layoutSource) Path(dg v1.Hash) string {
	return filepath.Join(string(s), "blobs", dg.Algorithm, dg.Hex)
}

func (s layoutSource) Open(_ context.Context, dg v1.Hash, off, n int64) (io.ReadCloser, error) {
	f, err := os.Open(s.Path(dg))
	if err != nil {
		return nil, err
	}
	if n < 0 {
		n = 1<<63 - 1 - off
	}
	return readCloser{io.NewSectionReader(f, off, n), f}, nil
}

// FilePath is the local file of blob dg where src is a layout, which is
// read in place, without a cache.
func FilePath(src Source, dg v1.Hash) (string, bool) {
	if l, ok := src.(layoutSource); ok {
		return l.Path(dg), true
	}
	return "", false
}
