// Command pgcost measures what each task costs Norn's Postgres store: it
// submits -n tasks (-submitters goroutines, batches of -batch, as `norn
// bench submit`), then claims them all (-workers workers claiming -claim at
// a time, as `norn bench work`) and then completes them (one LeaseBatch per
// claim, as `norn bench work` sends it right after the claim), and prints
// per phase the database's and its own CPU time per task (from /proc: the
// postmaster -pm and all its children, exited ones included), WAL records
// and bytes, commits, statements, plans and shared buffers read per task.
// CPU time depends far less on the machine's load than throughput does;
// the counts not at all.
//
// Then the cost table (costs.go): per task of each phase, the execution
// time of its statements (pg_stat_statements) and, read record by record
// from the phase's WAL (pg_walinspect, walcost.go), its WAL bytes, row
// versions (inserted, updated, HOT-updated) and index entries. -interleave
// burns down as `norn bench work` does, each claim completed at once, in
// one phase, whose statements are told apart by kind (kinds.go) and whose
// WAL records by their transaction (walcost.go), as -observe does for
// another program, River's benchmark (observe.go). The two phases hold
// every lease at once, which the completion pays for in CPU (it reads its
// worker's lease rows); their counts are what -interleave's should be.
//
// The database needs pg_stat_statements (shared_preload_libraries;
// pg_stat_statements.track_planning = on for the plan counts) and
// PostgreSQL 15 or later for pg_walinspect (pgcost creates both
// extensions), wal_keep_size large enough to keep a phase's WAL, a
// superuser, and no other activity: WAL and commits are counted
// cluster-wide. Each phase waits 11 s for the backends' lazily reported
// statistics.
//
//	go run ./internal/pgcost -url postgres://… -pm $(head -1 $PGDATA/postmaster.pid)
//
// STMTS=1 also prints each phase's costliest statements, WALTYPES=1 its
// WAL records by type; CPUPROF=file
// writes a Go CPU profile of the submit phase. -writes
// rows,ready,lease,side-spec,hot-done measures other per-task write
// patterns on a copy of the task table instead (writes.go).
package main

import (
	"cmp"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/nornq/norn"
	"github.com/nornq/norn/internal/bench"
	"github.com/nornq/norn/internal/gcfloor"
	"github.com/nornq/norn/internal/proccpu"
	"github.com/nornq/norn/store/postgres"
)

func procCPU(pid int, children bool) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	// fields after comm: state(0) ppid(1) ... utime(11) stime(12) cutime(13) cstime(14)
	v := 0.0
	for i := 11; i <= 12; i++ {
		x, _ := strconv.ParseFloat(f[i], 64)
		v += x
	}
	if children {
		for i := 13; i <= 14; i++ {
			x, _ := strconv.ParseFloat(f[i], 64)
			v += x
		}
	}
	return v / 100
}

func ppid(pid int) int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return -1
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	p, _ := strconv.Atoi(f[1])
	return p
}

func dbCPU(pm int) float64 {
	v := procCPU(pm, true)
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if ppid(pid) == pm {
			v += procCPU(pid, false)
		}
	}
	return v
}

func selfCPU() float64 { return proccpu.Used().Seconds() }

type snap struct {
	db, cl                   float64
	lsn                      float64
	walRec, walBytes, walFPI float64
	commits, calls           float64
	blks, plans              float64
	tab                      tableWrites
	t                        time.Time
}

func take(ctx context.Context, c *pgx.Conn, pm int) snap {
	var s snap
	s.t = time.Now()
	s.db, s.cl = dbCPU(pm), selfCPU()
	must(c.QueryRow(ctx, `SELECT pg_current_wal_insert_lsn() - '0/0'`).Scan(&s.lsn))
	return s
}

