// Package storeopen turns a store spec such as "embedded:./norn-data" into
// an open norn.Store. It is how `norn server` (and other commands that own
// a store) choose their backend, so adding a backend means adding one
// opener here.
package storeopen

import (
	"context"
	"fmt"
	"log/slog"
	"sort"
	"strings"

	"github.com/nornq/norn"
	"github.com/nornq/norn/store/embedded"
	"github.com/nornq/norn/store/postgres"
)

// DefaultSpec is the store `norn server` uses when none is given.
const DefaultSpec = "embedded:./norn-data"

// Options are the backend-independent settings of Open.
type Options struct {
	// Durability is "strict" (default) or "opportunistic"; see docs/design.md.
	// Backends without the distinction ignore it.
	Durability string
	// MinFreeBytes is the embedded store's free-space reserve
	// (embedded.Options.MinFreeBytes): 0 means its default of 128 MiB,
	// negative no reserve. Ignored by other kinds.
	MinFreeBytes int64
	// Clock is the time source; nil means the backend's default.
	Clock norn.Clock
	// HistoryLimit caps each task's history; 0 means norn.DefaultHistoryLimit.
	HistoryLimit int
	// Logger receives the store's operational messages; nil means slog.Default().
	Logger *slog.Logger
	// Schema is the Postgres schema holding Norn's tables (default "norn"),
	// so several deployments can share a database. Ignored by other kinds.
	Schema string
	// Migrate applies pending Postgres migrations on open; without it a
	// schema that is not at the latest version is refused. Ignored by other kinds.
	Migrate bool
	// Observer receives the store's background measurements (schedule
	// lateness); nil means none. server.NewStoreObserver makes one that
	// feeds Prometheus.
	Observer norn.Observer
	// NoMonitor opens the store without its monitor: nothing times out,
	// falls due or fires unless Sweep is called (norn copy reads and writes
	// stores that must not change meanwhile).
	NoMonitor bool
}

// opener opens one kind of store; rest is the spec after "scheme:" (for
// URL schemes, the whole spec is passed as spec).
type opener func(ctx context.Context, spec, rest string, opts Options) (norn.Store, error)

// openers are the backends compiled into this build, by spec scheme.
var openers = map[string]opener{
	"embedded": openEmbedded,
	"postgres": openPostgres,
}

// Kinds lists the store kinds this build can open, sorted.
func Kinds() []string {
	out := make([]string, 0, len(openers))
	for k := range openers {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// Open opens the store named by spec: "embedded:PATH" (a data directory) or
// a "postgres://" / "postgresql://" URL.
// An unknown or unavailable kind is an invalid_argument error (field
// "store") that lists what this build supports.
func Open(ctx context.Context, spec string, opts Options) (norn.Store, error) {
	spec = strings.TrimSpace(spec)
	scheme, rest, ok := strings.Cut(spec, ":")
	if !ok || scheme == "" {
		return nil, norn.Invalid("store", "store %q must look like KIND:LOCATION (this build supports: %s)", spec, supported())
	}
	scheme = strings.ToLower(scheme)
	if scheme == "postgresql" {
		scheme = "postgres"
	}
	open, ok := openers[scheme]
	if !ok {
		return nil, norn.Invalid("store", "store kind %q is not available in this build (this build supports: %s)", scheme, supported())
	}
	return open(ctx, spec, rest, opts)
}

func supported() string {
	kinds := Kinds()
	for i, k := range kinds {
		switch k {
		case "embedded":
			kinds[i] = "embedded:PATH"
		case "postgres":
			kinds[i] = "postgres://USER:PASSWORD@HOST/DB"
		}
	}
	return strings.Join(kinds, ", ")
}

func openEmbedded(ctx context.Context, spec, dir string, opts Options) (norn.Store, error) {
	if dir == "" {
		return nil, norn.Invalid("store", "embedded store needs a directory: embedded:PATH")
	}
	d, err := embedded.ParseDurability(opts.Durability)
	if err != nil {
		return nil, err
	}
	st, err := embedded.Open(ctx, embedded.Options{
		Dir: dir, Durability: d, MinFreeBytes: opts.MinFreeBytes, Clock: opts.Clock, HistoryLimit: opts.HistoryLimit, Logger: opts.Logger,
		Observer: opts.Observer, ManualSweep: opts.NoMonitor,
	})
	if err != nil {
		return nil, fmt.Errorf("opening %s: %w", spec, err)
	}
	return st, nil
}

func openPostgres(ctx context.Context, spec, _ string, opts Options) (norn.Store, error) {
	st, err := postgres.Open(ctx, postgres.Config{
		URL: spec, Schema: opts.Schema, Migrate: opts.Migrate, Clock: opts.Clock,
		HistoryLimit: opts.HistoryLimit, Logger: opts.Logger, Observer: opts.Observer, DisableMonitor: opts.NoMonitor,
	})
	if err != nil {
		// The URL may hold a password: name the store by its kind only.
		return nil, fmt.Errorf("opening the postgres store: %w", err)
	}
	return st, nil
}
