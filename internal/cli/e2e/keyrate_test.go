package e2e

import (
	"testing"
)

// TestQueueKeyRates: queues set --key-rate-limit, --key-burst and
// --key-rate, what queues get shows, that editing a key's limit keeps its
// own rate, removal, and the refusals, against a real server process
// through the OpenAPI-checking proxy.
func TestQueueKeyRates(t *testing.T) {
	t.Parallel()
	s := startServer(t, t.TempDir())
	type rate struct {
		PerSecond float64 `json:"per_second"`
		Burst     int
	}
	type keyRated struct {
		KeyRateLimit rate `json:"key_rate_limit"`
		Keys         []struct {
			Key       string
			Limit     int
			RateLimit rate `json:"rate_limit"`
		}
	}
	q := decode[keyRated](t, s.ok(t, "queues", "set", "hooks", "--key-rate-limit", "30/m", "--key-burst", "4",
		"--key-rate", "acme=50/s:100", "-o", "json"))
	if q.KeyRateLimit != (rate{0.5, 4}) || len(q.Keys) != 1 || q.Keys[0].Key != "acme" || q.Keys[0].RateLimit != (rate{50, 100}) {
		t.Fatalf("queues set --key-rate-limit 30/m --key-burst 4 --key-rate acme=50/s:100: %+v", q)
	}
	q = decode[keyRated](t, s.ok(t, "queues", "set", "hooks", "--key", "acme=2", "-o", "json"))
	if len(q.Keys) != 1 || q.Keys[0].Limit != 2 || q.Keys[0].RateLimit != (rate{50, 100}) {
		t.Fatalf("queues set --key acme=2 after --key-rate: %+v (the key's own rate must stay)", q)
	}
	mustContain(t, "queue get with key rates", s.ok(t, "queues", "get", "hooks"),
		"key_rate_limit:", "0.5/s, burst 4", "key acme:", "limit 2, rate 50/s, burst 100")

	s.fails(t, 2, "--key-burst needs --key-rate-limit", "queues", "set", "hooks", "--key-burst", "3")
	s.fails(t, 2, "want KEY=RATE[:BURST]", "queues", "set", "hooks", "--key-rate", "acme")
	s.fails(t, 2, "want a rate like", "queues", "set", "hooks", "--key-rate-limit", "fast")
	s.fails(t, 1, "key rate limits", "queues", "set", "hooks", "--fair-by", "label:tenant")

	q = decode[keyRated](t, s.ok(t, "queues", "set", "hooks", "--key-rate-limit", "off", "--key-rate", "acme=off", "-o", "json"))
	if q.KeyRateLimit != (rate{}) || len(q.Keys) != 1 || q.Keys[0].Limit != 2 || q.Keys[0].RateLimit != (rate{}) {
		t.Fatalf("queues set --key-rate-limit off --key-rate acme=off: %+v", q)
	}
	mustContain(t, "key rates removed", s.ok(t, "queues", "get", "hooks"), "key_rate_limit:", "none")
}
