package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"math"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/ocierofs/ocierofs/cmd/internal/options"
	"github.com/ocierofs/ocierofs/convert/mirror"
)

var serveCommand = &cli.Command{
	Name:  "serve",
	Usage: "convert every image pushed to a registry: notifications in, EROFS twins out",
	Description: "Receives the registry's push notifications on POST /notify (CNCF distribution's\n" +
		"\"notifications: endpoints:\" or a Harbor webhook), filters them by --include and\n" +
		"--exclude, and queues one task per image on a NATS JetStream work queue; workers\n" +
		"push the twin (tag plus --suffix). By default one process does it all, with an\n" +
		"embedded NATS server storing the queue in --nats-store. With --nats URL the queue\n" +
		"is an external cluster, and `serve --worker` processes anywhere take its tasks.\n" +
		"Also GET /healthz, /readyz, /metrics (Prometheus) and /status (the tasks).",
	Flags: slices.Concat(mirrorFlags(), options.InCategory("HTTP",
		&cli.StringFlag{Name: "listen", DefaultText: ":8080", Usage: "HTTP address"},
		&cli.StringFlag{Name: "secret", EnvVars: []string{"OCIEROFS_WEBHOOK_SECRET"}, Usage: "shared secret every notification must carry (bare or as \"Bearer SECRET\")"},
		&cli.StringFlag{Name: "secret-file", EnvVars: []string{"OCIEROFS_WEBHOOK_SECRET_FILE"}, Usage: "read --secret from `FILE` (a systemd credential, a mounted Kubernetes Secret; a final newline is dropped)"},
		&cli.StringFlag{Name: "secret-header", DefaultText: "Authorization", Usage: "header holding the secret"},
		&cli.StringFlag{Name: "tls-cert", Usage: "serve HTTPS with this PEM certificate (and --tls-key)"},
		&cli.StringFlag{Name: "tls-key", Usage: "PEM key of --tls-cert"},
	), options.InCategory("Queue",
		&cli.StringFlag{Name: "nats-store", DefaultText: defaultStateDir() + "/nats", Usage: "JetStream directory of the embedded NATS server"},
		&cli.StringFlag{Name: "nats-listen", DefaultText: "127.0.0.1:4222", Usage: "client address of the embedded NATS server, for remote workers"},
		&cli.BoolFlag{Name: "worker", Usage: "only take tasks from --nats (no notifications); health and metrics still on --listen"},
		&cli.IntFlag{Name: "tasks", Value: 1, Usage: "images converted at once by this process (0: only receive notifications)"},
		&cli.StringFlag{Name: "name", DefaultText: "host:pid", Usage: "this worker's name in /status"},
	), options.ErofsFlags(), mirrorSourceFlags(), options.ConvertFlags()),
	Action: func(c *cli.Context) error {
		if c.NArg() != 0 {
			return fmt.Errorf("serve: no arguments expected (got %q)", c.Args().Slice())
		}
		ctx, stop := signal.NotifyContext(c.Context, os.Interrupt, syscall.SIGTERM)
		defer stop()
		return runServe(ctx, c)
	},
}

// defaultStateDir is where serve keeps its state unless told:
// $XDG_STATE_HOME/ocierofs where it is set, /var/lib/ocierofs for root (a
// system service), else ~/.local/state/ocierofs.
func defaultStateDir() string {
	if d := os.Getenv("XDG_STATE_HOME"); d != "" {
		return filepath.Join(d, "ocierofs")
	}
	if os.Geteuid() == 0 {
		return "/var/lib/ocierofs"
	}
	if h, err := os.UserHomeDir(); err == nil {
		return filepath.Join(h, ".local", "state", "ocierofs")
	}
	return filepath.Join(os.TempDir(), "ocierofs")
}

// mirrorFlags are the settings serve and sync share (a config file may
// hold them all; flags win over it).
func mirrorFlags() []cli.Flag {
	return slices.Concat(options.InCategory("Mirror",
		&cli.StringFlag{Name: "config", Usage: "configuration `FILE` (NATS syntax: JSON, or key: value lines; see docs/mirror.md)"},
		&cli.StringFlag{Name: "registry", Usage: "HOST[:PORT] of the registry to mirror"},
		&cli.StringSliceFlag{Name: "include", Usage: "convert only REPO[:TAG] matching this glob (* within a path element, ** across; repeatable)"},
		&cli.StringSliceFlag{Name: "exclude", Usage: "never convert REPO[:TAG] matching this glob (repeatable)"},
	), options.InCategory("Queue",
		&cli.StringFlag{Name: "nats", EnvVars: []string{"OCIEROFS_NATS"}, Usage: "URL of an external NATS cluster, or of another serve's embedded server: nats://TOKEN@HOST:PORT (default: the embedded server; the environment variable keeps the token out of ps)"},
		&cli.StringFlag{Name: "nats-creds", Usage: "NATS credentials file"},
		&cli.DurationFlag{Name: "ack-wait", DefaultText: "1m", Usage: "a task without progress for this long goes to another worker"},
		&cli.IntFlag{Name: "max-deliver", DefaultText: "5", Usage: "attempts per task"},
		&cli.DurationFlag{Name: "backoff", DefaultText: "10s", Usage: "delay before the first retry, doubled each time"},
	))
}

