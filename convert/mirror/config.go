package mirror

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/nats-io/nats-server/v2/conf"
)

// Config is what serve and sync need. The file form is NATS's configuration
// syntax (JSON, or relaxed: `key: value`, # comments, $ENV variables), so
// a secret can come from the environment: `secret: $WEBHOOK_SECRET`.
type Config struct {
	// Registry is the HOST[:PORT] whose images are converted; the twins go
	// to the same registry. Events name repositories; the registry is
	// reached at this address whatever host the event gives.
	Registry  string `json:"registry"`
	PlainHTTP bool   `json:"plainHTTP"`
	Insecure  bool   `json:"insecure"`
	Username  string `json:"username"`
	Password  string `json:"password"`
	// Suffix makes the twin's tag (default "-erofs"); a tag ending with it
	// is never a source.
	Suffix string `json:"suffix"`
	Rules  Rules  `json:"rules"`
	// ListFile, for sync: one "repo:tag" a line instead of the catalog.
	ListFile string `json:"listFile"`

	// Listen is serve's HTTP address (default ":8080").
	Listen string `json:"listen"`
	// Secret, if set, must be the value of SecretHeader (default
	// Authorization) of every notification, bare or as "Bearer SECRET".
	Secret       string `json:"secret"`
	SecretHeader string `json:"secretHeader"`
	// TLSCert and TLSKey, if set, make serve answer HTTPS (PEM files).
	TLSCert string `json:"tlsCert"`
	TLSKey  string `json:"tlsKey"`

	NATS  NATSConfig  `json:"nats"`
	Queue QueueConfig `json:"queue"`
	// Tasks is how many tasks one process converts at once (default 1;
	// 0: a process that only receives notifications).
	Tasks *int `json:"tasks"`
	// Convert holds convert's options by flag name ("compress": "lz4hc");
	// the command line applies them.
	Convert map[string]any `json:"convert"`
}

// DefaultMaxLayerSize is serve's and sync's bound on a layer's
// uncompressed tar (--max-layer-size; convert has none by default): a
// mirror converts what anyone may push, and a gzip of zeros expands a
// thousandfold. It lets through the largest layers that registries with
// a bound accept, uncompressed (docs/mirror.md has their figures), and is
// the most disk one layer being converted can fill.
const DefaultMaxLayerSize = 32 << 30

// NATSConfig says where the queue lives.
type NATSConfig struct {
	// URL of an external NATS cluster; empty starts an embedded server.
	URL string `json:"url"`
	// Creds is a NATS credentials file for URL.
	Creds string `json:"creds"`
	// StoreDir is the embedded server's JetStream directory.
	StoreDir string `json:"storeDir"`
	// Listen is the embedded server's client address (default
	// 127.0.0.1:4222), for workers on other machines.
	Listen string `json:"listen"`
	// Replicas of the stream and buckets on a cluster (default 1).
	Replicas int `json:"replicas"`
	// Prefix names the stream, consumer, buckets and subjects (default
	// "ocierofs"), so several mirrors can share one cluster.
	Prefix string `json:"prefix"`
}

// QueueConfig tunes delivery.
type QueueConfig struct {
	// AckWait: a task whose worker has not reported progress for this
	// long is given to another worker (default 1m; workers report every
	// third of it while they convert).
	AckWait Duration `json:"ackWait"`
	// MaxDeliver is how many times a task is tried (default 5).
	MaxDeliver int `json:"maxDeliver"`
	// Backoff is the delay before the first retry, doubled each time up to
	// ten times it (default 10s).
	Backoff Duration `json:"backoff"`
	// Timeout bounds one attempt (default 2h).
	Timeout Duration `json:"timeout"`
	// Keep is how long task records stay visible in /status (default 7 days).
	Keep Duration `json:"keep"`
}

// Duration reads "30s", "5m" or a number of seconds.
type Duration time.Duration

func (d *Duration) UnmarshalJSON(b []byte) error {
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	switch x := v.(type) {
	case float64:
		*d = Duration(time.Duration(x * float64(time.Second)))
	case string:
		p, err := time.ParseDuration(x)
		if err != nil {
			return fmt.Errorf("duration %q: %w", x, err)
		}
		*d = Duration(p)
	default:
		return fmt.Errorf("duration: want a string like \"30s\", got %s", b)
	}
	return nil
}

