package main

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/nornq/norn/internal/await"
	"github.com/nornq/norn/internal/pgtest"
	"github.com/nornq/norn/store/postgres"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// TestWritePatterns runs each -writes pattern's burn-down on a few thousand
// tasks with concurrent workers and checks, from the table, that every task
// was claimed and completed exactly once: the figures the mode prints are
// only worth comparing if each pattern does the same work.
func TestWritePatterns(t *testing.T) {
	ctx := context.Background()
	const n, workers, claim = 3000, 4, 100
	for _, p := range writePatterns {
		t.Run(p, func(t *testing.T) {
			url, schema := pgtest.Schema(t)
			if _, err := postgres.Migrate(ctx, url, schema, -1); err != nil {
				t.Fatal(err)
			}
			c, err := pgx.Connect(ctx, url)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close(ctx)
			if err := writesTable(ctx, c, schema, schema, p, n, 70, 200, nil); err != nil {
				t.Fatal(err)
			}
			pool, err := pgxpool.New(ctx, url)
			if err != nil {
				t.Fatal(err)
			}
			defer pool.Close()
			done, err := writesBurn(ctx, pool, schema, p, workers, claim)
			if err != nil {
				t.Fatal(err)
			}
			if done != n {
				t.Fatalf("%d completions applied, want %d", done, n)
			}
			// A task claimed twice would have been completed by one claimer
			// only, at a later version; one never claimed would not be
			// completed.
			wantVersion := 3 // claimed, then completed
			if p == "lease" {
				wantVersion = 2 // completed only: the claim is the lease row
			}
			var completed, atVersion int
			tq := pgx.Identifier{schema, "t"}.Sanitize()
			if err := c.QueryRow(ctx, `SELECT count(*) FILTER (WHERE status = 'completed'), count(*) FILTER (WHERE version = $1) FROM `+tq,
				wantVersion).Scan(&completed, &atVersion); err != nil {
				t.Fatal(err)
			}
			if completed != n || atVersion != n {
				t.Fatalf("%d tasks completed and %d at version %d, want %d", completed, atVersion, wantVersion, n)
			}
			if p == "uuid-id" {
				// The claim index and the primary key are on the uuid.
				var typ string
				var uuidIndexes int
				if err := c.QueryRow(ctx, `SELECT format_type(atttypid, atttypmod), (SELECT count(*) FROM pg_index i
					WHERE i.indrelid = a.attrelid AND a.attnum = ANY (i.indkey))
					FROM pg_attribute a WHERE a.attrelid = $1::regclass AND a.attname = 'id'`, tq).Scan(&typ, &uuidIndexes); err != nil {
					t.Fatal(err)
				}
				if typ != "uuid" || uuidIndexes < 2 {
					t.Fatalf("id is %s in %d indexes, want uuid in the primary key and the claim index", typ, uuidIndexes)
				}
			}
			if p == "side-spec" {
				// The rows carry {}, the side table every task's spec.
				var specs, narrow int
				if err := c.QueryRow(ctx, `SELECT (SELECT count(*) FROM `+pgx.Identifier{schema, "specs"}.Sanitize()+` WHERE length(spec) = 200),
					(SELECT count(*) FROM `+tq+` WHERE length(spec) = 2)`).Scan(&specs, &narrow); err != nil {
					t.Fatal(err)
				}
				if specs != n || narrow != n {
					t.Fatalf("%d specs of 200 bytes and %d rows with {}, want %d", specs, narrow, n)
				}
			}
			if p == "hot-done" {
				// Every completion is listed in ended, and the claim left no
				// task in the claim index.
				var ended, phased int
				if err := c.QueryRow(ctx, `SELECT (SELECT coalesce(sum(cardinality(ids)), 0) FROM `+pgx.Identifier{schema, "ended"}.Sanitize()+`),
					(SELECT count(*) FROM `+tq+` WHERE phase IS NOT NULL)`).Scan(&ended, &phased); err != nil {
					t.Fatal(err)
				}
				if ended != n || phased != 0 {
					t.Fatalf("%d tasks in ended rows and %d with a phase left, want %d and 0", ended, phased, n)
				}
				// The point of the pattern: completions can be HOT. The
				// workers' sessions report their counts when they end.
				pool.Close()
				var hot, upd int64
				await.Check(t, 20*time.Second, "the workers' update counts", func() (string, error) {
					// A fresh snapshot of the statistics on every read.
					if _, err := c.Exec(ctx, `SELECT pg_stat_clear_snapshot()`); err != nil {
						return "", err
					}
					if err := c.QueryRow(ctx, `SELECT pg_stat_get_tuples_hot_updated($1::regclass), pg_stat_get_tuples_updated($1::regclass)`,
						tq).Scan(&hot, &upd); err != nil {
						return "", err
					}
					if upd < 2*n {
						return fmt.Sprintf("%d updates reported, want %d", upd, 2*n), nil
					}
					return "", nil
				})
				if upd < 2*n || hot == 0 {
					t.Fatalf("%d updates reported, %d of them HOT; want %d and some HOT", upd, hot, 2*n)
				}
			}
			if p != "ready" && p != "lease" {
				return
			}
			var ready, leased int
			if err := c.QueryRow(ctx, `SELECT (SELECT count(*) FROM `+pgx.Identifier{schema, "ready"}.Sanitize()+`),
				(SELECT coalesce(sum(cardinality(ids)), 0) FROM `+pgx.Identifier{schema, "leases"}.Sanitize()+`)`).Scan(&ready, &leased); err != nil {
				t.Fatal(err)
			}
			if ready != 0 || leased != n {
				t.Fatalf("%d ready rows left and %d tasks leased, want 0 and %d", ready, leased, n)
			}
		})
	}
}
