package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// The -observe mode measures another program's tasks on the same counters:
//
//	pgcost -observe -url … -pm … -n 200000 -- riverbench -database-url … -n 200000
//
// It takes the counters, runs the command (its output goes to stderr),
// and takes them again; -n is how many tasks the command submits and
// works. Statements are told apart by their text (classify), WAL records
// by their transaction (classOf: made for River; -end-index names the
// index only completed jobs are in), and the database's CPU
// time is cut where the first claim statement shows in
// pg_stat_statements (read every 50 ms): before it the submit's, after it
// the claims' and completions' together.

// boundary is the counters at the last poll before the first claim.
type boundary struct {
	mu   sync.Mutex
	db   float64
	t    time.Time
	seen bool // a claim statement has run
}

// pollClaims reads, every 50 ms until stop closes, whether a claim
// statement has run, and keeps the database's CPU time of the last poll
// before one had.
func pollClaims(ctx context.Context, url string, pm int, b *boundary, stop <-chan struct{}) {
	c, err := pgx.Connect(ctx, url)
	must(err)
	defer c.Close(ctx)
	_, err = c.Exec(ctx, `SET pg_stat_statements.track = 'none'`)
	must(err)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		db := dbCPU(pm)
		t := time.Now()
		claims, err := claimCalls(ctx, c)
		must(err)
		if claims > 0 {
			b.mu.Lock()
			b.seen = true
			b.mu.Unlock()
			return
		}
		b.mu.Lock()
		b.db, b.t = db, t
		b.mu.Unlock()
		select {
		case <-stop:
			return
		case <-tick.C:
		}
	}
}

// claimCalls is how many claim statements pg_stat_statements has seen in
// the current database.
func claimCalls(ctx context.Context, c *pgx.Conn) (float64, error) {
	rows, err := c.Query(ctx, `SELECT query, calls::float8 FROM pg_stat_statements
		WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())`)
	if err != nil {
		return 0, err
	}
	defer rows.Close()
	var n float64
	for rows.Next() {
		var q string
		var calls float64
		if err := rows.Scan(&q, &calls); err != nil {
			return 0, err
		}
		if classify(q) == kindClaim {
			n += calls
		}
	}
	return n, rows.Err()
}

// observe is the -observe mode.
func observe(ctx context.Context, f flags, argv []string) {
	if len(argv) == 0 {
		fmt.Fprintln(os.Stderr, "-observe: no command (pgcost -observe -url … -pm … -n N -- command args…)")
		os.Exit(2)
	}
	c, err := pgx.Connect(ctx, f.url)
	must(err)
	defer c.Close(ctx)
	ensureExtensions(ctx, c)
	_, err = c.Exec(ctx, `SET pg_stat_statements.track = 'none'`)
	must(err)
	_, err = c.Exec(ctx, `SELECT pg_stat_statements_reset()`)
	must(err)
	a := begin(ctx, c, f.pm)
	la := lsn(ctx, c)

	var bd boundary
	stop := make(chan struct{})
	polled := make(chan struct{})
	go func() { pollClaims(ctx, f.url, f.pm, &bd, stop); close(polled) }()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	runErr := cmd.Run()
	close(stop)
	<-polled
	b := take(ctx, c, f.pm)
	lb := lsn(ctx, c)
	if runErr != nil {
		fmt.Fprintf(os.Stderr, "-observe: %s: %v\n", argv[0], runErr)
		os.Exit(1)
	}
	stats(ctx, c, &b)
	report(f.system, a, b, f.n, tableExtra(a, b, f.n))

	if !bd.seen {
		bd.db, bd.t = b.db, b.t
	}
	stmts, err := stmtsByKind(ctx, c)
	must(err)
	// The index's file as the command left it (River's benchmark
	// truncates its table first, which gives the index a new one).
	var endIndex string
	if f.endIndex != "" {
		must(c.QueryRow(ctx, `SELECT coalesce(pg_relation_filenode(to_regclass($1))::text, '')`, f.endIndex).Scan(&endIndex))
		if endIndex == "" {
			fmt.Fprintf(os.Stderr, "-observe: no index %s: completions are told from claims by whether they lock rows only\n", f.endIndex)
		}
	}
	recs := walBetween(ctx, c, la, lb, endIndex)
	if os.Getenv("WALTYPES") != "" {
		printWALTypes(f.system, "", f.n, recs)
	}
	wal := walByKind(recs)
	submitCPU, workCPU := bd.db-a.db, b.db-bd.db
	var rows []costRow
	for _, k := range kinds {
		cpu, phase := workCPU, "claim+completion"
		switch k {
		case kindSubmit:
			cpu, phase = submitCPU, "submit"
		case kindOther:
			cpu, phase = 0, "-"
		}
		rows = append(rows, newCostRow(f.system, k, f.n, cpu, phase, stmts[k], wal[k]))
	}
	if os.Getenv("STMTS") != "" {
		printStatements(ctx, c, f.system, f.n)
	}
	printCosts(rows)
}
