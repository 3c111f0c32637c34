package e2e

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/nornq/norn/internal/await"
)

// TestServerRunsKafkaBridge runs `norn server --kafka-brokers …`: a message
// on the input topic comes out on the output topic after its deadline, and
// /healthz reports broker connectivity.
func TestServerRunsKafkaBridge(t *testing.T) {
	t.Parallel()
	kc, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "delay-in", "delay-out"))
	if err != nil {
		t.Fatal(err)
	}
	broker := kc.ListenAddrs()[0]
	s := startServer(t, t.TempDir(), "--kafka-brokers", broker, "--in-topic", "delay-in", "--out-topic", "delay-out")

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(broker), kgo.ConsumeTopics("delay-out"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	deadline := time.Now().Add(500 * time.Millisecond).UTC()
	rec := &kgo.Record{Topic: "delay-in", Key: []byte("k1"), Value: []byte{0, 1, 2, 0xff},
		Headers: []kgo.RecordHeader{
			{Key: "chronosMessageId", Value: []byte("m-1")},
			{Key: "chronosDeadline", Value: []byte(deadline.Format(time.RFC3339Nano))},
			{Key: "trace", Value: []byte("abc")},
		}}
	if err := cl.ProduceSync(ctx, rec).FirstErr(); err != nil {
		t.Fatal(err)
	}
	var got *kgo.Record
	for got == nil {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatalf("no message on the output topic: %v", err)
		}
		fs.EachRecord(func(r *kgo.Record) { got = r })
	}
	if time.Now().Before(deadline.Add(-100 * time.Millisecond)) {
		t.Errorf("message fired early: deadline %v", deadline)
	}
	if string(got.Key) != "k1" || string(got.Value) != string(rec.Value) {
		t.Errorf("key/value changed: %q %v", got.Key, got.Value)
	}
	for _, h := range got.Headers {
		if h.Key == "chronosMessageId" || h.Key == "chronosDeadline" {
			t.Errorf("chronos header %s was republished", h.Key)
		}
	}
	if len(got.Headers) != 1 || got.Headers[0].Key != "trace" || string(got.Headers[0].Value) != "abc" {
		t.Errorf("headers %v, want only trace=abc", got.Headers)
	}

	health := func() int {
		resp, err := http.Get(s.url + "/healthz")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := health(); code != http.StatusOK {
		t.Fatalf("/healthz = %d with Kafka up", code)
	}
	kc.Close()
	await.Check(t, 30*time.Second, "/healthz to answer 503 with Kafka down", func() (string, error) {
		if code := health(); code != http.StatusServiceUnavailable {
			return fmt.Sprintf("/healthz = %d", code), nil
		}
		return "", nil
	})
}
