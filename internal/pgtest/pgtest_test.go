package pgtest

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

func TestMain(m *testing.M) { Main(m) }

func TestSchemaIsolation(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a, b := URL(t), URL(t)
	ca, err := pgx.Connect(ctx, a)
	if err != nil {
		t.Fatal(err)
	}
	defer ca.Close(ctx)
	cb, err := pgx.Connect(ctx, b)
	if err != nil {
		t.Fatal(err)
	}
	defer cb.Close(ctx)
	if _, err := ca.Exec(ctx, "CREATE TABLE x (v int); INSERT INTO x VALUES (1)"); err != nil {
		t.Fatal(err)
	}
	if _, err := cb.Exec(ctx, "SELECT * FROM x"); err == nil {
		t.Fatal("schema b sees schema a's table")
	}
}

func TestClusterRestart(t *testing.T) {
	t.Parallel()
	c := NewCluster(t)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, c.URL())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, "CREATE TABLE k (v int); INSERT INTO k VALUES (42)"); err != nil {
		t.Fatal(err)
	}
	if err := c.Restart("immediate"); err != nil {
		t.Fatal(err)
	}
	// The old session died with the server.
	if err := conn.Ping(ctx); err == nil {
		t.Fatal("connection survived an immediate restart")
	}
	conn2, err := pgx.Connect(ctx, c.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer conn2.Close(ctx)
	var v int
	if err := conn2.QueryRow(ctx, "SELECT v FROM k").Scan(&v); err != nil || v != 42 {
		t.Fatalf("after restart: v=%d err=%v", v, err)
	}
	if err := c.Stop("fast"); err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if _, err := pgx.Connect(cctx, c.URL()); err == nil {
		t.Fatal("connected to a stopped cluster")
	}
}
