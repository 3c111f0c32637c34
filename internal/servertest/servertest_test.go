package servertest_test

import (
	"context"
	"net/http"
	"testing"

	"github.com/nornq/norn/internal/servertest"
	"github.com/nornq/norn/server"
	"github.com/nornq/norn/store/embedded"
)

func TestStartServesUntilTheTestEnds(t *testing.T) {
	st, err := embedded.Open(context.Background(), embedded.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	var url string
	t.Run("Started", func(t *testing.T) {
		srv := servertest.Start(t, server.Config{Store: st})
		url = srv.URL()
		resp, err := http.Get(url + "/healthz")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET /healthz: %d", resp.StatusCode)
		}
	})
	// The subtest's cleanup stopped the server.
	if resp, err := http.Get(url + "/healthz"); err == nil {
		resp.Body.Close()
		t.Fatalf("server still answers after its test ended: %d", resp.StatusCode)
	}
}