// stats adds the counters that backends report lazily (up to 10 s late).
func stats(ctx context.Context, c *pgx.Conn, s *snap) {
	time.Sleep(11 * time.Second)
	must(c.QueryRow(ctx, `SELECT wal_records, wal_bytes, wal_fpi FROM pg_stat_wal`).Scan(&s.walRec, &s.walBytes, &s.walFPI))
	must(c.QueryRow(ctx, `SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()`).Scan(&s.commits))
	var err error
	s.tab, err = readTableWrites(ctx, c)
	must(err)
	must(c.QueryRow(ctx, `SELECT coalesce(sum(calls),0), coalesce(sum(shared_blks_hit+shared_blks_read),0), coalesce(sum(plans),0) FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())`).Scan(&s.calls, &s.blks, &s.plans))
}

func report(name string, a, b snap, n int, extra map[string]any) {
	f := float64(n)
	out := map[string]any{"phase": name, "tasks": n, "per_sec": round(f / b.t.Sub(a.t).Seconds()),
		"db_us": round((b.db - a.db) / f * 1e6), "client_us": round((b.cl - a.cl) / f * 1e6),
		"wal_rec": round2((b.walRec - a.walRec) / f), "wal_bytes": round((b.lsn - a.lsn) / f), "fpi": round2((b.walFPI - a.walFPI) / f),
		"commits": round3((b.commits - a.commits) / f), "stmts": round3((b.calls - a.calls) / f),
		"blks": round2((b.blks - a.blks) / f), "plans": round3((b.plans - a.plans) / f)}
	for k, v := range extra {
		out[k] = v
	}
	j, _ := json.Marshal(out)
	fmt.Println(string(j))
}
func round(x float64) float64  { return float64(int(x*10+0.5)) / 10 }
func round2(x float64) float64 { return float64(int(x*100+0.5)) / 100 }
func round3(x float64) float64 { return float64(int(x*1000+0.5)) / 1000 }
func must(err error) {
	if err != nil {
		panic(err)
	}
}

// flags are the command line's settings.
type flags struct {
	url                    string
	n, pm, workers, claim  int
	submitters             int
	batch, specB           int
	limits, rate, fair     bool
	writes                 string
	fillfactor, writesSpec int
	interleave, observe    bool
	system, endIndex       string
}

func parseFlags() flags {
	var f flags
	flag.StringVar(&f.url, "url", "", "")
	flag.IntVar(&f.n, "n", 50000, "")
	flag.IntVar(&f.pm, "pm", 0, "postmaster pid")
	flag.IntVar(&f.workers, "workers", 4, "")
	flag.IntVar(&f.claim, "claim", 100, "")
	flag.IntVar(&f.submitters, "submitters", 0, "submitting goroutines (0: -workers)")
	flag.IntVar(&f.batch, "batch", 1000, "")
	flag.IntVar(&f.specB, "spec", 200, "")
	flag.BoolVar(&f.limits, "limits", false, "max_running and key_limit that cannot bind, tasks over 1,000 concurrency keys (as bench work --limits)")
	flag.BoolVar(&f.rate, "rate", false, "a rate limit that cannot bind (as bench work --rate-limit)")
	flag.BoolVar(&f.fair, "fair", false, "fair_by concurrency_key, tasks over 1,000 concurrency keys")
	flag.StringVar(&f.writes, "writes", "", "instead of the store's burn-down, one by SQL on a copy of its task table for each write pattern listed (rows, ready, lease, side-spec, hot-done; comma-separated, or all): see writes.go")
	flag.IntVar(&f.fillfactor, "fillfactor", 100, "the task table's fillfactor in -writes")
	flag.IntVar(&f.writesSpec, "writes-spec", 2, "each task's spec size in bytes in -writes (2: {}; -spec is the store's burn-down's)")
	flag.BoolVar(&f.interleave, "interleave", false, "burn down as bench work does, each claim completed at once, in one measured phase (per kind: statements only), instead of a claim phase and a completion phase")
	flag.BoolVar(&f.observe, "observe", false, "measure the command after -- instead (its -n tasks; observe.go)")
	flag.StringVar(&f.system, "system", "river", "the name -observe reports the command's figures under")
	flag.StringVar(&f.endIndex, "end-index", "river_job_state_and_finalized_at_index", "-observe: the index only completed tasks are in: a transaction writing an entry into it is a completion")
	flag.Parse()
	return f
}

