package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/nornq/norn"
	"github.com/nornq/norn/bridge/kafka"
	"github.com/nornq/norn/internal/storeopen"
	"github.com/nornq/norn/server"
	"github.com/nornq/norn/server/dashboard"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// serverEnv maps each `norn server` flag to its environment variable. A
// flag given on the command line wins over the variable.
var serverEnv = map[string]string{
	"addr":                  "NORN_ADDR",
	"store":                 "NORN_STORE",
	"durability":            "NORN_DURABILITY",
	"min-free-bytes":        "NORN_MIN_FREE_BYTES",
	"history-limit":         "NORN_HISTORY_LIMIT",
	"max-body-bytes":        "NORN_MAX_BODY_BYTES",
	"max-spec-bytes":        "NORN_MAX_SPEC_BYTES",
	"max-batch":             "NORN_MAX_BATCH",
	"max-labels":            "NORN_MAX_LABELS",
	"tokens-file":           "NORN_TOKENS_FILE",
	"auth-token":            "NORN_AUTH_TOKENS",
	"allow-unauthenticated": "NORN_ALLOW_UNAUTHENTICATED",
	"tls-cert":              "NORN_TLS_CERT",
	"tls-key":               "NORN_TLS_KEY",
	"log-level":             "NORN_LOG_LEVEL",
	"log-format":            "NORN_LOG_FORMAT",
	"shutdown-timeout":      "NORN_SHUTDOWN_TIMEOUT",
	"dashboard":             "NORN_DASHBOARD",
	"schema":                "NORN_SCHEMA",
	"migrate":               "NORN_MIGRATE",
	"cors-origin":           "NORN_CORS_ORIGINS",
	"allowed-host":          "NORN_ALLOWED_HOSTS",
	"metrics-auth":          "NORN_METRICS_AUTH",
	"metrics-max-queues":    "NORN_METRICS_MAX_QUEUES",
	"max-event-streams":     "NORN_MAX_EVENT_STREAMS",
}

// applyEnv sets every flag not given on the command line from its
// environment variable, so bad values fail exactly like bad flags but name
// the variable. Values of list flags are separated by whitespace or commas.
func applyEnv(fs *pflag.FlagSet, env map[string]string, lookup func(string) (string, bool)) error {
	for name, key := range env {
		f := fs.Lookup(name)
		if f == nil || f.Changed {
			continue
		}
		v, ok := lookup(key)
		if !ok || v == "" {
			continue
		}
		vals := []string{v}
		if f.Value.Type() == "stringArray" {
			vals = strings.Fields(strings.ReplaceAll(v, ",", " "))
		}
		for _, one := range vals {
			if err := fs.Set(name, one); err != nil {
				return usagef("%s=%q: %v", key, v, err)
			}
		}
	}
	return nil
}

// serverFlags are the settings of `norn server`.
type serverFlags struct {
	addr, store, durability string
	historyLimit            int
	minFree                 int64
	maxBody                 int64
	maxSpec, maxBatch       int
	maxLabels               int
	tokensFile              string
	authTokens              []string
	allowUnauth             bool
	tlsCert, tlsKey         string
	logLevel, logFormat     string
	shutdownTimeout         time.Duration
	dashboard               bool
	corsOrigins             []string
	allowedHosts            []string
	metricsAuth             bool
	metricsMaxQueues        int
	maxEventStreams         int
	schema                  string
	migrate                 bool
	// kafka configures the optional Kafka delay bridge run beside the API
	// (on when --kafka-brokers is given).
	kafka kafka.Config
}

// parseAuthToken parses "TOKEN:ROLE[:QUEUE,QUEUE…]" from --auth-token.
func parseAuthToken(s string) (server.Token, error) {
	parts := strings.SplitN(s, ":", 3)
	if len(parts) < 2 || parts[0] == "" {
		return server.Token{}, fmt.Errorf("want TOKEN:ROLE[:QUEUE,…], got %d parts", len(parts))
	}
	t := server.Token{Token: parts[0], Role: server.Role(parts[1])}
	switch t.Role {
	case server.RoleClient, server.RoleWorker, server.RoleAdmin:
	default:
		return server.Token{}, fmt.Errorf("unknown role %q (want client, worker or admin)", parts[1])
	}
	if len(parts) == 3 && parts[2] != "" {
		for _, q := range strings.Split(parts[2], ",") {
			if !norn.ValidQueueName(q) {
				return server.Token{}, fmt.Errorf("invalid queue name %q", q)
			}
			t.Queues = append(t.Queues, q)
		}
	}
	return t, nil
}

