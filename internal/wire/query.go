package wire

import (
	"fmt"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/nornq/norn"
)

// Query strings, both ways: the client encodes with FilterValues and
// friends, the server parses with ParseFilter and friends. Every parameter
// a route does not know is refused (400 naming it), as unknown JSON fields
// are: a typo such as "stauts" must not silently widen a delete.

// FilterParams are the parameters ParseFilter understands.
var FilterParams = []string{"queue", "status", "label", "owner", "id_contains",
	"depends_on", "unique_key", "batch", "created_after", "created_before", "updated_after", "updated_before"}

// CheckParams refuses parameters outside allowed.
func CheckParams(v url.Values, allowed ...[]string) error {
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
		return time.Time{}, norn.Invalid(key, "must be an RFC 3339 time such as 2030-01-02T03:04:05Z, got %q", Trunc(s))
	}
	t = t.UTC()
	return t, norn.ValidateTime(key, t)
}

func Trunc(s string) string {
	if len(s) > 40 {
		return s[:40] + "…"
	}
	return s
}

// ParseFilter reads the task filter parameters (see FilterParams).
func ParseFilter(v url.Values, maxLabels int) (norn.Filter, error) {
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
	if f.Labels, err = parseLabels(v, maxLabels); err != nil {
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
	if f.DependsOn, err = single(v, "depends_on"); err != nil {
		return f, err
	}
	if f.DependsOn != "" {
		if err := norn.ValidateID("depends_on", f.DependsOn); err != nil {
			return f, err
		}
	}
	if f.UniqueKey, err = single(v, "unique_key"); err != nil {
		return f, err
	}
	if f.UniqueKey != "" {
		if err := norn.ValidateUniqueKey("unique_key", f.UniqueKey); err != nil {
			return f, err
		}
	}
	if f.Batch, err = single(v, "batch"); err != nil {
		return f, err
	}
	if f.Batch != "" {
		if err := norn.ValidateBatchID("batch", f.Batch); err != nil {
			return f, err
		}
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

// ParseQuery reads filter, paging and view parameters of GET /v1/tasks.
// maxLimit caps limit (0: no cap, for streams).
func ParseQuery(v url.Values, maxLabels, maxLimit int) (norn.Query, error) {
	var q norn.Query
	if err := CheckParams(v, FilterParams, []string{"limit", "cursor", "order", "view"}); err != nil {
		return q, err
	}
	f, err := ParseFilter(v, maxLabels)
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
		return q, norn.Invalid("order", "must be id, newest or priority, got %q", Trunc(order))
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
		return q, norn.Invalid("view", "must be summary or full, got %q", Trunc(view))
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
		return 0, norn.Invalid(key, "must be a non-negative integer, got %q", Trunc(s))
	}
	if max > 0 && n > max {
		return 0, norn.Invalid(key, "must be at most %d, got %d", max, n)
	}
	return n, nil
}

// ParseGroup reads the group parameter of /v1/tasks/count: only
// "queue,status" (in either order) is supported.
func ParseGroup(v url.Values) (bool, error) {
	s, err := single(v, "group")
	if err != nil || s == "" {
		return false, err
	}
	parts := splitList([]string{s})
	sort.Strings(parts)
	if len(parts) == 2 && parts[0] == "queue" && parts[1] == "status" {
		return true, nil
	}
	return false, norn.Invalid("group", "only group=queue,status is supported, got %q", Trunc(s))
}

// ParseEventFilter reads the parameters of /v1/events.
func ParseEventFilter(v url.Values) (norn.EventFilter, error) {
	var f norn.EventFilter
	if err := CheckParams(v, []string{"queue", "task"}); err != nil {
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

// ParseLogParams reads after and limit of GET /v1/tasks/{id}/log.
func ParseLogParams(v url.Values) (after uint64, limit int, err error) {
	if err := CheckParams(v, []string{"after", "limit"}); err != nil {
		return 0, 0, err
	}
	s, err := single(v, "after")
	if err != nil {
		return 0, 0, err
	}
	if s != "" {
		if after, err = strconv.ParseUint(s, 10, 64); err != nil {
			return 0, 0, norn.Invalid("after", "must be a non-negative integer, got %q", Trunc(s))
		}
		if err := norn.ValidateSeq("after", after); err != nil {
			return 0, 0, err
		}
	}
	limit, err = parseInt(v, "limit", 0, 0)
	return after, limit, err
}

// SplitIDs splits the {id} path segment of GET /v1/tasks/{id1},{id2},….
func SplitIDs(seg string, max int) ([]string, error) {
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

// FilterValues encodes f as the query parameters ParseFilter reads (GET
// /v1/tasks, /v1/tasks/count and DELETE /v1/tasks). Times keep nanoseconds.
func FilterValues(f norn.Filter) url.Values {
	v := url.Values{}
	for _, q := range f.Queues {
		v.Add("queue", q)
	}
	if len(f.Statuses) > 0 {
		s := make([]string, len(f.Statuses))
		for i, st := range f.Statuses {
			s[i] = string(st)
		}
		v.Set("status", strings.Join(s, ","))
	}
	keys := make([]string, 0, len(f.Labels))
	for k := range f.Labels {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		v.Add("label", k+":"+f.Labels[k])
	}
	if f.Owner != "" {
		v.Set("owner", f.Owner)
	}
	if f.IDContains != "" {
		v.Set("id_contains", f.IDContains)
	}
	if f.DependsOn != "" {
		v.Set("depends_on", f.DependsOn)
	}
	if f.UniqueKey != "" {
		v.Set("unique_key", f.UniqueKey)
	}
	if f.Batch != "" {
		v.Set("batch", f.Batch)
	}
	setTime(v, "created_after", f.CreatedAfter)
	setTime(v, "created_before", f.CreatedBefore)
	setTime(v, "updated_after", f.UpdatedAfter)
	setTime(v, "updated_before", f.UpdatedBefore)
	return v
}

func setTime(v url.Values, key string, t time.Time) {
	if !t.IsZero() {
		v.Set(key, t.UTC().Format(time.RFC3339Nano))
	}
}

// QueryValues encodes q (filter, paging, order and view) as the query
// parameters ParseQuery reads.
func QueryValues(q norn.Query) url.Values {
	v := FilterValues(q.Filter)
	if q.Limit != 0 {
		v.Set("limit", strconv.Itoa(q.Limit))
	}
	if q.Cursor != "" {
		v.Set("cursor", q.Cursor)
	}
	if q.Order != norn.OrderID {
		v.Set("order", string(q.Order))
	}
	if q.Summary {
		v.Set("view", "summary")
	}
	return v
}

// EventFilterValues encodes f as the parameters ParseEventFilter reads.
func EventFilterValues(f norn.EventFilter) url.Values {
	v := url.Values{}
	for _, q := range f.Queues {
		v.Add("queue", q)
	}
	if f.TaskID != "" {
		v.Set("task", f.TaskID)
	}
	return v
}

// LogValues encodes the parameters ParseLogParams reads.
func LogValues(after uint64, limit int) url.Values {
	v := url.Values{}
	if after > 0 {
		v.Set("after", strconv.FormatUint(after, 10))
	}
	if limit != 0 {
		v.Set("limit", strconv.Itoa(limit))
	}
	return v
}

// GroupedFilterValues is FilterValues plus group=queue,status, which
// ParseGroup reads.
func GroupedFilterValues(f norn.Filter) url.Values {
	v := FilterValues(f)
	v.Set("group", "queue,status")
	return v
}

// IDsPath is the path of GET /v1/tasks/{id1},{id2},… (SplitIDs reads it
// back); ids must be valid (norn.ValidateID).
func IDsPath(ids []string) string {
	parts := make([]string, len(ids))
	for i, id := range ids {
		parts[i] = url.PathEscape(id)
	}
	return "/v1/tasks/" + strings.Join(parts, ",")
}

// MaxQueryParams bounds the parameters of one query string. Go's
// url.ParseQuery silently drops every pair past its own limit; here a query
// string that long is refused.
const MaxQueryParams = 1000

// ParseRawQuery parses a query string strictly. url.ParseQuery (and so
// Request.URL.Query) drops pairs it cannot parse — a ';', a malformed
// '%' escape — and keeps the rest, so "status=ready&queue=junk;" would
// become a filter on every queue. Here any pair that does not parse exactly
// is refused with an invalid_argument naming the parameter. On success the
// result equals url.ParseQuery's.
func ParseRawQuery(raw string) (url.Values, error) {
	v := url.Values{}
	n := 0
	for raw != "" {
		var pair string
		pair, raw, _ = strings.Cut(raw, "&")
		if pair == "" {
			continue
		}
		n++
		if n > MaxQueryParams {
			return nil, norn.Invalid("query", "has more than %d parameters", MaxQueryParams)
		}
		rawKey, rawValue, _ := strings.Cut(pair, "=")
		key, kerr := url.QueryUnescape(rawKey)
		name := key
		if kerr != nil {
			name = rawKey
		}
		if strings.Contains(pair, ";") {
			return nil, norn.Invalid(Trunc(name), "contains ';': separate parameters with '&' and escape ';' in values as %%3B")
		}
		if kerr != nil {
			return nil, norn.Invalid(Trunc(name), "parameter name is not a valid query escape: %v", kerr)
		}
		if key == "" {
			return nil, norn.Invalid("query", "has a parameter with no name: %q", Trunc(pair))
		}
		value, err := url.QueryUnescape(rawValue)
		if err != nil {
			return nil, norn.Invalid(Trunc(key), "value is not a valid query escape: %v", err)
		}
		v[key] = append(v[key], value)
	}
	return v, nil
}

// ParseThroughputParams reads GET /v1/stats/throughput's parameters:
// queue (repeatable or comma-separated; none means all) and since, an RFC
// 3339 time or a duration such as 90m meaning that long before now. A
// missing since is norn.ThroughputWindow before now; one further back than
// norn.ThroughputKeepHourly is that far back (the server clamps further to
// what it holds).
func ParseThroughputParams(v url.Values, now time.Time) (queues []string, since time.Time, err error) {
	if err := CheckParams(v, []string{"queue", "since"}); err != nil {
		return nil, time.Time{}, err
	}
	if queues, err = parseQueues(v, "queue"); err != nil {
		return nil, time.Time{}, err
	}
	s, err := single(v, "since")
	if err != nil {
		return nil, time.Time{}, err
	}
	since = now.Add(-norn.ThroughputWindow)
	start := now.Add(-norn.ThroughputKeepHourly)
	if s != "" {
		if d, derr := time.ParseDuration(s); derr == nil {
			if d < 0 {
				return nil, time.Time{}, norn.Invalid("since", "a duration must not be negative, got %q", Trunc(s))
			}
			since = now.Add(-min(d, norn.ThroughputKeepHourly))
		} else if t, terr := time.Parse(time.RFC3339Nano, s); terr == nil {
			if err := norn.ValidateTime("since", t); err != nil {
				return nil, time.Time{}, err
			}
			since = t.UTC()
			if since.Before(start) {
				since = start
			}
		} else {
			return nil, time.Time{}, norn.Invalid("since", "must be an RFC 3339 time such as 2030-01-02T03:04:05Z or a duration such as 90m, got %q", Trunc(s))
		}
	}
	return queues, since, nil
}

// ThroughputValues encodes the parameters ParseThroughputParams reads; a
// zero since is left out (the whole window).
func ThroughputValues(queues []string, since time.Time) url.Values {
	v := url.Values{}
	for _, q := range queues {
		v.Add("queue", q)
	}
	if !since.IsZero() {
		v.Set("since", since.UTC().Format(time.RFC3339Nano))
	}
	return v
}

// parseLabels reads the repeatable label=key:value parameter.
func parseLabels(v url.Values, maxLabels int) (map[string]string, error) {
	var labels map[string]string
	for _, lv := range v["label"] {
		k, val, ok := strings.Cut(lv, ":")
		if !ok {
			return nil, norn.Invalid("label", "must be key:value, got %q", Trunc(lv))
		}
		if labels == nil {
			labels = map[string]string{}
		}
		if old, dup := labels[k]; dup && old != val {
			return nil, norn.Invalid("label", "key %q is given twice with different values", Trunc(k))
		}
		labels[k] = val
	}
	if len(labels) > maxLabels {
		return nil, norn.Invalid("label", "has %d labels, more than the limit of %d", len(labels), maxLabels)
	}
	if err := norn.ValidateLabels("label", labels); err != nil {
		return nil, err
	}
	return labels, nil
}

// BatchParams are the parameters of GET /v1/batches.
var BatchParams = []string{"state", "label", "after", "limit"}

// ParseBatchQuery reads the parameters of GET /v1/batches.
func ParseBatchQuery(v url.Values) (norn.BatchQuery, error) {
	var q norn.BatchQuery
	if err := CheckParams(v, BatchParams); err != nil {
		return q, err
	}
	st, err := single(v, "state")
	if err != nil {
		return q, err
	}
	q.State = norn.BatchState(st)
	if q.Labels, err = parseLabels(v, norn.MaxLabels); err != nil {
		return q, err
	}
	if q.After, err = single(v, "after"); err != nil {
		return q, err
	}
	if len(q.After) > norn.MaxIDLength {
		return q, norn.Invalid("after", "is longer than %d bytes", norn.MaxIDLength)
	}
	if q.Limit, err = parseInt(v, "limit", 0, norn.MaxListLimit); err != nil {
		return q, err
	}
	return q, q.Validate()
}

// BatchQueryValues is ParseBatchQuery's inverse.
func BatchQueryValues(q norn.BatchQuery) url.Values {
	v := url.Values{}
	if q.State != "" {
		v.Set("state", string(q.State))
	}
	keys := make([]string, 0, len(q.Labels))
	for k := range q.Labels {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		v.Add("label", k+":"+q.Labels[k])
	}
	if q.After != "" {
		v.Set("after", q.After)
	}
	if q.Limit != 0 {
		v.Set("limit", strconv.Itoa(q.Limit))
	}
	return v
}

// ParseAfter reads the after parameter of GET /v1/tasks/{id}/signals (0
// when absent).
func ParseAfter(v url.Values) (uint64, error) {
	s, err := single(v, "after")
	if err != nil || s == "" {
		return 0, err
	}
	after, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, norn.Invalid("after", "must be a non-negative integer, got %q", Trunc(s))
	}
	return after, norn.ValidateSeq("after", after)
}

// SequenceParams are the query parameters of GET /v1/queues/{queue}/sequences.
var SequenceParams = []string{"halted", "after", "limit"}

// ParseSequenceQuery reads the query of GET /v1/queues/{queue}/sequences.
func ParseSequenceQuery(v url.Values) (norn.SequenceQuery, error) {
	var q norn.SequenceQuery
	if err := CheckParams(v, SequenceParams); err != nil {
		return q, err
	}
	h, err := single(v, "halted")
	if err != nil {
		return q, err
	}
	switch h {
	case "", "false":
	case "true":
		q.Halted = true
	default:
		return q, norn.Invalid("halted", "must be true or false, got %q", Trunc(h))
	}
	if q.After, err = single(v, "after"); err != nil {
		return q, err
	}
	if q.Limit, err = parseInt(v, "limit", 0, norn.MaxListLimit); err != nil {
		return q, err
	}
	return q, q.Validate()
}

// SequenceQueryValues is ParseSequenceQuery's inverse.
func SequenceQueryValues(q norn.SequenceQuery) url.Values {
	v := url.Values{}
	if q.Halted {
		v.Set("halted", "true")
	}
	if q.After != "" {
		v.Set("after", q.After)
	}
	if q.Limit != 0 {
		v.Set("limit", strconv.Itoa(q.Limit))
	}
	return v
}
