package server

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nornq/norn"
	"github.com/nornq/norn/internal/wire"
)

// metricLine finds the sample line of name with all the given labels and
// returns its value text ("" if absent).
func metricLine(text, name string, labels ...string) string {
	for _, line := range strings.Split(text, "\n") {
		if !strings.HasPrefix(line, name+"{") && !strings.HasPrefix(line, name+" ") {
			continue
		}
		ok := true
		for _, l := range labels {
			if !strings.Contains(line, l) {
				ok = false
				break
			}
		}
		if ok {
			return line[strings.LastIndexByte(line, ' ')+1:]
		}
	}
	return ""
}

func TestMetrics(t *testing.T) {
	t.Parallel()
	e := startServer(t, nil)
	e.must(201, "POST", "/v1/tasks", `{"id":"m1","queue":"m"}`)
	e.must(201, "POST", "/v1/tasks", `{"id":"m2","queue":"m","retry":{"max_retries":1,"base":"1h"}}`)
	e.must(201, "POST", "/v1/tasks", `{"id":"m3","queue":"m","priority":0}`)
	t1 := e.claimOne("m", "w")
	e.must(200, "POST", "/v1/tasks/"+t1.ID+"/complete", `{"worker":"w","lease":`+itoa(t1.Lease)+`}`)
	t2 := e.claimOne("m", "w")
	e.must(200, "POST", "/v1/tasks/"+t2.ID+"/fail", `{"worker":"w","lease":`+itoa(t2.Lease)+`,"error":{"code":"x"}}`)
	e.must(201, "POST", "/v1/tasks", `{"id":"s1","queue":"s"}`)
	t3 := e.claimOne("s", "w")
	e.must(200, "POST", "/v1/tasks/"+t3.ID+"/snooze", `{"worker":"w","lease":`+itoa(t3.Lease)+`,"delay":"1h"}`)
	// A lease of 1 ms expires at once; the store's monitor times it out.
	var tr wire.TasksResponse
	e.must(200, "POST", "/v1/claim", `{"worker":"w","queues":["m"],"timeout":"1ms"}`).decode(t, &tr)
	if len(tr.Tasks) != 1 {
		t.Fatalf("claimed %d", len(tr.Tasks))
	}

	scrape := func() string { return string(e.must(200, "GET", "/metrics", "").body) }
	var text string
	waitFor(t, func() bool {
		text = scrape()
		return metricLine(text, "norn_tasks_timed_out_total", `queue="m"`) == "1"
	})
	want := []struct {
		name   string
		labels []string
		value  string
	}{
		{"norn_tasks_submitted_total", []string{`queue="m"`}, "3"},
		{"norn_tasks_claimed_total", []string{`queue="m"`}, "3"},
		{"norn_tasks_completed_total", []string{`queue="m"`}, "1"},
		{"norn_tasks_failed_total", []string{`queue="m"`}, "1"},
		{"norn_tasks_retried_total", []string{`queue="m"`}, "1"},
		{"norn_tasks_timed_out_total", []string{`queue="m"`}, "1"},
		{"norn_tasks_snoozed_total", []string{`queue="s"`}, "1"},
		{"norn_claim_latency_seconds_count", []string{`queue="m"`}, "3"},
		{"norn_end_to_end_latency_seconds_count", []string{`queue="m"`}, "1"},
		{"norn_tasks", []string{`queue="m"`, `status="completed"`}, "1"},
		{"norn_tasks", []string{`queue="m"`, `status="scheduled"`}, "1"},
		{"norn_store_up", nil, "1"},
		{"norn_http_requests_total", []string{`method="POST"`, `route="/v1/tasks"`, `code="201"`}, "4"},
		{"norn_http_request_duration_seconds_count", []string{`method="POST"`, `route="/v1/tasks/{id}/complete"`}, "1"},
	}
	for _, w := range want {
		if got := metricLine(text, w.name, w.labels...); got != w.value {
			t.Errorf("%s%v = %q, want %s", w.name, w.labels, got, w.value)
		}
	}
	if strings.Contains(text, `route="/v1/tasks/m1`) {
		t.Error("raw paths leak into route labels")
	}
}

// TestMetricsFlow: the tasks flow limits keep from claims, by queue and
// reason, and the running tasks of limited queues.
func TestMetricsFlow(t *testing.T) {
	t.Parallel()
	e := startServer(t, nil)
	e.must(200, "PATCH", "/v1/queues/r", `{"rate_limit":{"per_second":0.001,"burst":1}}`)
	e.must(200, "PATCH", "/v1/queues/k", `{"max_running":1}`)
	for _, q := range []string{"r", "r", "r", "k", "k", "free"} {
		e.must(201, "POST", "/v1/tasks", `{"queue":"`+q+`"}`)
	}
	var tr wire.TasksResponse
	e.must(200, "POST", "/v1/claim", `{"worker":"w","queues":["r","k","free"],"n":10}`).decode(t, &tr)
	if len(tr.Tasks) != 3 {
		t.Fatalf("claimed %d, want one of each queue", len(tr.Tasks))
	}
	text := string(e.must(200, "GET", "/metrics", "").body)
	for _, w := range []struct {
		name   string
		labels []string
		value  string
	}{
		{"norn_flow_held_back_total", []string{`queue="r"`, `reason="rate_limit"`}, "2"},
		{"norn_flow_held_back_total", []string{`queue="r"`, `reason="max_running"`}, "0"},
		{"norn_flow_held_back_total", []string{`queue="k"`, `reason="max_running"`}, "1"},
		{"norn_flow_running", []string{`queue="r"`}, "1"},
		{"norn_flow_running", []string{`queue="k"`}, "1"},
		{"norn_flow_running", []string{`queue="free"`}, ""},
	} {
		if got := metricLine(text, w.name, w.labels...); got != w.value {
			t.Errorf("%s%v = %q, want %q", w.name, w.labels, got, w.value)
		}
	}
}

// TestMetricsObserveEvent covers the event-driven counters directly.
func TestMetricsObserveEvent(t *testing.T) {
	t.Parallel()
	m, err := newMetrics(nil, nil, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	m.claimed([]*norn.Task{{ID: "a", Queue: "q", Created: time.Now()}}, time.Now())
	m.observeEvent(norn.Event{Kind: norn.EventKind(norn.TaskTimeout), TaskID: "a", Queue: "q"})
	m.finished(norn.OpComplete, "a", time.Now()) // claimed elsewhere now: unknown queue
	m.mu.Lock()
	n := len(m.claims)
	m.mu.Unlock()
	if n != 0 {
		t.Errorf("%d claims still tracked", n)
	}
}

// writeCert writes a self-signed certificate for 127.0.0.1 and returns the
// file paths and a pool trusting it.
func writeCert(t *testing.T) (certFile, keyFile string, pool *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "norn-test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600); err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	pool = x509.NewCertPool()
	pool.AddCert(cert)
	return certFile, keyFile, pool
}

func TestTLS(t *testing.T) {
	t.Parallel()
	certFile, keyFile, pool := writeCert(t)
	e := startServer(t, func(c *Config) { c.TLSCert, c.TLSKey = certFile, keyFile })
	if !strings.HasPrefix(e.base, "https://") {
		t.Fatalf("URL %s", e.base)
	}
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	resp, err := hc.Get(e.base + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	plain, err := http.Get("http://" + e.srv.Addr() + "/healthz")
	if err == nil {
		plain.Body.Close()
		if plain.StatusCode == 200 {
			t.Fatal("plain HTTP served by a TLS server")
		}
	}
}
