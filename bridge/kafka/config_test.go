package kafka

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nornq/norn"
	"github.com/spf13/pflag"
)

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	ok := Config{Brokers: []string{"k:9092"}, InTopic: "in", OutTopic: "out"}
	tests := []struct {
		name  string
		mod   func(*Config)
		field string // "" = valid
	}{
		{"minimal", func(*Config) {}, ""},
		{"no brokers", func(c *Config) { c.Brokers = nil }, "Brokers"},
		{"empty broker", func(c *Config) { c.Brokers = []string{"k:1", " "} }, "Brokers[1]"},
		{"no in topic", func(c *Config) { c.InTopic = "" }, "InTopic"},
		{"no out topic", func(c *Config) { c.OutTopic = "" }, "OutTopic"},
		{"same topics", func(c *Config) { c.OutTopic = "in" }, "OutTopic"},
		{"bad queue", func(c *Config) { c.Queue = "a queue" }, "Queue"},
		{"negative advance", func(c *Config) { c.TimingAdvance = -time.Second }, "TimingAdvance"},
		{"negative hold", func(c *Config) { c.HoldTime = -time.Second }, "HoldTime"},
		{"negative claim-ahead", func(c *Config) { c.ClaimAhead = -time.Second }, "ClaimAhead"},
		{"claim-ahead over half the hold", func(c *Config) { c.HoldTime, c.ClaimAhead = time.Second, 501*time.Millisecond }, "ClaimAhead"},
		{"claim-ahead half the hold", func(c *Config) { c.HoldTime, c.ClaimAhead = time.Second, 500*time.Millisecond }, ""},
		{"short hold, default claim-ahead", func(c *Config) { c.HoldTime = 100 * time.Millisecond }, ""},
		{"queue too long for ids", func(c *Config) { c.Queue = strings.Repeat("q", MaxQueueLength+1) }, "Queue"},
		{"longest queue", func(c *Config) { c.Queue = strings.Repeat("q", MaxQueueLength) }, ""},
		{"negative poll", func(c *Config) { c.PollInterval = -time.Second }, "PollInterval"},
		{"detection disabled", func(c *Config) { c.FailureDetectionInterval = -1 }, ""},
		{"claim batch too big", func(c *Config) { c.ClaimBatch = norn.MaxClaim + 1 }, "ClaimBatch"},
		{"poll records too big", func(c *Config) { c.MaxPollRecords = norn.MaxBatch + 1 }, "MaxPollRecords"},
		{"sasl plain", func(c *Config) { c.SASL = SASLConfig{Mechanism: "plain", Username: "u", Password: "p"} }, ""},
		{"sasl scram", func(c *Config) { c.SASL = SASLConfig{Mechanism: "SCRAM-SHA-512"} }, ""},
		{"sasl unknown", func(c *Config) { c.SASL = SASLConfig{Mechanism: "GSSAPI"} }, "SASL.Mechanism"},
	}
	for _, tt := range tests {
		c := ok
		tt.mod(&c)
		err := c.Validate()
		if tt.field == "" {
			if err != nil {
				t.Errorf("%s: %v", tt.name, err)
			}
			continue
		}
		var ne *norn.Error
		if !errors.As(err, &ne) || ne.Code != norn.CodeInvalidArgument || ne.Field != tt.field {
			t.Errorf("%s: err = %v, want invalid_argument on %s", tt.name, err, tt.field)
		}
	}
	d := ok.withDefaults()
	if d.Group != DefaultGroup || d.Queue != DefaultQueue || d.TimingAdvance != 0 || d.ClaimAhead != 500*time.Millisecond ||
		d.HoldTime != 5*time.Second || d.PollInterval != 100*time.Millisecond || d.FailureDetectionInterval != 500*time.Millisecond {
		t.Errorf("defaults %+v", d)
	}
	if d := (Config{HoldTime: time.Second}).withDefaults(); d.ClaimAhead != 250*time.Millisecond {
		t.Errorf("claim-ahead with a 1s hold = %s, want a quarter of it", d.ClaimAhead)
	}
	if _, err := (Config{Brokers: []string{"k:1"}, InTopic: "a", OutTopic: "b", TLSFiles: TLSFiles{CAFile: "/nonexistent"}}).ClientOptions(); err == nil {
		t.Errorf("a missing CA file was accepted")
	}
}

func TestRegisterFlags(t *testing.T) {
	t.Setenv("NORN_KAFKA_BROKERS", "a:1, b:2")
	t.Setenv("NORN_KAFKA_HOLD_TIME", "7s")
	t.Setenv("NORN_KAFKA_SASL_PASSWORD", "secret")
	var cfg Config
	fs := pflag.NewFlagSet("x", pflag.ContinueOnError)
	RegisterFlags(fs, &cfg)
	if err := fs.Parse([]string{"--in-topic", "i", "--out-topic", "o", "--kafka-timing-advance", "10ms"}); err != nil {
		t.Fatal(err)
	}
	if strings.Join(cfg.Brokers, ",") != "a:1,b:2" || cfg.HoldTime != 7*time.Second || cfg.TimingAdvance != 10*time.Millisecond ||
		cfg.InTopic != "i" || cfg.Group != DefaultGroup || cfg.SASL.Password != "secret" {
		t.Errorf("cfg %+v", cfg)
	}
	if err := cfg.Validate(); err != nil {
		t.Errorf("Validate: %v", err)
	}

	t.Setenv("NORN_KAFKA_POLL_INTERVAL", "often")
	var bad Config
	RegisterFlags(pflag.NewFlagSet("y", pflag.ContinueOnError), &bad)
	bad.Brokers, bad.InTopic, bad.OutTopic = []string{"a:1"}, "i", "o"
	if err := bad.Validate(); err == nil || !strings.Contains(err.Error(), "NORN_KAFKA_POLL_INTERVAL") {
		t.Errorf("Validate with a malformed env value: %v", err)
	}
}
