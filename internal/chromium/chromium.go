// Package chromium finds and configures the headless Chromium that the
// browser tests (the dashboard's, the server's security tests) drive with
// chromedp.
package chromium

import (
	"os"
	"os/exec"
	"testing"

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
