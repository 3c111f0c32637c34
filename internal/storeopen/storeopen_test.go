package storeopen

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/nornq/norn"
	"github.com/nornq/norn/internal/pgtest"
)

func TestOpenRejectsUnknownKinds(t *testing.T) {
	t.Parallel()
	for _, spec := range []string{"", "./data", "mysql:foo", "embedded:"} {
		_, err := Open(context.Background(), spec, Options{})
		if !errors.Is(err, norn.ErrInvalidArgument) {
			t.Errorf("Open(%q) = %v, want invalid_argument", spec, err)
			continue
		}
		if spec != "embedded:" && !strings.Contains(err.Error(), "embedded:PATH") {
			t.Errorf("Open(%q) error %q does not list the supported stores", spec, err)
		}
	}
}

func TestOpenEmbedded(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, err := Open(ctx, "embedded:"+t.TempDir(), Options{Durability: "opportunistic"})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	subs, err := st.Submit(ctx, norn.NewTask{Queue: "q"})
	if err != nil || len(subs) != 1 {
		t.Fatalf("Submit = %v, %v", subs, err)
	}
	if _, err := Open(ctx, "embedded:"+t.TempDir(), Options{Durability: "sometimes"}); !errors.Is(err, norn.ErrInvalidArgument) {
		t.Fatalf("bad durability: %v", err)
	}
}

func TestMain(m *testing.M) { pgtest.Main(m) }

func TestOpenPostgres(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dbURL, schema := pgtest.Schema(t)
	// Without Migrate an empty schema is refused with advice, not half-used.
	if _, err := Open(ctx, dbURL, Options{Schema: schema}); err == nil || !strings.Contains(err.Error(), "migrate") {
		t.Fatalf("unmigrated schema: %v", err)
	}
	st, err := Open(ctx, strings.Replace(dbURL, "postgres://", "postgresql://", 1), Options{Schema: schema, Migrate: true})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	subs, err := st.Submit(ctx, norn.NewTask{Queue: "q"})
	if err != nil || len(subs) != 1 || subs[0].Task.Status != norn.StatusReady {
		t.Fatalf("Submit = %v, %v", subs, err)
	}
}
