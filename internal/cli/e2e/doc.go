// Package e2e holds end-to-end tests of the norn binary: they build
// ./cmd/norn once, start `norn server` on a free port and drive it through
// the CLI and plain HTTP, as a user following the README would.
package e2e