// newLogger builds the server's slog logger from --log-level/--log-format.
func newLogger(w io.Writer, level, format string) (*slog.Logger, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		return nil, usagef("--log-level: unknown level %q (want debug, info, warn or error)", level)
	}
	opts := &slog.HandlerOptions{Level: lv}
	switch strings.ToLower(format) {
	case "text", "":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, usagef("--log-format: unknown format %q (want text or json)", format)
}

func init() {
	register(func(g *Globals) *cobra.Command {
		sf := &serverFlags{}
		cmd := &cobra.Command{
			Use:   "server",
			Short: "Run the Norn server (HTTP API, dashboard, metrics) on a store",
			Long: `Run the Norn server. With no flags it stores tasks in ./norn-data (the
embedded store) and listens on 127.0.0.1:7070; the line "norn: listening on
URL" on stdout says where. Every flag can also be set with the environment
variable shown in brackets; a flag on the command line wins.

Without tokens, authentication is off and the server only listens on a
loopback address unless --allow-unauthenticated is given. Tokens come from
--tokens-file (lines "TOKEN ROLE [QUEUE,…]") and --auth-token
TOKEN:ROLE[:QUEUE,…]; roles are client, worker and admin.

SIGINT or SIGTERM shut the server down gracefully: it stops accepting
connections, ends long polls and event streams, waits for requests in
flight (up to --shutdown-timeout) and closes the store.`,
			Example: `  norn server
  norn server --addr 0.0.0.0:7070 --tokens-file /etc/norn/tokens --tls-cert cert.pem --tls-key key.pem
  NORN_STORE=embedded:/var/lib/norn NORN_LOG_FORMAT=json norn server`,
			Args: cobra.NoArgs,
			RunE: func(cmd *cobra.Command, args []string) error {
				if err := applyEnv(cmd.Flags(), serverEnv, os.LookupEnv); err != nil {
					return err
				}
				server.RaiseProcs()
				return runServer(cmd, sf)
			},
		}
		fs := cmd.Flags()
		fs.StringVar(&sf.addr, "addr", server.DefaultAddr, "listen address; port 0 picks a free port")
		fs.StringVar(&sf.store, "store", storeopen.DefaultSpec, "store: embedded:PATH or postgres://USER:PASSWORD@HOST/DB")
		fs.StringVar(&sf.schema, "schema", "", "postgres store: schema holding Norn's tables (default norn)")
		fs.BoolVar(&sf.migrate, "migrate", false, "postgres store: apply pending schema migrations on start")
		fs.StringVar(&sf.durability, "durability", "strict", "embedded store: strict (reply after sync) or opportunistic (reply first, sync soon after)")
		fs.Int64Var(&sf.minFree, "min-free-bytes", 128<<20, "embedded store: free disk space kept in reserve; below it new tasks, log entries and schedules are refused with 507 while claims and finishing calls go on (negative: no reserve)")
		fs.IntVar(&sf.historyLimit, "history-limit", norn.DefaultHistoryLimit, "history entries kept per task (oldest dropped)")
		fs.Int64Var(&sf.maxBody, "max-body-bytes", server.DefaultMaxBodyBytes, "largest request body")
		fs.IntVar(&sf.maxSpec, "max-spec-bytes", norn.MaxSpecBytes, "largest task spec")
		fs.IntVar(&sf.maxBatch, "max-batch", norn.MaxBatch, "most tasks in a batch submit (and ops in a transaction or lease batch)")
		fs.IntVar(&sf.maxLabels, "max-labels", norn.MaxLabels, "most labels on a task")
		fs.StringVar(&sf.tokensFile, "tokens-file", "", "file of accepted tokens, one \"TOKEN ROLE [QUEUE,…]\" per line")
		fs.StringVar(&sf.tokensFile, "auth-tokens-file", "", "same as --tokens-file")
		fs.StringArrayVar(&sf.authTokens, "auth-token", nil, "accepted token TOKEN:ROLE[:QUEUE,…] (repeatable)")
		fs.BoolVar(&sf.allowUnauth, "allow-unauthenticated", false, "allow a non-loopback address without tokens (anyone reaching it may do everything)")
		fs.StringVar(&sf.tlsCert, "tls-cert", "", "TLS certificate (PEM); with --tls-key the server speaks HTTPS only")
		fs.StringVar(&sf.tlsKey, "tls-key", "", "TLS private key (PEM)")
		fs.StringVar(&sf.logLevel, "log-level", "info", "log level: debug, info, warn or error")
		fs.StringVar(&sf.logFormat, "log-format", "text", "log format: text or json (logs go to stderr)")
		fs.DurationVar(&sf.shutdownTimeout, "shutdown-timeout", server.DefaultShutdownTimeout, "how long a graceful shutdown waits for requests in flight")
		fs.BoolVar(&sf.dashboard, "dashboard", true, "serve the web dashboard at /")
		fs.StringArrayVar(&sf.corsOrigins, "cors-origin", nil, "web origin (https://app.example.com, or *) whose pages may call the API from a browser (repeatable); other origins are refused")
		fs.StringArrayVar(&sf.allowedHosts, "allowed-host", nil, "extra Host name a server without tokens answers besides localhost, IP addresses and --addr's host (repeatable)")
		fs.BoolVar(&sf.metricsAuth, "metrics-auth", false, "require a token (any role) for /metrics")
		fs.IntVar(&sf.metricsMaxQueues, "metrics-max-queues", server.DefaultMetricsMaxQueues, `queues with series of their own in /metrics; the others are counted under queue="(other)"`)
		fs.IntVar(&sf.maxEventStreams, "max-event-streams", 0, "event streams (GET /v1/events) open at once on this server (0: 16 per CPU core, at least 32)")
		fs.VisitAll(func(f *pflag.Flag) {
			if env, ok := serverEnv[f.Name]; ok {
				f.Usage += " (env " + env + ")" // as the bridge's and the global flags say it
			}
		})
		// The bridge's flags carry their own NORN_KAFKA_* defaults.
		kafka.RegisterFlags(fs, &sf.kafka)
		cmd.SetFlagErrorFunc(flagUsageError)
		cmd.Args = usageArgs(cmd.Args)
		return cmd
	})
}

