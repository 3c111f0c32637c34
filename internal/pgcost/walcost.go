package main

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
)

// What a range of WAL wrote, read record by record with pg_walinspect:
// row versions and index entries are counted from the records that write
// them, which is exact whatever the counters of pg_stat_user_tables or a
// later look at the index pages would say (a btree page's dead items are
// removed when it would split, and a vacuum may have run in between).
//
//   - Row versions: Heap/INSERT and Heap/UPDATE (a version not on its
//     page's HOT chain, so every index gets an entry) and Heap/HOT_UPDATE
//     (no index entry) one each, Heap2/MULTI_INSERT (COPY) as many as its
//     description says.
//   - Index entries: btree Btree/INSERT_LEAF and Btree/INSERT_POST one
//     each, and the leaf-level splits (Btree/SPLIT_L or SPLIT_R at level 0),
//     which carry the item whose insert split the page; GIN's
//     Gin/UPDATE_META_PAGE, one per row version added to an index's pending
//     list (GIN with fastupdate, the default: one per row version and index,
//     whatever the number of keys). Entries a pending-list cleanup later
//     moves into the GIN tree are not counted again.
//   - WAL bytes: the records' lengths (full-page images included), which
//     is the WAL's size short of page headers and alignment.
//
// Records are grouped by class: the kind of the transaction that wrote
// them (classOf), or "none" for records of no transaction (checkpoints,
// page pruning, vacuum).

// walCost is what one class of records wrote.
type walCost struct {
	Records, Bytes, FPIBytes float64
	Commits                  float64
	Inserted, Updated, HOT   float64 // row versions
	IndexEntries             float64
}

// RowVersions is every heap tuple written.
func (w walCost) RowVersions() float64 { return w.Inserted + w.Updated + w.HOT }

func (w *walCost) add(o walCost) {
	w.Records += o.Records
	w.Bytes += o.Bytes
	w.FPIBytes += o.FPIBytes
	w.Commits += o.Commits
	w.Inserted += o.Inserted
	w.Updated += o.Updated
	w.HOT += o.HOT
	w.IndexEntries += o.IndexEntries
}

// walRecord is one group of WAL records of the same type and class, as
// walRecordsSQL returns them.
type walRecord struct {
	class       string // from the transaction's record types (classOf)
	rmgr, typ   string // resource manager and record type: Heap, HOT_UPDATE
	desc        string // a description of one of them (MULTI_INSERT: each's own, summed in tuples)
	count       float64
	bytes, fpis float64
	tuples      float64 // MULTI_INSERT: the tuples of all of them
	leafSplits  float64 // SPLIT_L/SPLIT_R: those at level 0
}

// walRecordsSQL groups the records between $1 and $2 by the class of
// their transaction and their type. A transaction's class is decided by
// the records it wrote (its flags: locked a row, updated a row, inserted
// a row, wrote an entry into the index whose relfilenode is $3), which
// classOf reads.
const walRecordsSQL = `WITH r AS (
	SELECT xid, resource_manager AS rm, split_part(record_type, '+', 1) AS typ, record_length, fpi_length, description, block_ref
	FROM pg_get_wal_records_info($1::pg_lsn, $2::pg_lsn)),
x AS (SELECT xid, bool_or(rm = 'Heap' AND typ = 'LOCK') AS locked,
	bool_or(rm = 'Heap' AND typ IN ('UPDATE', 'HOT_UPDATE')) AS updated,
	bool_or((rm = 'Heap' AND typ = 'INSERT') OR (rm = 'Heap2' AND typ = 'MULTI_INSERT')) AS inserted,
	bool_or($3::text <> '' AND rm = 'Btree' AND typ IN ('INSERT_LEAF', 'INSERT_POST', 'SPLIT_L', 'SPLIT_R')
		AND block_ref ~ ('/' || $3::text || ' ')) AS ended
	FROM r WHERE xid <> 0 GROUP BY xid)
SELECT coalesce(CASE WHEN x.ended THEN 'E' ELSE '' END || CASE WHEN x.locked THEN 'L' ELSE '' END || CASE WHEN x.updated THEN 'U' ELSE '' END ||
		CASE WHEN x.inserted THEN 'I' ELSE '' END, 'none'),
	r.rm, r.typ, count(*)::float8, sum(r.record_length)::float8, sum(r.fpi_length)::float8,
	CASE WHEN r.typ = 'MULTI_INSERT' THEN string_agg(r.description, ';') ELSE '' END,
	count(*) FILTER (WHERE r.typ IN ('SPLIT_L', 'SPLIT_R') AND r.description ~ '^level:? 0\M')::float8
FROM r LEFT JOIN x ON x.xid = r.xid
GROUP BY 1, 2, 3`

