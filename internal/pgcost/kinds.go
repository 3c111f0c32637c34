package main

import (
	"regexp"
	"strings"
)

// A statement's kind is the part of a task's life it pays for: submit,
// claim, completion, or other (everything else: schema checks, leader
// election, maintenance, the statistics queries of pgcost itself).
const (
	kindSubmit     = "submit"
	kindClaim      = "claim"
	kindCompletion = "completion"
	kindOther      = "other"
)

var kinds = []string{kindSubmit, kindClaim, kindCompletion, kindOther}

// The rules read what a statement writes, not what it is called, so that
// they keep holding while the statements change. pg_stat_statements shows
// most constants as parameters ($n), so no rule relies on one. Norn's task
// rows are in a table named tasks, its claims in leases; River's jobs in
// river_job, and its statements start with a comment naming them.
var (
	// A completion writes a task's result (Norn's merged completion),
	// releases the tasks that depend on the completed ones (Norn's, after
	// each completion), or counts completions against their lease rows and
	// drops the rows done (Norn's countLeaseDone, after the completions);
	// River's JobSetStateIfRunningMany (its new state comes in a parameter,
	// so the name is what shows it).
	completionRe = regexp.MustCompile(`\bset status = \S+, progress = \S+, result = |update \S*leases l set done = |` +
		`delete from \S*leases l where l\.id = any\(\$1\) and l\.done|from \S*leases l where l\.id = any\(\$1\) order by l\.id for update|` +
		`\bdepends_on && \$1::text\[\]|jobsetstateifrunning|jobsetcompleteifrunning`)
	// A claim writes a lease row or counts an attempt on the task (Norn's
	// claims, and the settling of a lease row into its tasks' rows, which
	// writes what the claim left out), or is River's JobGetAvailable (its
	// UPDATE to running counts an attempt too).
	claimRe = regexp.MustCompile(`insert into \S*leases\b|\battempts = t\.attempts \+ (\$\d+|1)\b|` +
		`jobgetavailable|\battempt = river_job\.attempt \+ (\$\d+|1)\b`)
	// A submit writes new tasks: Norn's COPY into tasks and the ready rows
	// it inserts with them, River's JobInsertFastMany (an INSERT into
	// river_job, or a COPY).
	submitRe = regexp.MustCompile(`^copy \S*\btasks\b|insert into \S*\b(tasks|ready|river_job)\b|^copy \S*\briver_job\b|jobinsertfast`)
	spaceRe  = regexp.MustCompile(`\s+`)
	quoteRe  = regexp.MustCompile(`"([a-z_][a-z0-9_]*)"`)
)

// classify returns the kind of the statement text q (as pg_stat_statements
// shows it: parameters as $n, comments kept).
func classify(q string) string {
	s := strings.ToLower(spaceRe.ReplaceAllString(q, " "))
	s = quoteRe.ReplaceAllString(s, "$1") // "norn".tasks → norn.tasks
	s = strings.TrimSpace(s)
	// River's queries start with a comment naming them; keep it for the
	// rules above, drop it before the ^ rules.
	body := s
	if strings.HasPrefix(body, "-- ") {
		if i := strings.Index(body, " with "); i >= 0 {
			body = body[i+1:]
		}
	}
	switch {
	case completionRe.MatchString(s):
		return kindCompletion
	case claimRe.MatchString(s):
		return kindClaim
	case submitRe.MatchString(s) || submitRe.MatchString(body):
		return kindSubmit
	}
	return kindOther
}
