package mirror

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/ocierofs/ocierofs/convert"
	"github.com/ocierofs/ocierofs/erofs"
)

func TestRules(t *testing.T) {
	r := Rules{Include: []string{"library/*", "apps/**:v*", "exact:1.0"}, Exclude: []string{"library/secret", "**:*-rc?"}}
	for _, c := range []struct {
		repo, tag string
		want      bool
	}{
		{"library/alpine", "3.20", true},
		{"library/alpine", "3.20-rc1", false}, // excluded by tag
		{"library/secret", "1", false},
		{"library/a/b", "1", false}, // * stays within one path element
		{"apps/team/web", "v2", true},
		{"apps/team/web", "latest", false},
		{"apps", "v1", false}, // apps/** needs a slash after apps
		{"exact", "1.0", true},
		{"exact", "1.01", false},
		{"other", "v1", false},
	} {
		if got := r.Match(c.repo, c.tag); got != c.want {
			t.Errorf("Match(%s:%s) = %v, want %v", c.repo, c.tag, got, c.want)
		}
	}
	if !(Rules{}).Match("any/thing", "x") {
		t.Error("no rules must select everything")
	}
	if (Rules{Exclude: []string{"**"}}).Match("a", "b") {
		t.Error("exclude ** must select nothing")
	}
}

func TestGlob(t *testing.T) {
	for _, c := range []struct {
		p, s string
		want bool
	}{
		{"a?c", "abc", true}, {"a?c", "a/c", false}, {"*", "", true}, {"**", "a/b/c", true},
		{"a/**/z", "a/b/c/z", true}, {"a/**/z", "a/z", false}, {"a**z", "az", true}, {"*.*", "x.y", true},
		{"a*", "b", false}, {"", "", true}, {"", "a", false},
	} {
		if got := glob(c.p, c.s); got != c.want {
			t.Errorf("glob(%q, %q) = %v, want %v", c.p, c.s, got, c.want)
		}
	}
}

