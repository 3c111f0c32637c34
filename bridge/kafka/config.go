// Package kafka is Norn's Kafka delay bridge, after Kindred's Chronos: a
// Kafka topic that adds a delay to every message. It consumes an input topic
// as a consumer group, keeps every message whose deadline lies in the future
// as a delayed task in a norn.Store, and publishes it on the output topic when
// the deadline arrives — at least once, never lost, even when a bridge node
// dies while holding messages.
package kafka

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/nornq/norn"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/pflag"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"
)

// Defaults of Config.
const (
	DefaultGroup                    = "norn-delay"
	DefaultClientID                 = "norn-delay"
	DefaultQueue                    = "norn.kafka-delay"
	DefaultClaimAhead               = 500 * time.Millisecond
	DefaultHoldTime                 = 5 * time.Second
	DefaultPollInterval             = 100 * time.Millisecond
	DefaultFailureDetectionInterval = 500 * time.Millisecond
	DefaultClaimBatch               = 500
	DefaultFireConcurrency          = 4
	DefaultMaxPollRecords           = 1000
)

// Config configures a Bridge. Zero values mean the documented default.
type Config struct {
	// Brokers are the seed brokers, host:port (required; flag --kafka-brokers,
	// env NORN_KAFKA_BROKERS, comma-separated).
	Brokers []string
	// InTopic is the topic applications publish delayed messages on (required).
	InTopic string
	// OutTopic is where messages are published when due (required).
	OutTopic string
	// Group is the consumer group of the input topic; every bridge node of
	// one deployment uses the same group. Default "norn-delay".
	Group string
	// ClientID is the Kafka client id. Default "norn-delay".
	ClientID string
	// Queue is the norn queue holding the delayed messages, at most
	// MaxQueueLength characters. Default "norn.kafka-delay". It is the
	// bridge's namespace: the ids of its tasks start with "<Queue>~", it
	// never reads, changes or deletes a task of another queue or with another
	// id, and tasks that something else submits to this queue are aborted.
	Queue string
	// TimingAdvance fires messages this much before their deadline to make
	// up for the bridge's own publishing latency; a message whose deadline
	// is within it when consumed is published at once. Zero (the default)
	// makes it adaptive: the 10th percentile of the bridge's last 256 publish latencies
	// (Produce call to broker acknowledgement), at most ClaimAhead/2. A
	// positive value forces that fixed advance (1ns fires at the deadline).
	TimingAdvance time.Duration
	// ClaimAhead is how long before its firing time (deadline − timing
	// advance) a message is claimed from the store; the node holds it and
	// publishes it at the firing time, so the store's latency and jitter do
	// not delay it. At most HoldTime/2. Default 500ms, or HoldTime/4 when
	// that is shorter.
	ClaimAhead time.Duration
	// HoldTime is the lease a node takes on a due message: if the node has
	// not published and deleted it by then, another node takes it over.
	// Default 5s.
	HoldTime time.Duration
	// PollInterval bounds how long one claim waits for due messages before
	// asking the store again (claims long-poll, so due messages are usually
	// picked up as soon as they become ready), and is the first back-off
	// after a store error. Default 100ms.
	PollInterval time.Duration
	// FailureDetectionInterval is how often the bridge asks the store to run
	// its monitor (Store.Sweep), which hands messages whose hold time expired
	// to the next claim. Stores also run their monitor by themselves; this
	// bounds the take-over delay to HoldTime + this interval whatever the
	// store's own cadence. Default 500ms; negative disables the extra sweeps.
	FailureDetectionInterval time.Duration
	// ClaimBatch is how many due messages one claim takes at most. Default 500.
	ClaimBatch int
	// FireConcurrency is how many claimed batches may be completed and
	// deleted at once; ClaimBatch × FireConcurrency bounds how many
	// messages a node holds (claimed, not yet finished). Default 4.
	FireConcurrency int
	// MaxPollRecords caps how many input records one store batch holds.
	// Default 1000.
	MaxPollRecords int
	// SASL authenticates to the brokers; the zero value disables it.
	SASL SASLConfig
	// TLS is used to dial brokers when non-nil; it takes precedence over TLSFiles.
	TLS *tls.Config
	// TLSFiles builds the TLS configuration from PEM files when Enabled.
	TLSFiles TLSFiles
	// Logger receives the bridge's logs. Default slog.Default().
	Logger *slog.Logger
	// Registerer receives the bridge's metrics; nil registers none (they
	// are still counted and readable with Bridge.Stats).
	Registerer prometheus.Registerer

	// envErr records a malformed NORN_KAFKA_* environment value seen by
	// RegisterFlags, reported by Validate so it is not silently ignored.
	envErr error
	// extraOpts are added to the bridge's franz-go options (a test seam:
	// the fault test shortens the group session so a killed node's
	// partitions move after Kafka's minimum of 6 s, not the default 45 s).
	extraOpts []kgo.Opt
}

