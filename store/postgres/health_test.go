package postgres

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nornq/norn/internal/await"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/nornq/norn"
	"github.com/nornq/norn/internal/pgtest"
)

func TestReplicationWarningRules(t *testing.T) {
	for _, c := range []struct {
		name      string
		recovery  bool
		syncNames string
		streaming int
		want      string // part of the warning ("" none)
	}{
		{"no standby", false, "", 0, ""},
		{"asynchronous standby", false, "", 2, "asynchronously to 2 standby"},
		{"blank names are none", false, "  ", 1, "asynchronously to 1 standby"},
		{"synchronous standby", false, "FIRST 1 (standby)", 1, ""},
		{"synchronous names without a standby", false, "*", 0, ""},
		{"a standby itself", true, "", 0, "connected to a standby"},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := replicationWarning(c.recovery, c.syncNames, c.streaming)
			if c.want == "" && got != "" || c.want != "" && !strings.Contains(got, c.want) {
				t.Fatalf("warning %q, want one containing %q", got, c.want)
			}
		})
	}
}

func TestClassifyCauses(t *testing.T) {
	for _, c := range []struct {
		name string
		err  error
		want string
	}{
		{"read-only", &pgconn.PgError{Code: "25006"}, norn.CauseReadOnly},
		{"too many connections", &pgconn.PgError{Code: "53300"}, norn.CauseOverloaded},
		{"shutting down", &pgconn.PgError{Code: "57P01"}, norn.CauseShuttingDown},
		{"starting up", &pgconn.PgError{Code: "57P03"}, norn.CauseShuttingDown},
		{"connection failure", &pgconn.PgError{Code: "08006"}, norn.CauseRefused},
		{"refused", fmt.Errorf("dial: %w", syscall.ECONNREFUSED), norn.CauseRefused},
		{"reset", fmt.Errorf("read: %w", io.ErrUnexpectedEOF), norn.CauseRefused},
		{"timeout", fmt.Errorf("probe: %w", context.DeadlineExceeded), norn.CauseUnreachable},
		{"a connection closed under the probe", errors.New("conn closed"), norn.CauseRefused},
		{"only standbys for read-write", errors.New("failed to connect to `host=db1`: ValidateConnect failed: read only connection"), norn.CauseReadOnly},
		{"other", errors.New("something else"), ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := classify(c.err)
			if got.Code != norn.CodeUnavailable || got.Cause != c.want {
				t.Fatalf("classify: %v (cause %q), want unavailable with cause %q", got, got.Cause, c.want)
			}
			if c.want != "" && (!strings.HasPrefix(got.Message, "store unavailable: ") || strings.Contains(got.Message, c.err.Error())) {
				t.Fatalf("message %q: want the cause's words, not the error's", got.Message)
			}
		})
	}
}

// TestReplicationWarning: a primary with a streaming standby and no
// synchronous_standby_names gets the warning (a failover can lose
// acknowledged work); once the standby is synchronous, the warning goes.
func TestReplicationWarning(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	primary := pgtest.NewCluster(t)
	primary.Standby(t)
	s, err := Open(ctx, Config{URL: primary.URL(), Schema: "repl", Migrate: true, DisableMonitor: true,
		ProbeInterval: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	await.Until(t, 20*time.Second, "the asynchronous replication warning", func() bool {
		return strings.Contains(s.ReplicationWarning(), "asynchronously to 1 standby")
	})
	conn, err := pgx.Connect(ctx, primary.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "ALTER SYSTEM SET synchronous_standby_names = '*'"); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, "SELECT pg_reload_conf()"); err != nil {
		t.Fatal(err)
	}
	await.Until(t, 20*time.Second, "no warning with a synchronous standby", func() bool { return s.ReplicationWarning() == "" })
	// Writes still commit: the standby is synchronous and streaming.
	if _, err := s.Submit(ctx, norn.NewTask{Queue: "q"}); err != nil {
		t.Fatalf("submit with a synchronous standby: %v", err)
	}
}