func TestParseNotification(t *testing.T) {
	dist := `{"events":[
	 {"id":"1","action":"push","target":{"mediaType":"application/vnd.docker.distribution.manifest.v2+json","digest":"sha256:aa","repository":"lib/app","url":"http://reg.example:5000/v2/lib/app/manifests/sha256:aa","tag":"1.0"},"request":{"host":"internal:5000","useragent":"docker/27"}},
	 {"id":"2","action":"push","target":{"mediaType":"application/octet-stream","digest":"sha256:bb","repository":"lib/app"}},
	 {"id":"3","action":"pull","target":{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"sha256:cc","repository":"lib/app","tag":"1.0"}},
	 {"id":"4","action":"push","target":{"mediaType":"application/vnd.oci.image.index.v1+json","digest":"sha256:dd","repository":"lib/multi"},"request":{"host":"h"}},
	 {"id":"5","action":"delete","target":{"digest":"sha256:ee","repository":"lib/app"},"request":{"useragent":"curl/8"}},
	 {"id":"6","action":"delete","target":{"repository":"lib/app","tag":"old"}},
	 {"id":"7","action":"delete","target":{"digest":"sha256:ff"}}]}`
	kind, evs, err := ParseNotification([]byte(dist))
	if err != nil || kind != KindDistribution {
		t.Fatalf("distribution envelope: %q, %v", kind, err)
	}
	want := []Event{
		{Action: "push", Repository: "lib/app", Tag: "1.0", Digest: "sha256:aa", MediaType: "application/vnd.docker.distribution.manifest.v2+json", Host: "reg.example:5000", UserAgent: "docker/27"},
		{Action: "push", Repository: "lib/multi", Digest: "sha256:dd", MediaType: "application/vnd.oci.image.index.v1+json", Host: "h"},
		{Action: "delete", Repository: "lib/app", Digest: "sha256:ee", UserAgent: "curl/8"},
		{Action: "delete", Repository: "lib/app", Tag: "old"},
	}
	if len(evs) != len(want) {
		t.Fatalf("events %+v, want %+v", evs, want)
	}
	for i := range want {
		if evs[i] != want[i] {
			t.Errorf("event %d: %+v, want %+v", i, evs[i], want[i])
		}
	}
	harbor := `{"type":"PUSH_ARTIFACT","occur_at":1700000000,"operator":"robot","event_data":{"resources":[{"digest":"sha256:ee","tag":"v1","resource_url":"harbor.example.com/library/app:v1"}],"repository":{"date_created":1,"name":"app","namespace":"library","repo_full_name":"library/app","repo_type":"public"}}}`
	kind, evs, err = ParseNotification([]byte(harbor))
	if err != nil || kind != KindHarbor || len(evs) != 1 {
		t.Fatalf("harbor: %q %+v %v", kind, evs, err)
	}
	if e := evs[0]; e.Action != "push" || e.Repository != "library/app" || e.Tag != "v1" || e.Digest != "sha256:ee" || e.Host != "harbor.example.com" {
		t.Errorf("harbor event %+v", e)
	}
	// Without repo_full_name the resource URL names the repository.
	harbor2 := `{"type":"PUSH_ARTIFACT","event_data":{"resources":[{"digest":"sha256:ff","tag":"2","resource_url":"h:443/ns/deep/app:2"}],"repository":{}}}`
	if _, evs, err = ParseNotification([]byte(harbor2)); err != nil || len(evs) != 1 || evs[0].Repository != "ns/deep/app" {
		t.Errorf("harbor without repository: %+v %v", evs, err)
	}
	ce := `{"specversion":"1.0","id":"x","source":"/projects/2/webhook/policies/15","type":"harbor.artifact.pushed","datacontenttype":"application/json","time":"2026-04-03T06:04:46Z",
	 "data":{"resources":[{"digest":"sha256:ab","tag":"stable","resource_url":"h/team/app:stable"},{"digest":"sha256:cd","tag":"sha256:cd","resource_url":"h/team/app@sha256:cd"}],
	 "repository":{"name":"app","namespace":"team","repo_full_name":"team/app","repo_type":"private"}},"operator":"robot"}`
	kind, evs, err = ParseNotification([]byte(ce))
	if err != nil || kind != KindHarbor || len(evs) != 2 || evs[0].Repository != "team/app" || evs[0].Tag != "stable" || evs[1].Tag != "" || evs[1].Digest != "sha256:cd" {
		t.Errorf("Harbor CloudEvent: %q %+v %v", kind, evs, err)
	}
	if _, _, err := ParseNotification([]byte(`{"specversion":"1.0","type":"com.example.other","data":{}}`)); err == nil {
		t.Error("a CloudEvent not from Harbor: no error")
	}
	if _, evs, err = ParseNotification([]byte(`{"type":"DELETE_ARTIFACT","event_data":{"resources":[]}}`)); err != nil || len(evs) != 0 {
		t.Errorf("harbor delete of nothing: %+v %v", evs, err)
	}
	hdel := `{"type":"DELETE_ARTIFACT","event_data":{"resources":[{"digest":"sha256:ee","tag":"v1","resource_url":"h/library/app:v1"}],"repository":{"name":"app","namespace":"library","repo_full_name":"library/app"}}}`
	if _, evs, err = ParseNotification([]byte(hdel)); err != nil || len(evs) != 1 || evs[0].Action != "delete" || evs[0].Repository != "library/app" || evs[0].Digest != "sha256:ee" {
		t.Errorf("harbor delete: %+v %v", evs, err)
	}
	cdel := `{"specversion":"1.0","type":"harbor.artifact.deleted","data":{"resources":[{"digest":"sha256:ab","tag":"stable","resource_url":"h/team/app:stable"}],"repository":{"repo_full_name":"team/app"}}}`
	if _, evs, err = ParseNotification([]byte(cdel)); err != nil || len(evs) != 1 || evs[0].Action != "delete" || evs[0].Tag != "stable" {
		t.Errorf("Harbor CloudEvent delete: %+v %v", evs, err)
	}
	for _, bad := range []string{``, `[]`, `{"foo":1}`, `{"events":"x"}`, `{"type":"PUSH_ARTIFACT","event_data":{"resources":[{"tag":"x"}]}}`} {
		if _, _, err := ParseNotification([]byte(bad)); err == nil {
			t.Errorf("ParseNotification(%q): no error", bad)
		}
	}
}

