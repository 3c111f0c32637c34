// Package chromium finds and configures the headless Chromium that the
// browser tests (the dashboard's, the server's security tests) drive with
// chromedp.
package chromium

import (
	"context"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// Path returns the Chromium to run: $NORN_CHROMIUM, or the first browser
// found on PATH. Without one the test is skipped, or fails when
// NORN_REQUIRE_BROWSER=1 (CI sets it, so the browser tests cannot vanish
// silently).
func Path(t testing.TB) string {
	t.Helper()
	if p := os.Getenv("NORN_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("NORN_REQUIRE_BROWSER") == "1" {
		t.Fatal("Chromium not found (install Debian's chromium or set NORN_CHROMIUM) and NORN_REQUIRE_BROWSER=1")
	}
	t.Skip("Chromium not found: install Debian's chromium or set NORN_CHROMIUM to run the browser tests")
	return ""
}

// Options are the allocator options of a quiet, isolated headless browser
// (no sandbox, so it runs as root in CI; no background traffic, updates or
// extensions; its own profile in a temporary directory), followed by extra.
func Options(t testing.TB, exe string, extra ...chromedp.ExecAllocatorOption) []chromedp.ExecAllocatorOption {
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(exe),
		chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun, chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-extensions", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.UserDataDir(t.TempDir()),
	}
	return append(opts, extra...)
}

// Start starts a browser with opts and returns its context, which ends
// after timeout or with the test. The browser is started here, before the
// test uses the context: a first start that fails (a loaded machine can be
// slow to bring one up) would otherwise be retried by chromedp's next call
// on the same context, and two starts on one context make chromedp close a
// channel twice and panic, taking every test of the binary with it. A
// failed start is tried once more with fresh contexts.
func Start(t testing.TB, timeout time.Duration, opts ...chromedp.ExecAllocatorOption) context.Context {
	t.Helper()
	var err error
	for try := 0; try < 2; try++ {
		actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
		bctx, cancelBrowser := chromedp.NewContext(actx)
		ctx, cancel := context.WithTimeout(bctx, timeout)
		if err = chromedp.Do(ctx); err == nil {
			t.Cleanup(func() { cancel(); cancelBrowser(); cancelAlloc() })
			return ctx
		}
		cancel()
		cancelBrowser()
		cancelAlloc()
		t.Logf("starting Chromium (try %d): %v", try+1, err)
	}
	t.Fatalf("Chromium did not start: %v", err)
	return nil
}