func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

// LoadConfig reads a configuration file; unknown keys are errors (a typo
// must not silently turn a filter off).
func LoadConfig(path string) (*Config, error) {
	m, err := conf.ParseFile(path)
	if err != nil {
		return nil, fmt.Errorf("config %s: %w", path, err)
	}
	c, err := configFromMap(m)
	if err != nil {
		return nil, fmt.Errorf("config %s: %w", path, err)
	}
	return c, nil
}

// ParseConfig reads a configuration from text.
func ParseConfig(text string) (*Config, error) {
	m, err := conf.Parse(text)
	if err != nil {
		return nil, err
	}
	return configFromMap(m)
}

func configFromMap(m map[string]any) (*Config, error) {
	// The NATS parser yields maps, lists, strings, int64, float64, bool and
	// time.Time; JSON is the strict way from there into the struct.
	b, err := json.Marshal(m)
	if err != nil {
		return nil, err
	}
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.DisallowUnknownFields()
	c := &Config{}
	if err := dec.Decode(c); err != nil {
		return nil, err
	}
	return c, nil
}

// SetDefaults fills what is not set.
func (c *Config) SetDefaults() {
	if c.Suffix == "" {
		c.Suffix = "-erofs"
	}
	if c.Listen == "" {
		c.Listen = ":8080"
	}
	if c.SecretHeader == "" {
		c.SecretHeader = "Authorization"
	}
	if c.NATS.Listen == "" {
		c.NATS.Listen = "127.0.0.1:4222"
	}
	if c.NATS.Replicas == 0 {
		c.NATS.Replicas = 1
	}
	if c.NATS.Prefix == "" {
		c.NATS.Prefix = "ocierofs"
	}
	q := &c.Queue
	if q.AckWait == 0 {
		q.AckWait = Duration(time.Minute)
	}
	if q.MaxDeliver == 0 {
		q.MaxDeliver = 5
	}
	if q.Backoff == 0 {
		q.Backoff = Duration(10 * time.Second)
	}
	if q.Timeout == 0 {
		q.Timeout = Duration(2 * time.Hour)
	}
	if q.Keep == 0 {
		q.Keep = Duration(7 * 24 * time.Hour)
	}
	if c.Tasks == nil {
		one := 1
		c.Tasks = &one
	}
}

// Validate reports settings nothing can run with.
func (c *Config) Validate() error {
	var errs []error
	if c.Registry == "" {
		errs = append(errs, errors.New("no registry (registry: HOST[:PORT], or --registry)"))
	}
	if strings.Contains(c.Registry, "/") {
		errs = append(errs, fmt.Errorf("registry %q: want HOST[:PORT], without a scheme or path", c.Registry))
	} else if _, err := name.NewRegistry(c.Registry); c.Registry != "" && err != nil {
		errs = append(errs, fmt.Errorf("registry %q: %w", c.Registry, err))
	}
	if strings.ContainsAny(c.Suffix, "/:@") {
		errs = append(errs, fmt.Errorf("suffix %q: not a tag suffix", c.Suffix))
	}
	for _, g := range append(append([]string(nil), c.Rules.Include...), c.Rules.Exclude...) {
		if err := checkGlob(g); err != nil {
			errs = append(errs, err)
		}
	}
	if c.Queue.AckWait < Duration(time.Second) {
		errs = append(errs, fmt.Errorf("queue.ackWait %s: at least 1s", time.Duration(c.Queue.AckWait)))
	}
	if c.Queue.MaxDeliver < 1 {
		errs = append(errs, fmt.Errorf("queue.maxDeliver %d: at least 1", c.Queue.MaxDeliver))
	}
	if (c.TLSCert == "") != (c.TLSKey == "") {
		errs = append(errs, errors.New("tlsCert and tlsKey go together"))
	}
	if c.Tasks != nil && *c.Tasks < 0 {
		errs = append(errs, fmt.Errorf("tasks %d: not negative", *c.Tasks))
	}
	return errors.Join(errs...)
}

// readListFile reads "repo:tag" lines; # starts a comment.
func readListFile(path string) ([]string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		if i := strings.IndexByte(l, '#'); i >= 0 {
			l = l[:i]
		}
		if l = strings.TrimSpace(l); l != "" {
			out = append(out, l)
		}
	}
	return out, nil
}