func main() {
	gcfloor.FromEnv() // as the norn binary runs
	f := parseFlags()
	ctx := context.Background()
	if f.observe {
		observe(ctx, f, flag.Args())
		return
	}
	st, err := postgres.Open(ctx, postgres.Config{URL: f.url, Migrate: true})
	must(err)
	defer st.Close()
	if f.writes != "" {
		patterns := strings.Split(f.writes, ",")
		if f.writes == "all" {
			patterns = writePatterns
		}
		for _, p := range patterns {
			if !slices.Contains(writePatterns, p) {
				fmt.Fprintf(os.Stderr, "-writes: unknown pattern %q (want %s)\n", p, strings.Join(writePatterns, ", "))
				os.Exit(2)
			}
		}
		runWrites(ctx, f.url, f.pm, patterns, f.n, f.workers, f.claim, f.fillfactor, f.writesSpec)
		return
	}
	c, err := pgx.Connect(ctx, f.url)
	must(err)
	ensureExtensions(ctx, c)
	// pgcost's own statements are not the store's.
	_, err = c.Exec(ctx, `SET pg_stat_statements.track = 'none'`)
	must(err)
	q := fmt.Sprintf("cost-%d", time.Now().UnixNano())
	keyed := setQueue(ctx, st, q, f)

	var costs []costRow
	var other walCost // the phases' records of no transaction
	phase := func(name string, run func()) (snap, snap) {
		_, err := c.Exec(ctx, `SELECT pg_stat_statements_reset()`)
		must(err)
		a := begin(ctx, c, f.pm)
		la := lsn(ctx, c)
		if pf := os.Getenv("CPUPROF"); pf != "" && name == "submit" {
			out, _ := os.Create(pf)
			pprof.StartCPUProfile(out)
			defer pprof.StopCPUProfile()
		}
		run()
		b := take(ctx, c, f.pm)
		lb := lsn(ctx, c)
		stats(ctx, c, &b)
		report(name, a, b, f.n, tableExtra(a, b, f.n))
		if name == "work" {
			// Claims and completions interleave: statements are told
			// apart by their text, WAL records by their transaction, as
			// -observe does for River. A completion of plain tasks is in
			// no index of tasks (a HOT update); it writes an entry of
			// ended_log_ended, the index only completions write.
			var endIndex string
			must(c.QueryRow(ctx, `SELECT pg_relation_filenode('norn.ended_log_ended'::regclass)::text`).Scan(&endIndex))
			recs := walBetween(ctx, c, la, lb, endIndex)
			if os.Getenv("WALTYPES") != "" {
				printWALTypes("norn", "", f.n, recs)
			}
			costs = append(costs, kindRows(ctx, c, "norn", f.n, b.db-a.db, name, walByKind(recs))...)
		} else {
			row, none := phaseRow(ctx, c, "norn", name, f.n, b.db-a.db, la, lb)
			costs = append(costs, row)
			other.add(none)
		}
		if os.Getenv("STMTS") != "" {
			printStatements(ctx, c, name, f.n)
		}
		return a, b
	}
	phase("submit", func() { submitAll(ctx, st, q, keyed, f) })
	if f.interleave {
		phase("work", func() { burnDown(ctx, st, q, f) })
	} else {
		var held [][]norn.LeaseOp
		phase("claim", func() { held = claimAll(ctx, st, q, f) })
		phase("completion", func() { completeAll(ctx, st, held, f.workers) })
	}
	if !f.interleave {
		costs = append(costs, newCostRow("norn", kindOther, f.n, 0, "-", stmtCost{}, other))
	}
	printCosts(costs)
	_, _ = c.Exec(ctx, `DELETE FROM norn.tasks WHERE queue = $1`, q)
	_, _ = c.Exec(ctx, `VACUUM norn.tasks`)
}