func runServer(cmd *cobra.Command, sf *serverFlags) error {
	log, err := newLogger(cmd.ErrOrStderr(), sf.logLevel, sf.logFormat)
	if err != nil {
		return err
	}
	tokens, err := sf.tokens()
	if err != nil {
		return err
	}
	ctx := cmd.Context()
	useKafka := len(sf.kafka.Brokers) > 0
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	if useKafka {
		sf.kafka.Logger, sf.kafka.Registerer = log, reg
		if err := sf.kafka.Validate(); err != nil {
			return usagef("%v", err)
		}
	}
	tp, stopTracing, err := startTracing(ctx, "norn-server", log)
	if err != nil {
		return usagef("%v", err)
	}
	defer stopTracing()
	obs, err := server.NewStoreObserver(reg)
	if err != nil {
		return err
	}
	st, err := storeopen.Open(ctx, sf.store, storeopen.Options{
		Durability: sf.durability, MinFreeBytes: sf.minFree, HistoryLimit: sf.historyLimit, Logger: log,
		Schema: sf.schema, Migrate: sf.migrate, Observer: obs,
	})
	if err != nil {
		if norn.CodeOf(err) == norn.CodeInvalidArgument {
			return usagef("--store: %v", err)
		}
		return err
	}
	defer func() {
		if err := st.Close(); err != nil {
			log.Error("closing the store", slog.Any("err", err))
		}
	}()
	cfg := server.Config{
		Addr: sf.addr, Store: st, Tokens: tokens, AllowUnauthenticatedNonLoopback: sf.allowUnauth,
		TLSCert: sf.tlsCert, TLSKey: sf.tlsKey, MaxBodyBytes: sf.maxBody, MaxSpecBytes: sf.maxSpec,
		MaxBatch: sf.maxBatch, MaxLabels: sf.maxLabels, ShutdownTimeout: sf.shutdownTimeout, Logger: log,
		Registry: reg, CORSOrigins: sf.corsOrigins, AllowedHosts: sf.allowedHosts, MetricsAuth: sf.metricsAuth,
		MetricsMaxQueues: sf.metricsMaxQueues, MaxEventStreams: sf.maxEventStreams,
		TracerProvider: tp.TracerProvider(),
	}
	if sf.dashboard {
		cfg.Dashboard = dashboard.Handler()
	}
	var bridge *kafka.Bridge
	if useKafka {
		if bridge, err = kafka.New(sf.kafka, st); err != nil {
			return usagef("%v", err)
		}
		defer bridge.Close()
		cfg.HealthCheck = bridge.Healthy
		cfg.ReadyCheck = bridge.Healthy
	}
	srv, err := server.New(cfg)
	if err != nil {
		var ne *norn.Error
		if errors.As(err, &ne) && ne.Code == norn.CodeInvalidArgument {
			return usagef("%v", serverConfigError(ne, sf.addr))
		}
		return err
	}
	fmt.Fprintf(cmd.OutOrStdout(), "norn: listening on %s (store %s)\n", srv.URL(), redactURL(sf.store))
	if bridge == nil {
		return srv.Run(ctx)
	}
	// The bridge and the API share one lifetime: when either stops, both do.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	bridgeDone := make(chan error, 1)
	go func() {
		err := bridge.Run(ctx)
		cancel()
		bridgeDone <- err
	}()
	fmt.Fprintf(cmd.OutOrStdout(), "norn: kafka delay bridge %s -> %s (brokers %s)\n", sf.kafka.InTopic, sf.kafka.OutTopic, strings.Join(sf.kafka.Brokers, ","))
	runErr := srv.Run(ctx)
	cancel()
	if err := <-bridgeDone; err != nil && runErr == nil && !errors.Is(err, context.Canceled) {
		runErr = fmt.Errorf("kafka bridge: %w", err)
	}
	return runErr
}