// mirrorSourceFlags are convert's SourceFlags with the mirror's default
// bound on a layer (mirror.DefaultMaxLayerSize).
func mirrorSourceFlags() []cli.Flag {
	out := slices.Clone(options.SourceFlags())
	for i, f := range out {
		if sf, ok := f.(*cli.StringFlag); ok && sf.Name == "max-layer-size" {
			c := *sf
			c.Value = fmt.Sprintf("%dG", mirror.DefaultMaxLayerSize>>30)
			c.Usage = "fail a layer whose uncompressed tar is larger than this size (K, M, G, T): a mirror converts what anyone may push, and a gzip of zeros expands 1000:1; raise it for larger layers"
			out[i] = &c
		}
	}
	return out
}

// mirrorConfig reads --config, lets the flags override it, applies its
// convert options to the convert flags not given, and checks it.
func mirrorConfig(c *cli.Context) (*mirror.Config, error) {
	cfg := &mirror.Config{}
	if p := c.String("config"); p != "" {
		var err error
		if cfg, err = mirror.LoadConfig(p); err != nil {
			return nil, err
		}
	}
	set := func(flag string, dst *string) {
		if c.IsSet(flag) {
			*dst = c.String(flag)
		}
	}
	set("registry", &cfg.Registry)
	set("listen", &cfg.Listen)
	set("secret", &cfg.Secret)
	if c.IsSet("secret-file") {
		if c.IsSet("secret") {
			return nil, errors.New("give --secret or --secret-file, not both")
		}
		secret, err := readSecretFile(c.String("secret-file"))
		if err != nil {
			return nil, err
		}
		cfg.Secret = secret
	}
	set("secret-header", &cfg.SecretHeader)
	set("tls-cert", &cfg.TLSCert)
	set("tls-key", &cfg.TLSKey)
	set("nats", &cfg.NATS.URL)
	set("nats-creds", &cfg.NATS.Creds)
	set("nats-store", &cfg.NATS.StoreDir)
	set("nats-listen", &cfg.NATS.Listen)
	set("list-file", &cfg.ListFile)
	set("username", &cfg.Username)
	set("password", &cfg.Password)
	if c.IsSet("include") {
		cfg.Rules.Include = c.StringSlice("include")
	}
	if c.IsSet("exclude") {
		cfg.Rules.Exclude = c.StringSlice("exclude")
	}
	if c.IsSet("plain-http") {
		cfg.PlainHTTP = c.Bool("plain-http")
	}
	if c.IsSet("insecure") {
		cfg.Insecure = c.Bool("insecure")
	}
	if c.IsSet("suffix") || cfg.Suffix == "" {
		cfg.Suffix = c.String("suffix")
	}
	if c.IsSet("ack-wait") {
		cfg.Queue.AckWait = mirror.Duration(c.Duration("ack-wait"))
	}
	if c.IsSet("max-deliver") {
		cfg.Queue.MaxDeliver = c.Int("max-deliver")
	}
	if c.IsSet("backoff") {
		cfg.Queue.Backoff = mirror.Duration(c.Duration("backoff"))
	}
	if c.IsSet("tasks") {
		n := c.Int("tasks")
		cfg.Tasks = &n
	}
	// convert options of the file: as if given as flags, unless they were.
	known := map[string]bool{}
	for _, f := range slices.Concat(options.ErofsFlags(), options.SourceFlags(), options.ConvertFlags()) {
		for _, n := range f.Names() {
			known[n] = true
		}
	}
	for k, v := range cfg.Convert {
		if !known[k] {
			return nil, fmt.Errorf("config: convert.%s: no such convert option", k)
		}
		if !c.IsSet(k) {
			if err := c.Set(k, flagValue(v)); err != nil {
				return nil, fmt.Errorf("config: convert.%s = %v: %w", k, v, err)
			}
		}
	}
	cfg.SetDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return cfg, nil
}

// mirrorTwins makes the converter of serve and sync from the convert flags.
func mirrorTwins(c *cli.Context, cfg *mirror.Config, cache mirror.LayerCache, logger *log.Logger) (*mirror.Twins, error) {
	opt, optRem, done, err := options.Conversion(c)
	if err != nil {
		return nil, err
	}
	done()
	opt.Progress = nil
	rem := cfg.Remote()
	rem.StallTimeout = optRem.StallTimeout
	rem.UserAgent = "ocierofs-mirror"
	t := &mirror.Twins{Registry: cfg.Registry, PlainHTTP: cfg.PlainHTTP, Suffix: cfg.Suffix, Remote: rem,
		Options: opt, Cache: cache, ClaimRefresh: time.Duration(cfg.Queue.AckWait) / 3}
	if !c.Bool("quiet") {
		t.Log = func(s string) { logger.Print(s) }
	}
	return t, nil
}

