package cli

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/nornq/norn/bridge/kafka"
	"github.com/nornq/norn/internal/storeopen"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/cobra"
)

// delayFlags are the settings of `norn delay` besides the bridge's own.
type delayFlags struct {
	store, durability   string
	metricsAddr         string
	logLevel, logFormat string
}

func init() {
	register(func(g *Globals) *cobra.Command {
		df := &delayFlags{}
		var cfg kafka.Config
		cmd := &cobra.Command{
			Use:   "delay",
			Short: "Run the Kafka delay bridge: a topic that delays every message until its chronosDeadline",
			Long: `Run the Kafka delay bridge (Chronos). It consumes --in-topic as consumer
group --group; every message must carry the headers chronosMessageId and
chronosDeadline (RFC 3339; no zone means UTC). Each message is published on
--out-topic, with its key, value and other headers, when its deadline comes
(--kafka-timing-advance early). Messages missing or malforming a header are
logged and skipped.

Run any number of nodes on one shared store (a Postgres store, or one
embedded store per node for a single node) with the same group: they split
the input partitions, and a node that dies holding due messages is taken
over after --kafka-hold-time. Delivery is at least once.

Every flag can also be set with the environment variable shown in brackets.
The SASL password is read from NORN_KAFKA_SASL_PASSWORD only.`,
			Example: `  norn delay --store embedded:./norn-delay --kafka-brokers localhost:9092 --in-topic delay-in --out-topic delay-out
  NORN_KAFKA_BROKERS=k1:9092,k2:9092 norn delay --store postgres://norn@db/norn --in-topic in --out-topic out --metrics-addr :9464`,
			Args: usageArgs(cobra.NoArgs),
			RunE: func(cmd *cobra.Command, args []string) error {
				return runDelay(cmd, df, cfg)
			},
		}
		f := cmd.Flags()
		f.StringVar(&df.store, "store", envOr("NORN_STORE", storeopen.DefaultSpec), "store spec, e.g. embedded:./norn-data (env NORN_STORE)")
		f.StringVar(&df.durability, "durability", envOr("NORN_DURABILITY", "strict"), "embedded store durability: strict or opportunistic (env NORN_DURABILITY)")
		f.StringVar(&df.metricsAddr, "metrics-addr", envOr("NORN_METRICS_ADDR", ""), "serve /metrics and /healthz on this address, e.g. :9464 (env NORN_METRICS_ADDR; default off)")
		f.StringVar(&df.logLevel, "log-level", envOr("NORN_LOG_LEVEL", "info"), "log level: debug, info, warn or error (env NORN_LOG_LEVEL)")
		f.StringVar(&df.logFormat, "log-format", envOr("NORN_LOG_FORMAT", "text"), "log format: text or json (env NORN_LOG_FORMAT)")
		kafka.RegisterFlags(f, &cfg)
		return cmd
	})
}

func runDelay(cmd *cobra.Command, df *delayFlags, cfg kafka.Config) error {
	log, err := newLogger(cmd.ErrOrStderr(), df.logLevel, df.logFormat)
	if err != nil {
		return err
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	cfg.Logger, cfg.Registerer = log, reg
	if err := cfg.Validate(); err != nil {
		return usagef("%v", err)
	}
	ctx := cmd.Context()
	st, err := storeopen.Open(ctx, df.store, storeopen.Options{Durability: df.durability, Logger: log})
	if err != nil {
		return fmt.Errorf("opening store: %w", err)
	}
	defer func() {
		if err := st.Close(); err != nil {
			log.Error("closing the store", "err", err)
		}
	}()
	b, err := kafka.New(cfg, st)
	if err != nil {
		return usagef("%v", err)
	}
	defer b.Close()

	if df.metricsAddr != "" {
		ln, err := net.Listen("tcp", df.metricsAddr)
		if err != nil {
			return fmt.Errorf("--metrics-addr: %w", err)
		}
		mux := http.NewServeMux()
		mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
		mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) {
			hctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
			defer cancel()
			if err := b.Healthy(hctx); err != nil {
				http.Error(w, err.Error(), http.StatusServiceUnavailable)
				return
			}
			_, _ = w.Write([]byte("ok\n"))
		})
		srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
		go func() {
			if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				log.Error("metrics listener failed", "err", err)
			}
		}()
		defer func() {
			sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = srv.Shutdown(sctx)
		}()
		fmt.Fprintf(cmd.OutOrStdout(), "norn: metrics on http://%s/metrics\n", ln.Addr())
	}
	return b.Run(ctx)
}