// tableExtra is the row versions pg_stat_user_tables counted between a
// and b, per task: the check on the WAL's counts.
func tableExtra(a, b snap, n int) map[string]any {
	f := float64(n)
	return map[string]any{"tab_ins": round3((b.tab.Ins - a.tab.Ins) / f), "tab_upd": round3((b.tab.Upd - a.tab.Upd) / f),
		"tab_hot": round3((b.tab.HOT - a.tab.HOT) / f), "tab_del": round3((b.tab.Del - a.tab.Del) / f)}
}

// phaseRow is the cost row of a phase that did one kind of work: every
// statement of the phase is the kind's, and every WAL record written by a
// transaction; none is what the records of no transaction wrote
// (checkpoints, vacuum, pruning), which -observe counts as other too.
func phaseRow(ctx context.Context, c *pgx.Conn, system, kind string, n int, dbCPU float64, from, to string) (row costRow, none walCost) {
	byKind, err := stmtsByKind(ctx, c)
	must(err)
	var s stmtCost
	for _, k := range kinds {
		v := byKind[k]
		s.ExecMS += v.ExecMS
		s.Calls += v.Calls
		s.Rows += v.Rows
		s.WALRecords += v.WALRecords
		s.WALBytes += v.WALBytes
		s.WALFPI += v.WALFPI
	}
	var w walCost
	recs := walBetween(ctx, c, from, to, "")
	if os.Getenv("WALTYPES") != "" {
		printWALTypes(system, kind, n, recs)
	}
	for _, r := range recs {
		if r.class == "none" {
			none.add(r.cost())
		} else {
			w.add(r.cost())
		}
	}
	return newCostRow(system, kind, n, dbCPU, kind, s, w), none
}

// kindRows are the cost rows of a phase of several kinds, wal its records
// by kind.
func kindRows(ctx context.Context, c *pgx.Conn, system string, n int, dbCPU float64, phase string, wal map[string]walCost) []costRow {
	byKind, err := stmtsByKind(ctx, c)
	must(err)
	var out []costRow
	for _, k := range kinds {
		out = append(out, newCostRow(system, k, n, dbCPU, phase, byKind[k], wal[k]))
	}
	return out
}

// begin takes the snapshot a phase's figures are measured from.
func begin(ctx context.Context, c *pgx.Conn, pm int) snap {
	var a snap
	stats(ctx, c, &a)
	a0 := take(ctx, c, pm)
	a.db, a.cl, a.lsn, a.t = a0.db, a0.cl, a0.lsn, a0.t
	return a
}

// setQueue gives queue q the flow settings the flags ask for and says
// whether its tasks get concurrency keys.
func setQueue(ctx context.Context, st *postgres.Store, q string, f flags) (keyed bool) {
	var u norn.QueueUpdate
	far := 1 << 30
	if f.limits {
		u.MaxRunning, u.KeyLimit = &far, &far
	}
	if f.rate {
		u.RateLimit = &norn.RateLimit{PerSecond: norn.MaxRatePerSecond, Burst: norn.MaxRateBurst}
	}
	if f.fair {
		by := norn.FairByConcurrencyKey
		u.FairBy = &by
	}
	if f.limits || f.rate || f.fair {
		_, err := st.UpdateQueue(ctx, q, u)
		must(err)
	}
	return f.limits || f.fair
}

// submitAll submits f.n tasks to q in batches of f.batch from
// f.submitters goroutines.
func submitAll(ctx context.Context, st *postgres.Store, q string, keyed bool, f flags) {
	body := json.RawMessage(`{"x":"` + strings.Repeat("a", f.specB-8) + `"}`)
	var next atomic.Int64
	var wg sync.WaitGroup
	for w := 0; w < cmp.Or(f.submitters, f.workers); w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			bt := make([]norn.NewTask, 0, f.batch)
			for {
				k := next.Add(int64(f.batch))
				if k-int64(f.batch) >= int64(f.n) {
					return
				}
				bt = bt[:0]
				for i := k - int64(f.batch); i < k && i < int64(f.n); i++ {
					t := norn.NewTask{Queue: q, Spec: body}
					if keyed {
						t.ConcurrencyKey = "k" + strconv.FormatInt(i%1000, 10)
					}
					bt = append(bt, t)
				}
				_, err := st.Submit(ctx, bt...)
				must(err)
			}
		}()
	}
	wg.Wait()
}

