package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/jackc/pgx/v5"
)

// stmtCost is what the statements of one kind cost, from
// pg_stat_statements (reset when a measured range starts): execution time,
// calls, rows returned or written, and the WAL they wrote while executing
// (their commit records are written after: walCost has those).
type stmtCost struct {
	ExecMS, Calls, Rows          float64
	WALRecords, WALBytes, WALFPI float64
}

// stmtsByKind reads pg_stat_statements of the current database and sums it
// by the kind classify gives each statement's text.
func stmtsByKind(ctx context.Context, c *pgx.Conn) (map[string]stmtCost, error) {
	rows, err := c.Query(ctx, `SELECT query, total_exec_time, calls::float8, rows::float8, wal_records::float8, wal_bytes::float8, wal_fpi::float8
		FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]stmtCost{}
	for rows.Next() {
		var q string
		var s stmtCost
		if err := rows.Scan(&q, &s.ExecMS, &s.Calls, &s.Rows, &s.WALRecords, &s.WALBytes, &s.WALFPI); err != nil {
			return nil, err
		}
		k := classify(q)
		t := out[k]
		t.ExecMS += s.ExecMS
		t.Calls += s.Calls
		t.Rows += s.Rows
		t.WALRecords += s.WALRecords
		t.WALBytes += s.WALBytes
		t.WALFPI += s.WALFPI
		out[k] = t
	}
	return out, rows.Err()
}

// tableWrites are the row versions pg_stat_user_tables counts over every
// table of the database: a check on the WAL's count (it is reported
// lazily, which the measured ranges wait for).
type tableWrites struct{ Ins, Upd, HOT, Del float64 }

func readTableWrites(ctx context.Context, c *pgx.Conn) (tableWrites, error) {
	var t tableWrites
	// A fresh snapshot of the statistics, not the one this transaction saw.
	if _, err := c.Exec(ctx, `SELECT pg_stat_clear_snapshot()`); err != nil {
		return t, err
	}
	err := c.QueryRow(ctx, `SELECT coalesce(sum(n_tup_ins), 0)::float8, coalesce(sum(n_tup_upd), 0)::float8,
		coalesce(sum(n_tup_hot_upd), 0)::float8, coalesce(sum(n_tup_del), 0)::float8 FROM pg_stat_user_tables`).Scan(&t.Ins, &t.Upd, &t.HOT, &t.Del)
	return t, err
}

// costRow is one line of the cost table: what one kind cost per task.
type costRow struct {
	System string `json:"system"`
	Kind   string `json:"kind"`
	Tasks  int    `json:"tasks"`
	// DBCPU is the database's CPU time per task of the phase the kind was
	// measured in (/proc); for a phase of more than one kind (River's
	// work: claim and completion), the phase's.
	DBCPU     float64 `json:"db_cpu_us"`
	CPUPhase  string  `json:"cpu_phase"`
	ExecUS    float64 `json:"exec_us"`   // the kind's statements' execution time
	Calls     float64 `json:"stmts"`     // the kind's statements
	StmtWAL   float64 `json:"stmt_wal"`  // WAL bytes the kind's statements wrote while executing
	WALBytes  float64 `json:"wal_bytes"` // WAL bytes of the kind's records (commits included)
	WALRecs   float64 `json:"wal_records"`
	FPIBytes  float64 `json:"fpi_bytes"`
	Commits   float64 `json:"commits"`
	Rows      float64 `json:"row_versions"`
	Inserted  float64 `json:"inserted"`
	Updated   float64 `json:"updated"` // not HOT
	HOT       float64 `json:"hot"`
	IndexEnts float64 `json:"index_entries"`
}

// newCostRow divides a kind's sums by the tasks.
func newCostRow(system, kind string, n int, dbCPU float64, cpuPhase string, s stmtCost, w walCost) costRow {
	f := float64(n)
	return costRow{System: system, Kind: kind, Tasks: n, DBCPU: round(dbCPU / f * 1e6), CPUPhase: cpuPhase,
		ExecUS: round(s.ExecMS * 1000 / f), Calls: round3(s.Calls / f), StmtWAL: round(s.WALBytes / f),
		WALBytes: round(w.Bytes / f), WALRecs: round2(w.Records / f), FPIBytes: round(w.FPIBytes / f), Commits: round3(w.Commits / f),
		Rows: round3(w.RowVersions() / f), Inserted: round3(w.Inserted / f), Updated: round3(w.Updated / f), HOT: round3(w.HOT / f),
		IndexEnts: round3(w.IndexEntries / f)}
}

// printCosts prints rows as JSON lines, then as a table.
func printCosts(rows []costRow) {
	for _, r := range rows {
		j, _ := json.Marshal(r)
		fmt.Println(string(j))
	}
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, strings.Join([]string{"system", "kind", "db CPU µs", "exec µs", "WAL bytes", "WAL recs", "row versions (ins+upd+HOT)", "index entries", "commits", ""}, "\t"))
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%s\t%.1f (%s)\t%.1f\t%.0f\t%.2f\t%.3f (%.3f+%.3f+%.3f)\t%.3f\t%.3f\t\n", r.System, r.Kind, r.DBCPU, r.CPUPhase,
			r.ExecUS, r.WALBytes, r.WALRecs, r.Rows, r.Inserted, r.Updated, r.HOT, r.IndexEnts, r.Commits)
	}
	tw.Flush()
}

// ensureExtensions creates what the counts need in the database: the
// statements' counters (preloaded by the server) and the WAL reader.
func ensureExtensions(ctx context.Context, c *pgx.Conn) {
	for _, e := range []string{"pg_stat_statements", "pg_walinspect"} {
		if _, err := c.Exec(ctx, `CREATE EXTENSION IF NOT EXISTS `+e); err != nil {
			fmt.Fprintf(os.Stderr, "CREATE EXTENSION %s: %v (the server needs shared_preload_libraries = pg_stat_statements, PostgreSQL 15 or later)\n", e, err)
			os.Exit(2)
		}
	}
}

// lsn is the current WAL insert position, as text for pg_walinspect.
func lsn(ctx context.Context, c *pgx.Conn) string {
	var s string
	must(c.QueryRow(ctx, `SELECT pg_current_wal_insert_lsn()::text`).Scan(&s))
	return s
}

// walBetween reads the records from..to, to cut at what is flushed
// (pg_walinspect reads no further); endIndex as walRecords'.
func walBetween(ctx context.Context, c *pgx.Conn, from, to, endIndex string) []walRecord {
	var end string
	must(c.QueryRow(ctx, `SELECT least($1::pg_lsn, pg_current_wal_flush_lsn())::text`, to).Scan(&end))
	recs, err := walRecords(ctx, c, from, end, endIndex)
	must(err)
	return recs
}
