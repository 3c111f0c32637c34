package server

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"testing"
	"time"
)

// TestRefusedRequestsCloseTheirConnectionAtOnce: a request refused before
// its body is read (401 without a valid token, 429 past the failed
// authentications, 415 for a body that is not JSON) is answered and its
// connection closed at once, even when the announced body never comes.
// Before, the server waited for the rest of the body up to the body read
// timeout (30 s) after answering 401, so unauthenticated clients could hold
// connections for nothing.
func TestRefusedRequestsCloseTheirConnectionAtOnce(t *testing.T) {
	t.Parallel()
	e := startServer(t, func(c *Config) {
		c.Tokens = []Token{{Token: "t", Role: RoleAdmin}}
		c.MaxAuthFailures = 3
	})
	probe := func(what, headers string, want int) {
		t.Helper()
		c, err := net.Dial("tcp", e.srv.Addr())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		start := time.Now()
		fmt.Fprintf(c, "POST /v1/tasks HTTP/1.1\r\nHost: 127.0.0.1\r\n%sContent-Length: 100\r\n\r\n{", headers)
		_ = c.SetReadDeadline(time.Now().Add(20 * time.Second))
		br := bufio.NewReader(c)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != want || !resp.Close {
			t.Errorf("%s: %d, close %v; want %d and Connection: close", what, resp.StatusCode, resp.Close, want)
		}
		if _, err := br.ReadByte(); err != io.EOF {
			t.Errorf("%s: after the answer: %v, want the connection closed", what, err)
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("%s: the connection closed after %v", what, d)
		}
	}
	probe("valid token, body not JSON", "Authorization: Bearer t\r\nContent-Type: text/plain\r\n", 415)
	for i := range 3 {
		probe(fmt.Sprintf("no token (%d)", i), "Content-Type: application/json\r\n", 401)
	}
	probe("past the failed authentications", "Authorization: Bearer t\r\nContent-Type: application/json\r\n", 429)
}
