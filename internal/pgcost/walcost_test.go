package main

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/nornq/norn/internal/pgtest"
)

func TestMultiInsertTuples(t *testing.T) {
	for _, c := range []struct {
		desc string
		want int
		err  bool
	}{
		{"61 tuples flags 0x02", 61, false},      // PostgreSQL 15
		{"ntuples: 7, flags: 0x08", 7, false},    // 16 on
		{" 1000 tuples flags 0x00", 1000, false}, // padded
		{"flags 0x02", 0, true},
		{"", 0, true},
		{"off 3 flags 0x00", 0, true}, // an INSERT's, not a MULTI_INSERT's
	} {
		got, err := multiInsertTuples(c.desc)
		if (err != nil) != c.err || got != c.want {
			t.Errorf("multiInsertTuples(%q) = %d, %v; want %d, error %v", c.desc, got, err, c.want, c.err)
		}
	}
}

func TestClassOf(t *testing.T) {
	for class, want := range map[string]string{
		"LU": kindClaim, "L": kindClaim, "LUI": kindClaim,
		"U": kindCompletion, "UI": kindCompletion,
		"I":    kindSubmit,
		"none": kindOther, "": kindOther,
	} {
		if got := classOf(class); got != want {
			t.Errorf("classOf(%q) = %s, want %s", class, got, want)
		}
	}
}

// TestWALCounts writes a known number of row versions and index entries
// and checks that the WAL's records count them, by the kind of the
// transaction that wrote them: the cost table's counts are only as good
// as this reading.
func TestWALCounts(t *testing.T) {
	ctx := context.Background()
	url, schema := pgtest.Schema(t)
	c, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	if _, err := c.Exec(ctx, `CREATE EXTENSION IF NOT EXISTS pg_walinspect`); err != nil {
		t.Fatal(err)
	}
	tbl := pgx.Identifier{schema, "w"}.Sanitize()
	// Room on each page for HOT updates; no vacuum of it in between.
	if _, err := c.Exec(ctx, `CREATE TABLE `+tbl+` (id int PRIMARY KEY, k int, v int, pad text)
		WITH (fillfactor = 50, autovacuum_enabled = off); CREATE INDEX ON `+tbl+` (k);
		CREATE INDEX ended ON `+tbl+` (k) WHERE k >= 1000`); err != nil {
		t.Fatal(err)
	}
	from := lsn(ctx, c)
	// Submit: 100 rows by COPY (MULTI_INSERT) and 10 by INSERT, each
	// with an entry in both indexes.
	rows := make([][]any, 100)
	for i := range rows {
		rows[i] = []any{int32(i), int32(i), int32(0), "x"}
	}
	if _, err := c.CopyFrom(ctx, pgx.Identifier{schema, "w"}, []string{"id", "k", "v", "pad"}, pgx.CopyFromRows(rows)); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Exec(ctx, `INSERT INTO `+tbl+` SELECT i, i, 0, 'x' FROM generate_series(100, 109) i`); err != nil {
		t.Fatal(err)
	}
	// Claim: 20 rows locked, then updated in an indexed column (not HOT:
	// an entry in all three indexes each, ended's predicate now true).
	tx, err := c.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `SELECT id FROM `+tbl+` WHERE id < 20 FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `UPDATE `+tbl+` SET k = k + 1000 WHERE id < 20`); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	// Completion: 50 rows updated in a column no index names (HOT).
	if _, err := c.Exec(ctx, `UPDATE `+tbl+` SET v = 1 WHERE id >= 50 AND id < 100`); err != nil {
		t.Fatal(err)
	}
	to := lsn(ctx, c)
	type want struct {
		kind                            string
		inserted, updated, hot, entries float64
		minCommits                      float64
	}
	check := func(endIndex string, wants []want) {
		t.Helper()
		by := walByKind(walBetween(ctx, c, from, to, endIndex))
		for _, w := range wants {
			g := by[w.kind]
			if g.Inserted != w.inserted || g.Updated != w.updated || g.HOT != w.hot || g.IndexEntries != w.entries || g.Commits < w.minCommits {
				t.Errorf("end index %q, %s: %+v; want %v inserted, %v updated, %v HOT, %v index entries, at least %v commits",
					endIndex, w.kind, g, w.inserted, w.updated, w.hot, w.entries, w.minCommits)
			}
			if (g.Bytes > 0 && g.Records > 0) != (w.minCommits > 0) {
				t.Errorf("end index %q, %s: %v WAL bytes in %v records", endIndex, w.kind, g.Bytes, g.Records)
			}
		}
	}
	check("", []want{
		{kindSubmit, 110, 0, 0, 220, 2},
		{kindClaim, 0, 20, 0, 60, 1},
		{kindCompletion, 0, 0, 50, 0, 1},
	})
	// A transaction that writes into the index of ended rows is a
	// completion, though it locked rows.
	var ended string
	if err := c.QueryRow(ctx, `SELECT pg_relation_filenode($1::regclass)::text`, pgx.Identifier{schema, "ended"}.Sanitize()).Scan(&ended); err != nil {
		t.Fatal(err)
	}
	check(ended, []want{
		{kindSubmit, 110, 0, 0, 220, 2},
		{kindClaim, 0, 0, 0, 0, 0},
		{kindCompletion, 0, 20, 50, 60, 2},
	})
}
