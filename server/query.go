package server

import (
	"fmt"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/nornq/norn"
)

// Query-string parsing. Every parameter a route does not know is refused
// (400 naming it), as unknown JSON fields are: a typo such as "stauts"
// must not silently widen a delete.

// filterParams are the parameters parseFilter understands.
var filterParams = []string{"queue", "status", "label", "owner", "id_contains",
	"created_after", "created_before", "updated_after", "updated_before"}

// checkParams refuses parameters outside allowed.
func checkParams(v url.Values, allowed ...[]string) error {
	keys := make([]string, 0, len(v))
	for k := range v {
		keys = append(keys, k)
	}
	sort.Strings(keys)
outer:
	for _, k := range keys {
		for _, set := range allowed {
			for _, a := range set {
				if k == a {
					continue outer
				}
			}
		}
		return norn.Invalid(k, "unknown query parameter")
	}
	return nil
}

// splitList reads a repeatable, comma-separated parameter, dropping empty items.
func splitList(vals []string) []string {
	var out []string
	for _, v := range vals {
		for _, p := range strings.Split(v, ",") {
			if p = strings.TrimSpace(p); p != "" {
				out = append(out, p)
			}
		}
	}
	return out
}

// single returns the only value of a parameter, refusing repeats.
func single(v url.Values, key string) (string, error) {
	vals := v[key]
	switch len(vals) {
	case 0:
		return "", nil
	case 1:
		return vals[0], nil
	}
	return "", norn.Invalid(key, "must be given once")
}

func parseQueues(v url.Values, key string) ([]string, error) {
	qs := splitList(v[key])
	for _, q := range qs {
		if err := norn.ValidateQueue(key, q); err != nil {
			return nil, err
		}
	}
	return qs, nil
}

func parseTime(v url.Values, key string) (time.Time, error) {
	s, err := single(v, key)
	if err != nil || s == "" {
		return time.Time{}, err
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, norn.Invalid(key, "must be an RFC 3339 time such as 2030-01-02T03:04:05Z, got %q", trunc(s))
	}
	return t.UTC(), nil
}

func trunc(s string) string {
	if len(s) > 40 {
		return s[:40] + "…"
	}
	return s
}

// parseFilter reads the task filter parameters (see filterParams).
func parseFilter(v url.Values, maxLabels int) (norn.Filter, error) {
	var f norn.Filter
	var err error
	if f.Queues, err = parseQueues(v, "queue"); err != nil {
		return f, err
	}
	if st := v["status"]; len(st) > 0 {
		if f.Statuses, err = norn.ParseStatuses(strings.Join(st, ",")); err != nil {
			return f, err
		}
	}
	for _, lv := range v["label"] {
		k, val, ok := strings.Cut(lv, ":")
		if !ok {
			return f, norn.Invalid("label", "must be key:value, got %q", trunc(lv))
		}
		if f.Labels == nil {
			f.Labels = map[string]string{}
		}
		if old, dup := f.Labels[k]; dup && old != val {
			return f, norn.Invalid("label", "key %q is given twice with different values", trunc(k))
		}
		f.Labels[k] = val
	}
	if len(f.Labels) > maxLabels {
		return f, norn.Invalid("label", "has %d labels, more than the limit of %d", len(f.Labels), maxLabels)
	}
	if err := norn.ValidateLabels("label", f.Labels); err != nil {
		return f, err
	}
	if f.Owner, err = single(v, "owner"); err != nil {
		return f, err
	}
	if f.IDContains, err = single(v, "id_contains"); err != nil {
		return f, err
	}
	if len(f.IDContains) > norn.MaxIDLength {
		return f, norn.Invalid("id_contains", "is longer than %d bytes", norn.MaxIDLength)
	}
	if f.CreatedAfter, err = parseTime(v, "created_after"); err != nil {
		return f, err
	}
	if f.CreatedBefore, err = parseTime(v, "created_before"); err != nil {
		return f, err
	}
	if f.UpdatedAfter, err = parseTime(v, "updated_after"); err != nil {
		return f, err
	}
	if f.UpdatedBefore, err = parseTime(v, "updated_before"); err != nil {
		return f, err
	}
	return f, nil
}