func TestConfig(t *testing.T) {
	t.Setenv("MIRROR_TEST_SECRET", "from-env")
	text := `
# NATS syntax: comments, unquoted keys, $ENV variables
registry: "reg.example:5000"
plainHTTP: true
secret: $MIRROR_TEST_SECRET
rules {
  include: ["library/**", "apps/*:v*"]
  exclude: ["library/internal"]
}
nats { storeDir: "/var/lib/ocierofs/nats", listen: "0.0.0.0:4222" }
queue { ackWait: "30s", maxDeliver: 3, backoff: 5 }
tasks: 2
convert { compress: "lz4hc,level=9", "layer-compression": "zstd" }
`
	c, err := ParseConfig(text)
	if err != nil {
		t.Fatal(err)
	}
	c.SetDefaults()
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if c.Registry != "reg.example:5000" || !c.PlainHTTP || c.Secret != "from-env" || c.Suffix != "-erofs" || c.SecretHeader != "Authorization" {
		t.Errorf("config %+v", c)
	}
	if len(c.Rules.Include) != 2 || c.Rules.Exclude[0] != "library/internal" || *c.Tasks != 2 {
		t.Errorf("rules %+v tasks %d", c.Rules, *c.Tasks)
	}
	c0, err := ParseConfig("registry: r\ntasks: 0")
	if err != nil {
		t.Fatal(err)
	}
	if c0.SetDefaults(); *c0.Tasks != 0 {
		t.Errorf("tasks: 0 must stay 0 (a receive-only process), got %d", *c0.Tasks)
	}
	if c.Queue.AckWait != Duration(30*time.Second) || c.Queue.MaxDeliver != 3 || c.Queue.Backoff != Duration(5*time.Second) || c.Queue.Timeout != Duration(2*time.Hour) {
		t.Errorf("queue %+v", c.Queue)
	}
	if c.Convert["layer-compression"] != "zstd" || c.NATS.StoreDir != "/var/lib/ocierofs/nats" {
		t.Errorf("convert %v, nats %+v", c.Convert, c.NATS)
	}
	// JSON works; unknown keys and bad values are errors.
	p := filepath.Join(t.TempDir(), "m.json")
	if err := os.WriteFile(p, []byte(`{"registry": "r:1", "rules": {"include": ["a"]}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if c, err := LoadConfig(p); err != nil || c.Registry != "r:1" {
		t.Errorf("JSON config: %+v %v", c, err)
	}
	for _, bad := range []string{`registri: "x"`, `queue { ackWait: "soon" }`, `rules { include: "a" }`} {
		if _, err := ParseConfig(bad); err == nil {
			t.Errorf("ParseConfig(%q): no error", bad)
		}
	}
	// The user and password go to the mirrored registry only.
	if r := (&Config{Registry: "docker.io", Username: "u", Password: "p"}).Remote(); len(r.Credentials) != 1 || r.Credentials["index.docker.io"].Username != "u" {
		t.Errorf("credentials %v, want u for index.docker.io alone", r.Credentials)
	}
	if r := (&Config{Registry: "r:1"}).Remote(); r.Credentials != nil {
		t.Errorf("credentials %v without a user", r.Credentials)
	}
	for _, bad := range []*Config{{}, {Registry: "http://r"}, {Registry: "r", Suffix: "-x:y"}, {Registry: "r:x"}, {Registry: "r", Rules: Rules{Include: []string{"a:b:c"}}}} {
		bad.SetDefaults()
		if err := bad.Validate(); err == nil {
			t.Errorf("Validate(%+v): no error", bad)
		}
	}
}

func TestTaskID(t *testing.T) {
	a := TaskID("r", "t", "sha256:1")
	if a != TaskID("r", "t", "sha256:1") || a == TaskID("r", "t", "sha256:2") || a == TaskID("r", "t2", "sha256:1") || a == TaskID("r2", "t", "sha256:1") {
		t.Error("TaskID must be the same for the same digest and tag, and only then")
	}
	// No ambiguity from concatenation.
	if TaskID("a", "bc", "d") == TaskID("ab", "c", "d") {
		t.Error("TaskID(a, bc) == TaskID(ab, c)")
	}
}

func TestBackoff(t *testing.T) {
	w := &Worker{Queue: &Queue{cfg: &Config{Queue: QueueConfig{Backoff: Duration(time.Second)}}}}
	want := []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 10 * time.Second, 10 * time.Second}
	for i, d := range want {
		if got := w.backoff(i + 1); got != d {
			t.Errorf("backoff(%d) = %s, want %s", i+1, got, d)
		}
	}
}

func TestCacheKeys(t *testing.T) {
	h := func(s string) v1.Hash { return v1.Hash{Algorithm: "sha256", Hex: strings.Repeat(s, 64)} }
	opts := optionsKey(convert.ImageOptions{})
	a := chainKeys(opts, []v1.Hash{h("a"), h("b")})
	b := chainKeys(opts, []v1.Hash{h("a"), h("c")})
	c := chainKeys(opts, []v1.Hash{h("c"), h("b")})
	if a[0] != b[0] || a[0] != "l."+opts+"."+h("a").Hex {
		t.Errorf("a bottom layer's key is its diffID: %s, %s", a[0], b[0])
	}
	if a[1] == b[1] || a[1] == c[1] {
		t.Error("a layer on other lower layers must have another key")
	}
	// Options that change the bytes change the key; the temp dir does not.
	same := convert.ImageOptions{Jobs: 8, TempDir: "/elsewhere", Layer: convert.Options{Erofs: erofs.Options{Workers: 4}}}
	if optionsKey(same) != opts {
		t.Error("jobs, workers or the temp dir changed the options key")
	}
	for _, o := range []convert.ImageOptions{
		{LayerZstd: true}, {SpecMediaTypes: true},
		{Layer: convert.Options{Erofs: erofs.Options{BlockSize: 512}}},
		{Layer: convert.Options{Erofs: erofs.Options{Compression: &erofs.Compression{Level: 3}}}},
		{Layer: convert.Options{Erofs: erofs.Options{BuildTime: time.Unix(1, 0)}}},
	} {
		if optionsKey(o) == opts {
			t.Errorf("options %+v: same key as the defaults", o)
		}
	}
}

func TestSkeleton(t *testing.T) {
	var raw bytes.Buffer
	tw := tar.NewWriter(&raw)
	mt := time.Unix(1700000000, 123000000)
	add := func(h tar.Header, data string) {
		h.Size = int64(len(data))
		h.Format = tar.FormatPAX
		if err := tw.WriteHeader(&h); err != nil {
			t.Fatal(err)
		}
		tw.Write([]byte(data))
	}
	add(tar.Header{Typeflag: tar.TypeXGlobalHeader, Name: "pax_global_header", PAXRecords: map[string]string{"comment": "x"}}, "")
	add(tar.Header{Typeflag: tar.TypeDir, Name: "./", Mode: 0o755, ModTime: mt}, "")
	add(tar.Header{Typeflag: tar.TypeDir, Name: "etc/", Mode: 0o750, Uid: 7, Gid: 8, ModTime: mt,
		PAXRecords: map[string]string{"SCHILY.xattr.user.a": "1", "LIBARCHIVE.xattr.user.b": "Mg==", "comment": "dropped"}}, "")
	add(tar.Header{Typeflag: tar.TypeReg, Name: "etc/passwd", Mode: 0o644, ModTime: mt, PAXRecords: map[string]string{"SCHILY.xattr.user.f": "x"}}, "root:x:0:0\n")
	add(tar.Header{Typeflag: tar.TypeLink, Name: "etc/hard", Linkname: "etc/passwd", ModTime: mt}, "")
	add(tar.Header{Typeflag: tar.TypeSymlink, Name: "etc/sym", Linkname: "passwd", ModTime: mt}, "")
	add(tar.Header{Typeflag: tar.TypeChar, Name: "etc/null", Devmajor: 1, Devminor: 3, ModTime: mt}, "")
	add(tar.Header{Typeflag: tar.TypeReg, Name: "var/.wh.gone", ModTime: mt}, "")
	add(tar.Header{Typeflag: tar.TypeReg, Name: "opt/.wh..wh..opq", ModTime: mt}, "")
	tw.Close()
	gz, err := makeSkeleton(&rawLayer{b: raw.Bytes()})
	if err != nil {
		t.Fatal(err)
	}
	zr, err := gzip.NewReader(bytes.NewReader(gz))
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(zr)
	var got []string
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		var xs []string
		for k, v := range h.PAXRecords {
			if strings.Contains(k, "xattr") {
				xs = append(xs, k+"="+v)
			}
		}
		sort.Strings(xs)
		got = append(got, fmt.Sprintf("%c %s %o %d:%d %d %s %v", h.Typeflag, h.Name, h.Mode, h.Uid, h.Gid, h.Size, h.ModTime.UTC().Format(time.RFC3339Nano), xs))
	}
	want := []string{
		"5 ./ 755 0:0 0 2023-11-14T22:13:20.123Z []",
		"5 etc/ 750 7:8 0 2023-11-14T22:13:20.123Z [LIBARCHIVE.xattr.user.b=Mg== SCHILY.xattr.user.a=1]",
		"0 etc/passwd 644 0:0 0 2023-11-14T22:13:20.123Z []",
		"0 etc/hard 0 0:0 0 2023-11-14T22:13:20.123Z []",
		"0 etc/sym 0 0:0 0 2023-11-14T22:13:20.123Z []",
		"0 etc/null 0 0:0 0 2023-11-14T22:13:20.123Z []",
		"0 var/.wh.gone 0 0:0 0 2023-11-14T22:13:20.123Z []",
		"0 opt/.wh..wh..opq 0 0:0 0 2023-11-14T22:13:20.123Z []",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("skeleton:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	// Same layer, same bytes.
	gz2, _ := makeSkeleton(&rawLayer{b: raw.Bytes()})
	if !bytes.Equal(gz, gz2) {
		t.Error("two skeletons of one layer differ")
	}
}

// rawLayer is an uncompressed tar as a layer.
type rawLayer struct{ b []byte }

func (r *rawLayer) Digest() (v1.Hash, error) {
	h, _, err := v1.SHA256(bytes.NewReader(r.b))
	return h, err
}
func (r *rawLayer) DiffID() (v1.Hash, error)            { return r.Digest() }
func (r *rawLayer) Size() (int64, error)                { return int64(len(r.b)), nil }
func (r *rawLayer) MediaType() (types.MediaType, error) { return types.OCIUncompressedLayer, nil }
func (r *rawLayer) Compressed() (io.ReadCloser, error) {
	return io.NopCloser(bytes.NewReader(r.b)), nil
}
func (r *rawLayer) Uncompressed() (io.ReadCloser, error) {
	return io.NopCloser(bytes.NewReader(r.b)), nil
}

// TestValidEvent: an event that could only make a failing task is triaged
// "invalid" (no task): a repository or digest that does not parse, a tag
// whose twin tag would not be one.
func TestValidEvent(t *testing.T) {
	d := "sha256:" + strings.Repeat("ab", 32)
	for _, tc := range []struct {
		e    Event
		want bool
	}{
		{Event{Repository: "lib/app", Tag: "1.0", Digest: d}, true},
		{Event{Repository: "../../x", Tag: "v1", Digest: d}, false},
		{Event{Repository: "lib/App", Tag: "v1", Digest: d}, false},
		{Event{Repository: "lib/app", Tag: "v1", Digest: "nodigest"}, false},
		{Event{Repository: "lib/app", Tag: "v1", Digest: "sha256:aa"}, false},
		{Event{Repository: "lib/app", Tag: strings.Repeat("v", 122), Digest: d}, true},
		{Event{Repository: "lib/app", Tag: strings.Repeat("v", 123), Digest: d}, false},
		{Event{Repository: "lib/app", Tag: "bad tag", Digest: d}, false},
	} {
		if got := validEvent(tc.e, "-erofs"); got != tc.want {
			t.Errorf("validEvent(%+v) = %v, want %v", tc.e, got, tc.want)
		}
	}
}

// TestPruneWaitingBound: deletes in more repositories than maxPruneWaiting
// at once are left to sync --prune (prune reports false), so the server's
// memory does not grow with the names it is sent; a repository waiting
// already, or one after a pass made room, still counts.
func TestPruneWaitingBound(t *testing.T) {
	defer func(n int) { maxPruneWaiting = n }(maxPruneWaiting)
	maxPruneWaiting = 2
	var logged []string
	s := NewServer(&Config{}, nil, nil, func(f string, a ...any) { logged = append(logged, fmt.Sprintf(f, a...)) })
	s.pruners = maxPruners // both busy: nothing takes the waiting ones here
	for _, c := range []struct {
		repo string
		want bool
	}{{"a", true}, {"b", true}, {"c", false}, {"d", false}, {"a", true}, {"b", true}} {
		if got := s.prune(c.repo); got != c.want {
			t.Errorf("prune(%q) with %d waiting: %v, want %v", c.repo, len(s.waiting), got, c.want)
		}
	}
	if len(s.waiting) != 2 || len(s.prunes) != 2 {
		t.Errorf("waiting %v, states %v; want a and b", s.waiting, s.prunes)
	}
	if len(logged) != 1 || !strings.Contains(logged[0], "prune c: 2 repositories wait") {
		t.Errorf("logged %q; want one line for the flood", logged)
	}
	// A pass takes a: c fits now.
	s.waiting = s.waiting[1:]
	delete(s.prunes, "a")
	if !s.prune("c") {
		t.Error("prune(c) after a pass made room: false")
	}
	s.Close()
	if s.prune("d") {
		t.Error("prune after Close: true")
	}
}

// FuzzParseNotification: a webhook body is whatever a client sends. It
// never panics the parser, and what it yields is a push or a delete.
func FuzzParseNotification(f *testing.F) {
	for _, s := range []string{
		`{"events":[{"action":"push","target":{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"sha256:aa","repository":"a/b","tag":"1","url":"http://h:5000/v2/a/b/manifests/sha256:aa"},"request":{"host":"h"}}]}`,
		`{"events":[{"action":"delete","target":{"repository":"a","tag":"x"}}]}`,
		`{"type":"PUSH_ARTIFACT","event_data":{"resources":[{"digest":"sha256:ff","tag":"2","resource_url":"h:443/ns/deep/app:2"}],"repository":{}}}`,
		`{"specversion":"1.0","type":"harbor.artifact.pushed","data":{"resources":[{"digest":"sha256:ab","tag":"stable","resource_url":"h/team/app:stable"}],"repository":{"repo_full_name":"team/app"}}}`,
		`{"type":"DELETE_ARTIFACT","event_data":{"resources":[]}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		kind, evs, err := ParseNotification(body)
		if err != nil {
			return
		}
		if kind != KindDistribution && kind != KindHarbor {
			t.Fatalf("kind %q", kind)
		}
		for _, e := range evs {
			if e.Action != "push" && e.Action != "delete" {
				t.Fatalf("event %+v: action %q", e, e.Action)
			}
			// The server's checks take any event without panicking.
			validEvent(e, "-erofs")
		}
	})
}

// TestServerSlowClients: clients that never finish a request cannot hold
// the mirror's connections (review 20-a: 19,990 of them took every file
// descriptor): one without the secret gets its 401 at once, without the
// server waiting for a body that never comes, and one with it is cut off
// after the read timeout; an idle connection ends too.
func TestServerSlowClients(t *testing.T) {
	defer func(d time.Duration) { httpReadTimeout = d }(httpReadTimeout)
	httpReadTimeout = 2 * time.Second
	s := NewServer(&Config{Secret: "s3cret", SecretHeader: "Authorization"}, nil, nil, nil)
	defer s.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := HTTPServer(s.Handler())
	// Each connection Serve accepts, as Serve accepts it.
	accepted := make(chan struct{}, 16)
	srv.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			accepted <- struct{}{}
		}
	}
	go srv.Serve(LimitListener(ln, 2))
	defer srv.Close()
	stall := func(header string) (string, time.Duration) {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		fmt.Fprintf(c, "POST /notify HTTP/1.1\r\nHost: x\r\n%sContent-Length: 100000\r\n\r\n{", header)
		start := time.Now()
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		// The first bytes of an answer, or the server's close.
		b := make([]byte, 12)
		n, _ := io.ReadFull(c, b)
		return string(b[:n]), time.Since(start)
	}
	if got, d := stall(""); got != "HTTP/1.1 401" || d > time.Second {
		t.Errorf("no secret, body never sent: %q after %v, want a 401 at once", got, d)
	}
	if got, d := stall("Authorization: s3cret\r\n"); (got != "" && got != "HTTP/1.1 400") || d < 1500*time.Millisecond || d > 6*time.Second {
		t.Errorf("the secret, body never sent: %q after %v, want a 400 or the connection closed after the 2s read timeout", got, d)
	}
	// Two connections at most: a third is served once one closes.
	a, _ := net.Dial("tcp", ln.Addr().String())
	b, _ := net.Dial("tcp", ln.Addr().String())
	done := make(chan error, 1)
	go func() {
		// Not kept alive: its slot is free again once it is answered.
		c := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
		resp, err := c.Get("http://" + ln.Addr().String() + "/healthz")
		if err == nil {
			resp.Body.Close()
		}
		done <- err
	}()
	select {
	case err := <-done:
		t.Errorf("a third connection was served while two were open: %v", err)
	case <-time.After(300 * time.Millisecond):
	}
	a.Close()
	b.Close()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("/healthz: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Error("the third connection was not served after the others closed")
	}
	// Both slots held: a shutdown keeps to its deadline (review 20-c:
	// Serve waited in Accept for a slot, 9.8 s past a 1 s deadline).
	// Every connection so far has been accepted: forget them.
	for len(accepted) > 0 {
		<-accepted
	}
	a, _ = net.Dial("tcp", ln.Addr().String())
	b, _ = net.Dial("tcp", ln.Addr().String())
	defer a.Close()
	defer b.Close()
	for range 2 { // both accepted: Serve waits for a slot
		select {
		case <-accepted:
		case <-time.After(10 * time.Second):
			t.Fatal("the two connections were not accepted")
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	start := time.Now()
	srv.Shutdown(ctx)
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("Shutdown with a 1 s deadline took %v", d)
	}
}