// SASLConfig selects a SASL mechanism.
type SASLConfig struct {
	// Mechanism is "" (none), "PLAIN", "SCRAM-SHA-256" or "SCRAM-SHA-512".
	Mechanism string
	// Username and Password are the credentials.
	Username string
	Password string
}

// TLSFiles locates PEM files for TLS.
type TLSFiles struct {
	// Enabled turns TLS on (system roots unless CAFile is set).
	Enabled bool
	// CAFile is a PEM bundle of CAs to trust instead of the system roots.
	CAFile string
	// CertFile and KeyFile are a client certificate for mutual TLS.
	CertFile string
	KeyFile  string
	// ServerName overrides the name verified in the brokers' certificates.
	ServerName string
}

// withDefaults returns c with zero values replaced by defaults.
func (c Config) withDefaults() Config {
	if c.Group == "" {
		c.Group = DefaultGroup
	}
	if c.ClientID == "" {
		c.ClientID = DefaultClientID
	}
	if c.Queue == "" {
		c.Queue = DefaultQueue
	}
	if c.HoldTime == 0 {
		c.HoldTime = DefaultHoldTime
	}
	if c.ClaimAhead == 0 {
		c.ClaimAhead = min(DefaultClaimAhead, c.HoldTime/4)
	}
	if c.PollInterval == 0 {
		c.PollInterval = DefaultPollInterval
	}
	if c.FailureDetectionInterval == 0 {
		c.FailureDetectionInterval = DefaultFailureDetectionInterval
	}
	if c.ClaimBatch == 0 {
		c.ClaimBatch = DefaultClaimBatch
	}
	if c.FireConcurrency == 0 {
		c.FireConcurrency = DefaultFireConcurrency
	}
	if c.MaxPollRecords == 0 {
		c.MaxPollRecords = DefaultMaxPollRecords
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// Validate checks the configuration (after defaults); errors are
// invalid_argument naming the field.
func (c Config) Validate() error {
	if c.envErr != nil {
		return c.envErr
	}
	c = c.withDefaults()
	if len(c.Brokers) == 0 {
		return norn.Invalid("Brokers", "at least one broker (host:port) is required")
	}
	for i, b := range c.Brokers {
		if strings.TrimSpace(b) == "" {
			return norn.Invalid(fmt.Sprintf("Brokers[%d]", i), "broker address is empty")
		}
	}
	if c.InTopic == "" {
		return norn.Invalid("InTopic", "input topic is required")
	}
	if c.OutTopic == "" {
		return norn.Invalid("OutTopic", "output topic is required")
	}
	if c.InTopic == c.OutTopic {
		return norn.Invalid("OutTopic", "output topic must differ from the input topic (messages would loop)")
	}
	if err := norn.ValidateQueue("Queue", c.Queue); err != nil {
		return err
	}
	if len(c.Queue) > MaxQueueLength {
		return norn.Invalid("Queue", "queue name is longer than %d characters (it starts the id of every task of the bridge)", MaxQueueLength)
	}
	if c.TimingAdvance < 0 {
		return norn.Invalid("TimingAdvance", "must not be negative")
	}
	if c.HoldTime < 0 {
		return norn.Invalid("HoldTime", "must be positive")
	}
	if c.ClaimAhead < 0 || c.ClaimAhead > c.HoldTime/2 {
		return norn.Invalid("ClaimAhead", "must be between 0 and half the hold time (%s): held messages must be published well within their hold", c.HoldTime/2)
	}
	if c.PollInterval < 0 {
		return norn.Invalid("PollInterval", "must be positive")
	}
	if c.ClaimBatch < 0 || c.ClaimBatch > norn.MaxClaim {
		return norn.Invalid("ClaimBatch", "must be between 1 and %d", norn.MaxClaim)
	}
	if c.FireConcurrency < 0 {
		return norn.Invalid("FireConcurrency", "must be positive")
	}
	if c.MaxPollRecords < 0 || c.MaxPollRecords > norn.MaxBatch {
		return norn.Invalid("MaxPollRecords", "must be between 1 and %d", norn.MaxBatch)
	}
	if _, err := c.SASL.mechanism(); err != nil {
		return err
	}
	return nil
}

func (s SASLConfig) mechanism() (sasl.Mechanism, error) {
	switch strings.ToUpper(s.Mechanism) {
	case "":
		return nil, nil
	case "PLAIN":
		return plain.Auth{User: s.Username, Pass: s.Password}.AsMechanism(), nil
	case "SCRAM-SHA-256":
		return scram.Auth{User: s.Username, Pass: s.Password}.AsSha256Mechanism(), nil
	case "SCRAM-SHA-512":
		return scram.Auth{User: s.Username, Pass: s.Password}.AsSha512Mechanism(), nil
	}
	return nil, norn.Invalid("SASL.Mechanism", "unknown SASL mechanism %q (want PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512)", s.Mechanism)
}

// tlsConfig returns the TLS configuration to dial with, or nil for plaintext.
func (c Config) tlsConfig() (*tls.Config, error) {
	if c.TLS != nil {
		return c.TLS, nil
	}
	f := c.TLSFiles
	if !f.Enabled && f.CAFile == "" && f.CertFile == "" {
		return nil, nil
	}
	tc := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: f.ServerName}
	if f.CAFile != "" {
		pem, err := os.ReadFile(f.CAFile)
		if err != nil {
			return nil, &norn.Error{Code: norn.CodeInvalidArgument, Field: "TLSFiles.CAFile", Message: "cannot read CA file", Err: err}
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, norn.Invalid("TLSFiles.CAFile", "no PEM certificates found in %s", f.CAFile)
		}
		tc.RootCAs = pool
	}
	if f.CertFile != "" || f.KeyFile != "" {
		cert, err := tls.LoadX509KeyPair(f.CertFile, f.KeyFile)
		if err != nil {
			return nil, &norn.Error{Code: norn.CodeInvalidArgument, Field: "TLSFiles.CertFile", Message: "cannot load client certificate", Err: err}
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	return tc, nil
}

// ClientOptions are the franz-go options the bridge dials its cluster with
// (brokers, client id, SASL, TLS, logging), for tools that talk to the same
// cluster as a bridge, such as `norn bench kafka`.
func (c Config) ClientOptions() ([]kgo.Opt, error) {
	c = c.withDefaults()
	opts := []kgo.Opt{
		kgo.SeedBrokers(c.Brokers...),
		kgo.ClientID(c.ClientID),
		kgo.WithLogger(slogAdapter{c.Logger}),
	}
	mech, err := c.SASL.mechanism()
	if err != nil {
		return nil, err
	}
	if mech != nil {
		opts = append(opts, kgo.SASL(mech))
	}
	tc, err := c.tlsConfig()
	if err != nil {
		return nil, err
	}
	if tc != nil {
		opts = append(opts, kgo.DialTLSConfig(tc))
	}
	return opts, nil
}

// RegisterFlags binds the bridge settings to fs, with defaults taken from
// NORN_KAFKA_* environment variables, so `norn delay` and `norn server` share
// one set of flags. A malformed environment value is reported by Validate.
func RegisterFlags(fs *pflag.FlagSet, cfg *Config) {
	var errs []string
	envDur := func(key string, def time.Duration) time.Duration {
		v, ok := os.LookupEnv(key)
		if !ok || v == "" {
			return def
		}
		d, err := time.ParseDuration(v)
		if err != nil {
			errs = append(errs, fmt.Sprintf("%s=%q is not a duration", key, v))
			return def
		}
		return d
	}
	envStr := func(key, def string) string {
		if v, ok := os.LookupEnv(key); ok && v != "" {
			return v
		}
		return def
	}
	var brokers []string
	if v := envStr("NORN_KAFKA_BROKERS", ""); v != "" {
		for _, b := range strings.Split(v, ",") {
			if b = strings.TrimSpace(b); b != "" {
				brokers = append(brokers, b)
			}
		}
	}
	fs.StringSliceVar(&cfg.Brokers, "kafka-brokers", brokers, "Kafka seed brokers host:port[,...] (env NORN_KAFKA_BROKERS)")
	fs.StringVar(&cfg.InTopic, "in-topic", envStr("NORN_KAFKA_IN_TOPIC", ""), "input topic of delayed messages (env NORN_KAFKA_IN_TOPIC)")
	fs.StringVar(&cfg.OutTopic, "out-topic", envStr("NORN_KAFKA_OUT_TOPIC", ""), "output topic for due messages (env NORN_KAFKA_OUT_TOPIC)")
	fs.StringVar(&cfg.Group, "group", envStr("NORN_KAFKA_GROUP", DefaultGroup), "consumer group of the input topic (env NORN_KAFKA_GROUP)")
	fs.StringVar(&cfg.ClientID, "kafka-client-id", envStr("NORN_KAFKA_CLIENT_ID", DefaultClientID), "Kafka client id (env NORN_KAFKA_CLIENT_ID)")
	fs.StringVar(&cfg.Queue, "kafka-queue", envStr("NORN_KAFKA_QUEUE", DefaultQueue), "norn queue holding delayed messages (env NORN_KAFKA_QUEUE)")
	fs.DurationVar(&cfg.TimingAdvance, "kafka-timing-advance", envDur("NORN_KAFKA_TIMING_ADVANCE", 0), "fire this much before the deadline; 0 = adaptive, the measured publish latency (env NORN_KAFKA_TIMING_ADVANCE)")
	fs.DurationVar(&cfg.ClaimAhead, "kafka-claim-ahead", envDur("NORN_KAFKA_CLAIM_AHEAD", 0), "claim messages this long before their firing time and hold them; 0 = 500ms or hold-time/4 (env NORN_KAFKA_CLAIM_AHEAD)")
	fs.DurationVar(&cfg.HoldTime, "kafka-hold-time", envDur("NORN_KAFKA_HOLD_TIME", DefaultHoldTime), "lease on a due message before another node may take it over (env NORN_KAFKA_HOLD_TIME)")
	fs.DurationVar(&cfg.PollInterval, "kafka-poll-interval", envDur("NORN_KAFKA_POLL_INTERVAL", DefaultPollInterval), "longest wait of one claim for due messages (env NORN_KAFKA_POLL_INTERVAL)")
	fs.DurationVar(&cfg.FailureDetectionInterval, "kafka-failure-detection-interval", envDur("NORN_KAFKA_FAILURE_DETECTION_INTERVAL", DefaultFailureDetectionInterval), "how often to sweep for expired holds; negative disables (env NORN_KAFKA_FAILURE_DETECTION_INTERVAL)")
	fs.StringVar(&cfg.SASL.Mechanism, "kafka-sasl-mechanism", envStr("NORN_KAFKA_SASL_MECHANISM", ""), "SASL mechanism: PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512 (env NORN_KAFKA_SASL_MECHANISM)")
	fs.StringVar(&cfg.SASL.Username, "kafka-sasl-user", envStr("NORN_KAFKA_SASL_USER", ""), "SASL user name (env NORN_KAFKA_SASL_USER)")
	// The password has no flag: command lines are visible to every local user.
	cfg.SASL.Password = os.Getenv("NORN_KAFKA_SASL_PASSWORD")
	fs.BoolVar(&cfg.TLSFiles.Enabled, "kafka-tls", envStr("NORN_KAFKA_TLS", "") == "true" || envStr("NORN_KAFKA_TLS", "") == "1", "dial brokers with TLS (env NORN_KAFKA_TLS=true)")
	fs.StringVar(&cfg.TLSFiles.CAFile, "kafka-tls-ca", envStr("NORN_KAFKA_TLS_CA", ""), "PEM file of CAs to trust (env NORN_KAFKA_TLS_CA)")
	fs.StringVar(&cfg.TLSFiles.CertFile, "kafka-tls-cert", envStr("NORN_KAFKA_TLS_CERT", ""), "PEM client certificate for mutual TLS (env NORN_KAFKA_TLS_CERT)")
	fs.StringVar(&cfg.TLSFiles.KeyFile, "kafka-tls-key", envStr("NORN_KAFKA_TLS_KEY", ""), "PEM client key for mutual TLS (env NORN_KAFKA_TLS_KEY)")
	fs.StringVar(&cfg.TLSFiles.ServerName, "kafka-tls-server-name", envStr("NORN_KAFKA_TLS_SERVER_NAME", ""), "name to verify in broker certificates (env NORN_KAFKA_TLS_SERVER_NAME)")
	if len(errs) > 0 {
		cfg.envErr = norn.Invalid("env", "%s", strings.Join(errs, "; "))
	}
}

// slogAdapter routes franz-go's logs to slog; franz-go's info level is
// chatty (every connection), so only warnings and errors pass.
type slogAdapter struct{ l *slog.Logger }

func (a slogAdapter) Level() kgo.LogLevel { return kgo.LogLevelWarn }

func (a slogAdapter) Log(level kgo.LogLevel, msg string, keyvals ...any) {
	lv := slog.LevelDebug
	switch level {
	case kgo.LogLevelError:
		lv = slog.LevelError
	case kgo.LogLevelWarn:
		lv = slog.LevelWarn
	case kgo.LogLevelInfo:
		lv = slog.LevelInfo
	}
	a.l.Log(context.Background(), lv, "kafka: "+msg, keyvals...)
}