// parseQuery reads filter, paging and view parameters of GET /v1/tasks.
// maxLimit caps limit (0: no cap, for streams).
func parseQuery(v url.Values, maxLabels, maxLimit int) (norn.Query, error) {
	var q norn.Query
	if err := checkParams(v, filterParams, []string{"limit", "cursor", "order", "view"}); err != nil {
		return q, err
	}
	f, err := parseFilter(v, maxLabels)
	if err != nil {
		return q, err
	}
	q.Filter = f
	if q.Limit, err = parseInt(v, "limit", 0, maxLimit); err != nil {
		return q, err
	}
	if q.Cursor, err = single(v, "cursor"); err != nil {
		return q, err
	}
	if len(q.Cursor) > 4096 {
		return q, norn.Invalid("cursor", "is not a cursor returned by this server")
	}
	order, err := single(v, "order")
	if err != nil {
		return q, err
	}
	switch norn.Order(order) {
	case norn.OrderID, norn.OrderNewest, norn.OrderPriority:
		q.Order = norn.Order(order)
	case "id":
		q.Order = norn.OrderID
	default:
		return q, norn.Invalid("order", "must be id, newest or priority, got %q", trunc(order))
	}
	view, err := single(v, "view")
	if err != nil {
		return q, err
	}
	switch view {
	case "", "full":
	case "summary":
		q.Summary = true
	default:
		return q, norn.Invalid("view", "must be summary or full, got %q", trunc(view))
	}
	return q, nil
}

// parseInt reads a non-negative integer parameter, at most max when max > 0.
func parseInt(v url.Values, key string, def, max int) (int, error) {
	s, err := single(v, key)
	if err != nil {
		return 0, err
	}
	if s == "" {
		return def, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 {
		return 0, norn.Invalid(key, "must be a non-negative integer, got %q", trunc(s))
	}
	if max > 0 && n > max {
		return 0, norn.Invalid(key, "must be at most %d, got %d", max, n)
	}
	return n, nil
}

// parseGroup reads the group parameter of /v1/tasks/count: only
// "queue,status" (in either order) is supported.
func parseGroup(v url.Values) (bool, error) {
	s, err := single(v, "group")
	if err != nil || s == "" {
		return false, err
	}
	parts := splitList([]string{s})
	sort.Strings(parts)
	if len(parts) == 2 && parts[0] == "queue" && parts[1] == "status" {
		return true, nil
	}
	return false, norn.Invalid("group", "only group=queue,status is supported, got %q", trunc(s))
}

// parseEventFilter reads the parameters of /v1/events.
func parseEventFilter(v url.Values) (norn.EventFilter, error) {
	var f norn.EventFilter
	if err := checkParams(v, []string{"queue", "task"}); err != nil {
		return f, err
	}
	var err error
	if f.Queues, err = parseQueues(v, "queue"); err != nil {
		return f, err
	}
	if f.TaskID, err = single(v, "task"); err != nil {
		return f, err
	}
	if f.TaskID != "" {
		if err := norn.ValidateID("task", f.TaskID); err != nil {
			return f, err
		}
	}
	return f, nil
}

// parseLogParams reads after and limit of GET /v1/tasks/{id}/log.
func parseLogParams(v url.Values) (after uint64, limit int, err error) {
	if err := checkParams(v, []string{"after", "limit"}); err != nil {
		return 0, 0, err
	}
	s, err := single(v, "after")
	if err != nil {
		return 0, 0, err
	}
	if s != "" {
		if after, err = strconv.ParseUint(s, 10, 64); err != nil {
			return 0, 0, norn.Invalid("after", "must be a non-negative integer, got %q", trunc(s))
		}
	}
	limit, err = parseInt(v, "limit", 0, 0)
	return after, limit, err
}

// splitIDs splits the {id} path segment of GET /v1/tasks/{id1},{id2},….
func splitIDs(seg string, max int) ([]string, error) {
	ids := strings.Split(seg, ",")
	if len(ids) > max {
		return nil, norn.TooLarge("id", "asks for %d ids, more than the limit of %d", len(ids), max)
	}
	for i, id := range ids {
		if err := norn.ValidateID(fmt.Sprintf("id[%d]", i), id); err != nil {
			return nil, err
		}
	}
	return ids, nil
}