func TestRedactURL(t *testing.T) {
	for in, want := range map[string]string{
		"nats://tok@h:4222":                     "nats://***@h:4222",
		"tok@h:4222":                            "***@h:4222",
		"nats://u:p@a:1,nats://b:2,tls://t@c:3": "nats://***@a:1,nats://b:2,tls://***@c:3",
		"nats://h:4222":                         "nats://h:4222",
	} {
		if got := RedactURL(in); got != want {
			t.Errorf("RedactURL(%q) = %q, want %q", in, got, want)
		}
	}
}

// A layer over --max-layer-size fails its task at once: another attempt
// would download it again (review 20-d).
func TestClassifyTooLarge(t *testing.T) {
	err := fmt.Errorf("layer sha256:ab: tar entry \"big\": %w", &convert.TooLargeError{Max: 1 << 20})
	if _, ok := classify(err).(errPermanent); !ok {
		t.Errorf("%v: not permanent", err)
	}
}

// A notification over 4 MiB gets 413 and a line in the log, whether its
// length is announced or it comes chunked; one of exactly 4 MiB is read
// whole (it parses: this server only converts, so 503). The body used to
// be cut at 4 MiB and refused as "unexpected end of JSON input".
func TestNotifyTooLarge(t *testing.T) {
	var logged strings.Builder
	var mu sync.Mutex
	logf := func(f string, a ...any) { mu.Lock(); fmt.Fprintf(&logged, f+"\n", a...); mu.Unlock() }
	s := NewServer(&Config{}, nil, nil, logf)
	defer s.Close()
	srv := httptest.NewServer(s.Handler())
	defer srv.Close()
	// An envelope of n bytes, padded inside: cut short, it is no JSON.
	body := func(n int) []byte {
		return slices.Concat([]byte(`{"events":[`), bytes.Repeat([]byte(" "), n-len(`{"events":[]}`)), []byte(`]}`))
	}
	post := func(r io.Reader) (int, string) {
		resp, err := http.Post(srv.URL+"/notify", "application/json", r)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, msg := post(bytes.NewReader(body(maxNotification))); code != http.StatusServiceUnavailable {
		t.Errorf("a body of exactly 4 MiB: %d %q, want it read and parsed (503: no queue)", code, msg)
	}
	chunked := struct{ io.Reader }{bytes.NewReader(body(maxNotification + 1))} // no length: sent chunked
	for what, r := range map[string]io.Reader{"announced": bytes.NewReader(body(maxNotification + 1)), "chunked": chunked} {
		code, msg := post(r)
		if code != http.StatusRequestEntityTooLarge || !strings.Contains(msg, "larger than 4194304 bytes") {
			t.Errorf("a body of 4 MiB + 1, length %s: %d %q, want 413 naming the bound", what, code, msg)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if n := strings.Count(logged.String(), "refused with 413"); n != 2 {
		t.Errorf("%d log lines for two refused bodies:\n%s", n, logged.String())
	}
}

// TestJetStreamNotReady: what OpenQueue waits out (a cluster still
// electing its leader) and what it reports at once.
func TestJetStreamNotReady(t *testing.T) {
	for _, c := range []struct {
		err  error
		want bool
	}{
		{fmt.Errorf("stream X: %w", context.DeadlineExceeded), true},
		{nats.ErrNoResponders, true},
		{&jetstream.APIError{Code: 503, ErrorCode: 10008, Description: "JetStream system temporarily unavailable"}, true},
		{fmt.Errorf("stream X: %w", &jetstream.APIError{Code: 500, ErrorCode: 10023, Description: "insufficient resources"}), false},
		{errors.New("nats: authorization violation"), false},
	} {
		if got := jetStreamNotReady(c.err); got != c.want {
			t.Errorf("jetStreamNotReady(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}