// burnDown claims and completes the f.n tasks of q with f.workers workers.
func burnDown(ctx context.Context, st *postgres.Store, q string, f flags) {
	var done atomic.Int64
	var wg sync.WaitGroup
	for w := 0; w < f.workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			worker := "bench-" + strconv.Itoa(w)
			for done.Load() < int64(f.n) {
				k, err := bench.ClaimRound(ctx, st, worker, q, f.claim, nil)
				must(err)
				done.Add(int64(k))
			}
		}(w)
	}
	wg.Wait()
}

// printStatements prints a phase's statements (reset before it), per
// task: execution time, calls, rows, shared buffers touched, WAL records
// and bytes, and the kind classify gives each.
func printStatements(ctx context.Context, c *pgx.Conn, phase string, n int) {
	fmt.Println(phase + " statements, per task: exec µs, calls, rows, shared blks, WAL records, WAL bytes; kind, query")
	rows, err := c.Query(ctx, `SELECT total_exec_time*1000/$1, calls::float8/$1, rows::float8/$1,
		(shared_blks_hit+shared_blks_read+shared_blks_dirtied)::float8/$1, wal_records::float8/$1, wal_bytes::float8/$1,
		regexp_replace(query, '\s+', ' ', 'g')
		FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
		ORDER BY total_exec_time DESC LIMIT 14`, float64(n))
	must(err)
	for rows.Next() {
		var t, calls, rws, blks, wr, wb float64
		var qq string
		must(rows.Scan(&t, &calls, &rws, &blks, &wr, &wb, &qq))
		fmt.Printf("%7.2f %7.4f %6.3f %6.2f %6.2f %7.1f  %-10s %.110s\n", t, calls, rws, blks, wr, wb, classify(qq), qq)
	}
}

// claimAll claims the f.n tasks of q with f.workers workers claiming
// f.claim at a time, as burnDown does, without completing them: each
// claim's completions, as bench.ClaimRound would send them at once. The
// leases outlast the phases.
func claimAll(ctx context.Context, st *postgres.Store, q string, f flags) [][]norn.LeaseOp {
	var claimed atomic.Int64
	var mu sync.Mutex
	var held [][]norn.LeaseOp
	var wg sync.WaitGroup
	for w := 0; w < f.workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			worker := "bench-" + strconv.Itoa(w)
			for claimed.Load() < int64(f.n) {
				tasks, err := st.Claim(ctx, norn.ClaimRequest{Worker: worker, Queues: []string{q}, N: f.claim,
					Wait: norn.Duration(50 * time.Millisecond), Timeout: norn.Duration(time.Hour)})
				must(err)
				if len(tasks) == 0 {
					continue
				}
				ops := make([]norn.LeaseOp, len(tasks))
				for i, t := range tasks {
					ops[i] = norn.LeaseOp{Op: norn.OpComplete, LeaseRef: norn.LeaseRef{TaskID: t.ID, Worker: worker, Lease: t.Lease}}
				}
				mu.Lock()
				held = append(held, ops)
				mu.Unlock()
				claimed.Add(int64(len(tasks)))
			}
		}(w)
	}
	wg.Wait()
	return held
}

// completeAll completes the claims held, one LeaseBatch per claim, from
// as many workers as claimed.
func completeAll(ctx context.Context, st *postgres.Store, held [][]norn.LeaseOp, workers int) {
	var next atomic.Int64
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1) - 1
				if i >= int64(len(held)) {
					return
				}
				res, err := st.LeaseBatch(ctx, held[i])
				must(err)
				for _, r := range res {
					if r.Err != nil {
						panic(r.Err)
					}
				}
			}
		}()
	}
	wg.Wait()
}