// tokens are the tokens of --tokens-file and --auth-token.
func (sf *serverFlags) tokens() ([]server.Token, error) {
	var tokens []server.Token
	if sf.tokensFile != "" {
		var err error
		if tokens, err = server.LoadTokens(sf.tokensFile); err != nil {
			return nil, usagef("--tokens-file: %v", err)
		}
	}
	for _, s := range sf.authTokens {
		t, err := parseAuthToken(s)
		if err != nil {
			return nil, usagef("--auth-token: %v", err)
		}
		tokens = append(tokens, t)
	}
	return tokens, nil
}

// redactURL hides the password of a postgres:// store URL before it is printed.
func redactURL(spec string) string {
	u, err := url.Parse(spec)
	if err != nil || u.User == nil {
		return spec
	}
	if _, has := u.User.Password(); has {
		u.User = url.UserPassword(u.User.Username(), "xxxxx")
	}
	return u.String()
}

// serverConfigError renames server.Config fields to the flags that set them.
func serverConfigError(ne *norn.Error, addr string) error {
	flags := map[string]string{
		"Addr": "--addr", "TLSCert": "--tls-cert", "TLSKey": "--tls-key", "MaxBodyBytes": "--max-body-bytes",
		"MaxSpecBytes": "--max-spec-bytes", "MaxBatch": "--max-batch", "MaxLabels": "--max-labels",
		"ShutdownTimeout": "--shutdown-timeout",
	}
	if strings.HasPrefix(ne.Field, "CORSOrigins[") {
		flags[ne.Field] = "--cors-origin"
	}
	c := *ne
	if f, ok := flags[ne.Field]; ok {
		c.Field = f
		if f == "--addr" && strings.Contains(ne.Message, "AllowUnauthenticatedNonLoopback") {
			c.Message = fmt.Sprintf("no tokens are configured, so authentication is off and %q is not a loopback address; give --tokens-file or --auth-token, or --allow-unauthenticated", addr)
		}
	} else if strings.HasPrefix(ne.Field, "Tokens[") {
		c.Field = "tokens (" + ne.Field + ")"
	}
	return &c
}