func runServe(ctx context.Context, c *cli.Context) error {
	cfg, err := mirrorConfig(c)
	if err != nil {
		return err
	}
	logger := log.New(os.Stderr, "", log.LstdFlags)
	logf := logger.Printf
	worker := c.Bool("worker")
	if worker && cfg.NATS.URL == "" {
		return errors.New("serve --worker takes tasks from a queue elsewhere: give --nats URL")
	}
	if worker && *cfg.Tasks == 0 {
		return errors.New("serve --worker --tasks 0 would do nothing")
	}
	if cfg.NATS.URL == "" && cfg.NATS.StoreDir == "" {
		cfg.NATS.StoreDir = filepath.Join(defaultStateDir(), "nats")
		logf("the embedded NATS server keeps the queue in %s", cfg.NATS.StoreDir)
	}
	q, err := mirror.OpenQueue(ctx, cfg, logf)
	if err != nil {
		return err
	}
	defer q.Close()
	metrics := mirror.NewMetrics(q.Depth)
	var srvQueue *mirror.Queue
	if !worker {
		srvQueue = q
		if err := q.WatchLostTasks(logf); err != nil {
			return err
		}
	}
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return fmt.Errorf("listen %s: %w", cfg.Listen, err)
	}
	if cfg.Secret == "" && !loopback(ln.Addr()) {
		logf("serve: warning: no secret: anyone who reaches %s can queue conversions and read /status (set secret, or --secret)", ln.Addr())
	}
	// A registry sends few notifications at once; many connections are
	// someone else's.
	ln = mirror.LimitListener(ln, maxConnections)
	srv := mirror.NewServer(cfg, srvQueue, metrics, logf)
	httpSrv := mirror.HTTPServer(srv.Handler())
	errc := make(chan error, 2)
	scheme := "http"
	if cfg.TLSCert != "" {
		scheme = "https"
		go func() { errc <- httpSrv.ServeTLS(ln, cfg.TLSCert, cfg.TLSKey) }()
	} else {
		go func() { errc <- httpSrv.Serve(ln) }()
	}
	what := "receiving notifications"
	if worker {
		what = "worker"
	}
	logf("serve: %s on %s://%s, registry %s, %d task(s) at once, queue %s", what, scheme, ln.Addr(), cfg.Registry, *cfg.Tasks,
		strings.TrimSpace(mirror.RedactURL(cfg.NATS.URL)+" "+q.ClientURL()))
	wctx, wcancel := context.WithCancel(ctx)
	defer wcancel()
	wdone := make(chan struct{})
	if *cfg.Tasks > 0 {
		twins, err := mirrorTwins(c, cfg, q.LayerCache(), logger)
		if err != nil {
			return err
		}
		name := c.String("name")
		if name == "" {
			name = mirror.DefaultWorkerName()
		}
		w := &mirror.Worker{Name: name, Queue: q, Twins: twins, Metrics: metrics, Concurrency: *cfg.Tasks, Logf: logf}
		go func() { w.Run(wctx); close(wdone) }()
	} else {
		close(wdone)
	}
	select {
	case <-ctx.Done():
	case err = <-errc:
	}
	logf("serve: stopping")
	wcancel()
	<-wdone // tasks in hand are handed back
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	httpSrv.Shutdown(sctx)
	srv.Close() // prunes under way stop
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return err
}

// maxConnections bounds serve's HTTP connections at once.
const maxConnections = 1024

// loopback reports whether a listens on a loopback address only.
func loopback(a net.Addr) bool {
	ta, ok := a.(*net.TCPAddr)
	return ok && ta.IP.IsLoopback()
}

// flagValue writes a value of the config file as a flag takes it. The
// file's numbers may come as floats (NATS's syntax reads 20G as 2e10):
// a whole one is written without an exponent.
func flagValue(v any) string {
	if f, ok := v.(float64); ok && f == math.Trunc(f) && math.Abs(f) < 1<<62 {
		return strconv.FormatInt(int64(f), 10)
	}
	return fmt.Sprint(v)
}

// readSecretFile reads a secret kept in a file of its own, as systemd's
// LoadCredential= and Kubernetes's Secret volumes give one, without the
// line end an editor or `echo` leaves.
func readSecretFile(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("--secret-file: %w", err)
	}
	s := strings.TrimSuffix(strings.TrimSuffix(string(b), "\n"), "\r")
	if s == "" {
		return "", fmt.Errorf("--secret-file %s: empty", path)
	}
	return s, nil
}
