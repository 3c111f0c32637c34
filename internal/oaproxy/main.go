// Command oaproxy is test tooling: a reverse proxy that checks every
// request and response passing through it against the server's OpenAPI
// document (internal/oacheck) and appends each mismatch to a log file. The
// Python and TypeScript SDK suites put it in front of the norn server they
// start when NORN_OAPROXY_BIN names it, and fail when the log is not empty.
//
//	oaproxy -upstream http://127.0.0.1:7070 [-addr 127.0.0.1:0] [-log FILE]
//
// It prints "oaproxy: listening on URL" once it accepts connections.
// Responses pass through unchanged and unbuffered (streams and long polls
// included). When the upstream cannot be reached the client's connection
// is dropped, as it would be without the proxy.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/nornq/norn/internal/oacheck"
	"github.com/nornq/norn/server"
)

func main() {
	upstream := flag.String("upstream", "", "URL of the norn server to check (required)")
	addr := flag.String("addr", "127.0.0.1:0", "address to listen on")
	logPath := flag.String("log", "", "file the mismatches are appended to (default: standard error)")
	flag.Parse()
	if err := run(*upstream, *addr, *logPath); err != nil {
		fmt.Fprintln(os.Stderr, "oaproxy:", err)
		os.Exit(1)
	}
}

func run(upstream, addr, logPath string) error {
	target, err := url.Parse(upstream)
	if err != nil || target.Scheme == "" || target.Host == "" {
		return fmt.Errorf("-upstream must be a URL such as http://127.0.0.1:7070, got %q", upstream)
	}
	out := os.Stderr
	if logPath != "" {
		f, err := os.OpenFile(logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
		if err != nil {
			return err
		}
		defer f.Close()
		out = f
	}
	var mu sync.Mutex
	h, err := handler(target, func(err error) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintf(out, "MISMATCH %v\n\n", err)
	})
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	fmt.Printf("oaproxy: listening on http://%s\n", ln.Addr())
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return nil
}

// handler proxies to target and reports each mismatch with the document.
func handler(target *url.URL, report func(error)) (http.Handler, error) {
	checker, err := oacheck.New(server.OpenAPI())
	if err != nil {
		return nil, err
	}
	proxy := httputil.NewSingleHostReverseProxy(target)
	proxy.FlushInterval = -1 // streams and long polls reach the client as written
	proxy.ErrorLog = log.New(os.Stderr, "oaproxy: ", 0)
	proxy.ErrorHandler = func(w http.ResponseWriter, r *http.Request, err error) {
		// A 502 of the proxy's own would be a status the server never
		// sends; the client sees what it would see without the proxy.
		panic(http.ErrAbortHandler)
	}
	return checker.Middleware(proxy, report), nil
}