// walRecords reads the records between from and to (LSNs as text);
// endIndex is the relfilenode of the index only completed tasks are in
// ("": none).
func walRecords(ctx context.Context, c *pgx.Conn, from, to, endIndex string) ([]walRecord, error) {
	rows, err := c.Query(ctx, walRecordsSQL, from, to, endIndex)
	if err != nil {
		return nil, fmt.Errorf("pg_get_wal_records_info: %w", err)
	}
	defer rows.Close()
	var out []walRecord
	for rows.Next() {
		var w walRecord
		var descs string
		if err := rows.Scan(&w.class, &w.rmgr, &w.typ, &w.count, &w.bytes, &w.fpis, &descs, &w.leafSplits); err != nil {
			return nil, err
		}
		if descs != "" {
			for _, d := range strings.Split(descs, ";") {
				n, err := multiInsertTuples(d)
				if err != nil {
					return nil, err
				}
				w.tuples += float64(n)
			}
		}
		out = append(out, w)
	}
	return out, rows.Err()
}

// multiInsertRe reads a Heap2/MULTI_INSERT record's tuple count from its
// description: "3 tuples flags 0x02" (PostgreSQL 15), "ntuples: 3,
// flags: 0x02" (16 on).
var multiInsertRe = regexp.MustCompile(`^(?:(\d+) tuples|ntuples: (\d+))`)

func multiInsertTuples(desc string) (int, error) {
	m := multiInsertRe.FindStringSubmatch(strings.TrimSpace(desc))
	if m == nil {
		return 0, fmt.Errorf("MULTI_INSERT description %q: no tuple count", desc)
	}
	return strconv.Atoi(m[1] + m[2])
}

// cost is what a group of records wrote.
func (w walRecord) cost() walCost {
	c := walCost{Records: w.count, Bytes: w.bytes, FPIBytes: w.fpis}
	switch w.rmgr + "/" + w.typ {
	case "Heap/INSERT":
		c.Inserted = w.count
	case "Heap2/MULTI_INSERT":
		c.Inserted = w.tuples
	case "Heap/UPDATE":
		c.Updated = w.count
	case "Heap/HOT_UPDATE":
		c.HOT = w.count
	case "Btree/INSERT_LEAF", "Btree/INSERT_POST", "Gin/UPDATE_META_PAGE":
		c.IndexEntries = w.count
	case "Btree/SPLIT_L", "Btree/SPLIT_R":
		c.IndexEntries = w.leafSplits
	case "Transaction/COMMIT":
		c.Commits = w.count
	}
	return c
}

// classOf is the task kind of a transaction that wrote the records its
// class names (E an entry into the index of ended tasks, L locked a row, U
// updated one, I inserted one), for a program that submits, claims and
// completes as River and Norn do: a completion writes an entry in an
// index only completions write (River's
// river_job_state_and_finalized_at_index, WHERE finalized_at IS NOT NULL;
// Norn's ended_log_ended, where its plain completions are logged, as they
// are in no index of tasks); a claim locks the rows it takes
// (FOR UPDATE SKIP LOCKED: River's jobs, Norn's ready rows) and writes
// (River updates the jobs, Norn inserts a lease row); a submit only
// inserts. Norn's count of completions in lease rows (countLeaseDone, a
// transaction of its own) locks and updates a lease row, and is counted
// with the claims: a row version per claim, not per task. (A completion may lock rows too: an
// UPDATE whose new row version goes to another page locks the old one
// first.) Records of no transaction, or of one that wrote no rows, are
// other.
func classOf(class string) string {
	switch {
	case strings.Contains(class, "E"):
		return kindCompletion
	case strings.Contains(class, "L"):
		return kindClaim
	case strings.Contains(class, "U"):
		return kindCompletion
	case strings.Contains(class, "I"):
		return kindSubmit
	}
	return kindOther
}

// walByKind sums records by the kind classOf gives their class.
func walByKind(recs []walRecord) map[string]walCost {
	out := map[string]walCost{}
	for _, r := range recs {
		k := classOf(r.class)
		c := out[k]
		c.add(r.cost())
		out[k] = c
	}
	return out
}

// printWALTypes prints, per task, the count and bytes of each record type
// a kind wrote (WALTYPES=1): what the floor of a kind is argued from.
func printWALTypes(system, kind string, n int, recs []walRecord) {
	type tc struct{ count, bytes float64 }
	by := map[string]tc{}
	var names []string
	for _, r := range recs {
		k := kind
		if k == "" {
			k = classOf(r.class)
		}
		name := k + " " + r.rmgr + "/" + r.typ
		if _, ok := by[name]; !ok {
			names = append(names, name)
		}
		v := by[name]
		v.count += r.count
		v.bytes += r.bytes
		by[name] = v
	}
	slices.Sort(names)
	f := float64(n)
	for _, name := range names {
		v := by[name]
		if v.count/f < 0.0005 {
			continue
		}
		fmt.Printf("%s WAL %-40s %8.4f records %8.1f bytes per task (%.1f each)\n", system, name, v.count/f, v.bytes/f, v.bytes/v.count)
	}
}
