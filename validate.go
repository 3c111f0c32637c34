package norn

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// Limits every store enforces (the server adds request-size limits on top).
const (
	MaxIDLength       = 128
	MaxQueueLength    = 128
	MaxSpecBytes      = 1 << 20 // 1 MiB
	MaxResultBytes    = 1 << 20
	MaxLogBytes       = 1 << 20
	MaxLabels         = 64
	MaxLabelKeyLength = 128
	MaxLabelValLength = 1024
	// MaxConcurrencyKeyLength bounds NewTask.ConcurrencyKey.
	MaxConcurrencyKeyLength = 256
	MaxDependencies         = 1000
	MaxBatch                = 10000
	MaxClaim                = 1000
	MaxClaimWait            = 5 * time.Minute
	// MaxWeight bounds a queue's weight in ClaimRequest.Weights.
	MaxWeight        = 1000
	MaxListLimit     = 1000
	DefaultListLimit = 100
	MaxErrorBytes    = 64 << 10
	// MaxWorkerNameLength and MaxWorkerQueues bound a worker registration.
	MaxWorkerNameLength = 256
	MaxWorkerQueues     = 1000
	// MaxUniqueKeyLength bounds NewTask.UniqueKey.
	MaxUniqueKeyLength = 256
)

// ValidQueueName reports whether q is 1..128 chars of [A-Za-z0-9._:-].
func ValidQueueName(q string) bool {
	if len(q) == 0 || len(q) > MaxQueueLength {
		return false
	}
	for i := 0; i < len(q); i++ {
		c := q[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9',
			c == '.', c == '_', c == ':', c == '-':
		default:
			return false
		}
	}
	return true
}

// ValidateQueue returns an invalid_argument error naming field if q is not a valid queue name.
func ValidateQueue(field, q string) error {
	if !ValidQueueName(q) {
		if q == "" {
			return Invalid(field, "queue name is required")
		}
		return Invalid(field, "queue name %q must be 1..%d characters of [A-Za-z0-9._:-]", truncate(q, 40), MaxQueueLength)
	}
	return nil
}

// ValidateID checks a task id: 1..128 bytes of printable, non-space UTF-8
// without '/' or ',' (they separate ids in URLs), and not the reserved "count".
func ValidateID(field, id string) error {
	if id == "" {
		return Invalid(field, "id is required")
	}
	if len(id) > MaxIDLength {
		return Invalid(field, "id is longer than %d bytes", MaxIDLength)
	}
	if id == "count" {
		// GET /v1/tasks/count is the count route, so a task with this id
		// could never be read over HTTP.
		return Invalid(field, "id %q is reserved", id)
	}
	for i := 0; i < len(id); i++ {
		if b := id[i]; b >= utf8.RuneSelf || !idByteOK[b] {
			return validateIDRunes(field, id)
		}
	}
	return nil
}

// idByteOK marks the ASCII bytes an id may hold. Every claim, completion
// and submit checks its ids: a table lookup per byte costs a fraction of
// decoding runes, which validateIDRunes does only for ids with a byte
// that is refused or not ASCII.
var idByteOK = func() (ok [utf8.RuneSelf]bool) {
	for b := range ok {
		r := rune(b)
		ok[b] = !(r <= ' ' || r == 0x7f || r == '/' || r == ',' || r == '?' || r == '#' || r == '%')
	}
	return ok
}()

// validateIDRunes is ValidateID's check of every character, with the
// error naming the first one refused.
func validateIDRunes(field, id string) error {
	for _, r := range id {
		if r <= ' ' || r == 0x7f || r == '/' || r == ',' || r == '?' || r == '#' || r == '%' || r == 0xfffd {
			return Invalid(field, "id %q contains a character that is not allowed (space, control, '/', ',', '?', '#', '%%')", truncate(id, 40))
		}
		if invisible(r) {
			return Invalid(field, "id %q contains the invisible or layout character %U (spaces, controls, zero-width and bidirectional formatting characters are not allowed)", truncate(id, 40), r)
		}
	}
	return nil
}

// invisible reports whether r is a character that shows nothing or
// changes how the text around it is laid out: controls, spaces and line
// or paragraph separators, and formatting characters (zero-width spaces
// and joiners, bidirectional overrides and isolates, the byte order mark,
// tags). An id holding one can look exactly like another id in a listing,
// a log line or the dashboard, or reorder what is shown around it.
func invisible(r rune) bool {
	if r < 0x80 {
		// ASCII: only the controls and the space (the range tables below
		// cost a search per character, on every id of every call).
		return r <= ' ' || r == 0x7f
	}
	return unicode.IsControl(r) || unicode.Is(unicode.Cf, r) || unicode.Is(unicode.Z, r) ||
		(r >= 0xfe00 && r <= 0xfe0f) // variation selectors
}

// bidiControl reports whether r is a bidirectional embedding, override or
// isolate control (U+202A–U+202E, U+2066–U+2069), which reorder how the
// text after them is shown.
func bidiControl(r rune) bool {
	return (r >= 0x202a && r <= 0x202e) || (r >= 0x2066 && r <= 0x2069)
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// ValidateJSON checks that raw is a single valid JSON value no larger than
// max, in valid UTF-8: encoding/json accepts invalid UTF-8 inside strings,
// and a stored spec that is not UTF-8 would break strict JSON readers of
// every listing it appears in.
func ValidateJSON(field string, raw json.RawMessage, max int) error {
	if len(raw) > max {
		return TooLarge(field, "is %d bytes, more than the limit of %d", len(raw), max)
	}
	if len(raw) > 0 && !json.Valid(raw) {
		return Invalid(field, "is not valid JSON")
	}
	if !utf8.Valid(raw) {
		return Invalid(field, "is not valid UTF-8")
	}
	return nil
}

// ValidateLabels checks the number and size of labels.
func ValidateLabels(field string, labels map[string]string) error {
	if len(labels) > MaxLabels {
		return Invalid(field, "has %d labels, more than the limit of %d", len(labels), MaxLabels)
	}
	for k, v := range labels {
		if k == "" || len(k) > MaxLabelKeyLength {
			return Invalid(field, "label key %q must be 1..%d bytes", truncate(k, 40), MaxLabelKeyLength)
		}
		if strings.ContainsAny(k, ":,") {
			return Invalid(field, "label key %q must not contain ':' or ','", truncate(k, 40))
		}
		if !utf8.ValidString(k) {
			return Invalid(field, "label key %q is not valid UTF-8", truncate(k, 40))
		}
		for _, r := range k {
			if unicode.IsControl(r) || unicode.Is(unicode.Cf, r) || r == 0x2028 || r == 0x2029 {
				return Invalid(field, "label key %q contains the control or formatting character %U", truncate(k, 40), r)
			}
		}
		if len(v) > MaxLabelValLength {
			return Invalid(field+"."+k, "label value is longer than %d bytes", MaxLabelValLength)
		}
		if !utf8.ValidString(v) {
			return Invalid(field+"."+k, "label value is not valid UTF-8")
		}
		for _, r := range v {
			if unicode.IsControl(r) || bidiControl(r) || r == 0x2028 || r == 0x2029 {
				return Invalid(field+"."+k, "label value contains the control character %U (controls such as NUL and newline, line separators and bidirectional overrides are not allowed)", r)
			}
		}
	}
	return nil
}

// ValidateConcurrencyKey checks a concurrency key: 1..256 bytes of UTF-8
// without control characters (it appears in URLs, metrics and logs).
func ValidateConcurrencyKey(field, key string) error {
	return validateKey(field, key, MaxConcurrencyKeyLength)
}

// validateKey checks a key a caller groups or deduplicates tasks by:
// 1..max bytes of valid UTF-8 without control characters, since keys
// appear in URLs, logs, metrics and the dashboard.
func validateKey(field, key string, max int) error {
	if key == "" {
		return Invalid(field, "key is required")
	}
	if len(key) > max {
		return Invalid(field, "is %d bytes, more than the limit of %d", len(key), max)
	}
	if !utf8.ValidString(key) {
		return Invalid(field, "is not valid UTF-8")
	}
	for _, r := range key {
		if unicode.IsControl(r) {
			return Invalid(field, "contains the control character %U", r)
		}
	}
	return nil
}

// ValidateRetry checks a retry policy.
func ValidateRetry(field string, r *RetryPolicy) error {
	if r == nil {
		return nil
	}
	if err := ValidateCount(field+".max_retries", r.MaxRetries); err != nil {
		return err
	}
	if r.Base < 0 || r.Max < 0 {
		return Invalid(field, "durations must not be negative")
	}
	if err := ValidateDuration(field+".base", r.Base); err != nil {
		return err
	}
	if err := ValidateDuration(field+".max", r.Max); err != nil {
		return err
	}
	if r.Max > 0 && r.Base > r.Max {
		return Invalid(field+".base", "base %s is larger than max %s", r.Base, r.Max)
	}
	switch r.Jitter {
	case "", JitterNone, JitterFull, JitterEqual:
	default:
		return Invalid(field+".jitter", "unknown jitter %q: use \"none\", \"full\" or \"equal\"", r.Jitter)
	}
	return nil
}

// Validate checks a submission without touching any store. Dependencies are
// only checked for shape here; their existence is the store's job.
func (n *NewTask) Validate() error {
	if n.ID != "" {
		if err := ValidateID("id", n.ID); err != nil {
			return err
		}
	}
	if err := ValidateQueue("queue", n.Queue); err != nil {
		return err
	}
	if err := ValidateJSON("spec", n.Spec, MaxSpecBytes); err != nil {
		return err
	}
	if err := ValidateLabels("labels", n.Labels); err != nil {
		return err
	}
	if n.ConcurrencyKey != "" {
		if err := ValidateConcurrencyKey("concurrency_key", n.ConcurrencyKey); err != nil {
			return err
		}
	}
	if err := ValidateTraceparent("traceparent", n.Traceparent); err != nil {
		return err
	}
	if err := ValidateTracestate("tracestate", n.Tracestate); err != nil {
		return err
	}
	if n.Tracestate != "" && n.Traceparent == "" {
		return Invalid("tracestate", "is only meaningful with a traceparent")
	}
	if err := ValidateTime("run_at", n.RunAt); err != nil {
		return err
	}
	if err := ValidateTime("expires_at", n.ExpiresAt); err != nil {
		return err
	}
	if !n.ExpiresAt.IsZero() && n.ExpireIn != 0 {
		return Invalid("expire_in", "give expires_at or expire_in, not both")
	}
	for _, d := range []struct {
		field string
		d     Duration
	}{{"delay", n.Delay}, {"timeout", n.Timeout}, {"max_runtime", n.MaxRuntime}, {"expire_in", n.ExpireIn}} {
		if err := ValidateDuration(d.field, d.d); err != nil {
			return err
		}
	}
	if n.MaxAttempts != nil {
		if err := ValidateCount("max_attempts", *n.MaxAttempts); err != nil {
			return err
		}
	}
	if err := ValidateRetry("retry", n.Retry); err != nil {
		return err
	}
	if n.UniqueKey != "" {
		if err := ValidateUniqueKey("unique_key", n.UniqueKey); err != nil {
			return err
		}
	}
	if err := ValidateDuration("unique_for", n.UniqueFor); err != nil {
		return err
	}
	if n.UniqueFor > 0 && n.UniqueKey == "" {
		return Invalid("unique_for", "needs a unique_key")
	}
	if err := n.validateDebounce(); err != nil {
		return err
	}
	if n.Batch != "" {
		if err := ValidateBatchID("batch", n.Batch); err != nil {
			return err
		}
	}
	if err := n.validateSequence(); err != nil {
		return err
	}
	if err := ValidateOnDependencyFailure("on_dependency_failure", n.OnDependencyFailure); err != nil {
		return err
	}
	if len(n.DependsOn) > MaxDependencies {
		return Invalid("depends_on", "has %d ids, more than the limit of %d", len(n.DependsOn), MaxDependencies)
	}
	seen := make(map[string]bool, len(n.DependsOn))
	for i, d := range n.DependsOn {
		f := fmt.Sprintf("depends_on[%d]", i)
		if err := ValidateID(f, d); err != nil {
			return err
		}
		if d == n.ID {
			return Invalid(f, "a task cannot depend on itself")
		}
		if seen[d] {
			return Invalid(f, "duplicate dependency %q", d)
		}
		seen[d] = true
	}
	return nil
}

// ValidateBatch validates every task of a batch, naming the index of the
// first invalid one ("tasks[3].queue"), and rejects duplicate ids in the batch.
func ValidateBatch(prefix string, tasks []NewTask) error {
	if len(tasks) > MaxBatch {
		return TooLarge(prefix, "batch has %d tasks, more than the limit of %d", len(tasks), MaxBatch)
	}
	ids := make(map[string]int, len(tasks))
	for i := range tasks {
		p := fmt.Sprintf("%s[%d]", prefix, i)
		if err := tasks[i].Validate(); err != nil {
			return WithFieldPrefix(err, p)
		}
		if id := tasks[i].ID; id != "" {
			if j, ok := ids[id]; ok {
				return Invalid(p+".id", "id %q appears twice in the batch (also at index %d)", id, j)
			}
			ids[id] = i
		}
	}
	return nil
}

// ValidateProgress checks 0 ≤ p ≤ 1.
func ValidateProgress(field string, p float64) error {
	if math.IsNaN(p) || p < 0 || p > 1 {
		return Invalid(field, "progress must be between 0 and 1")
	}
	return nil
}

// ValidateErrorInfo checks a worker-supplied error.
func ValidateErrorInfo(field string, e ErrorInfo) error {
	if len(e.Code)+len(e.Description) > MaxErrorBytes {
		return TooLarge(field, "error is larger than %d bytes", MaxErrorBytes)
	}
	return ValidateDuration(field+".retry_in", e.RetryIn)
}

// Validate checks the shape of a claim request and fills defaults (N=1).
func (r *ClaimRequest) Validate() error {
	if r.Worker == "" {
		return Invalid("worker", "worker id is required")
	}
	if len(r.Queues) == 0 {
		return Invalid("queues", "at least one queue is required")
	}
	for i, q := range r.Queues {
		if err := ValidateQueue(fmt.Sprintf("queues[%d]", i), q); err != nil {
			return err
		}
	}
	for q, w := range r.Weights {
		if !slices.Contains(r.Queues, q) {
			return Invalid(fmt.Sprintf("weights[%q]", truncate(q, 40)), "names a queue the claim does not list in queues")
		}
		if w < 1 || w > MaxWeight {
			return Invalid(fmt.Sprintf("weights[%q]", q), "must be between 1 and %d, got %d", MaxWeight, w)
		}
	}
	if r.N == 0 {
		r.N = 1
	}
	if r.N < 0 || r.N > MaxClaim {
		return Invalid("n", "must be between 1 and %d", MaxClaim)
	}
	if err := ValidateDuration("timeout", r.Timeout); err != nil {
		return err
	}
	if r.Wait < 0 || r.Wait.D() > MaxClaimWait {
		return Invalid("wait", "must be between 0 and %s", MaxClaimWait)
	}
	if r.Min < 0 || r.Min > r.N {
		return Invalid("min", "must be between 0 and n (%d), got %d", r.N, r.Min)
	}
	if err := ValidateDuration("linger", r.Linger); err != nil {
		return err
	}
	if r.Linger > 0 && r.Min < 2 {
		return Invalid("linger", "needs a min of 2 or more")
	}
	return ValidateGroupBy("group_by", r.GroupBy)
}

// Validate checks a lease reference.
func (r LeaseRef) Validate() error {
	if err := ValidateID("id", r.TaskID); err != nil {
		return err
	}
	if r.Worker == "" {
		return Invalid("worker", "worker id is required")
	}
	if r.Lease == 0 {
		return Invalid("lease", "lease number is required")
	}
	return ValidateSeq("lease", r.Lease)
}

// Validate checks an update.
func (u *Update) Validate() error {
	if u.RunAt != nil {
		if err := ValidateTime("run_at", *u.RunAt); err != nil {
			return err
		}
	}
	if err := ValidateSeq("if_version", u.IfVersion); err != nil {
		return err
	}
	if u.Labels != nil {
		if err := ValidateLabels("labels", u.Labels); err != nil {
			return err
		}
	}
	return nil
}

// Validate checks a queue update.
func (u *QueueUpdate) Validate() error {
	if u.Timeout != nil {
		if *u.Timeout <= 0 {
			return Invalid("timeout", "must be positive")
		}
		if err := ValidateDuration("timeout", *u.Timeout); err != nil {
			return err
		}
	}
	if u.MaxAttempts != nil {
		if err := ValidateCount("max_attempts", *u.MaxAttempts); err != nil {
			return err
		}
	}
	if u.MaxRuntime != nil {
		if err := ValidateDuration("max_runtime", *u.MaxRuntime); err != nil {
			return err
		}
	}
	if u.SequenceOnFailure != nil {
		if err := ValidateSequenceOnFailure("sequence_on_failure", *u.SequenceOnFailure); err != nil {
			return err
		}
	}
	if u.ExpireIn != nil {
		if err := ValidateDuration("expire_in", *u.ExpireIn); err != nil {
			return err
		}
	}
	if err := ValidateRetry("retry", u.Retry); err != nil {
		return err
	}
	if u.Retention != nil {
		r := u.Retention
		if r.Completed < 0 || r.Aborted < 0 || r.Cancelled < 0 {
			return Invalid("retention", "durations must not be negative")
		}
		for _, d := range []struct {
			field string
			d     Duration
		}{{"retention.completed", r.Completed}, {"retention.aborted", r.Aborted}, {"retention.cancelled", r.Cancelled}} {
			if err := ValidateDuration(d.field, d.d); err != nil {
				return err
			}
		}
	}
	return u.validateFlow()
}

// Validate checks the shape of a filter.
func (f *Filter) Validate() error {
	for i, q := range f.Queues {
		if err := ValidateQueue(fmt.Sprintf("queues[%d]", i), q); err != nil {
			return err
		}
	}
	for i, s := range f.Statuses {
		if !s.Valid() {
			return Invalid(fmt.Sprintf("statuses[%d]", i), "unknown status %q", s)
		}
	}
	if f.DependsOn != "" {
		if err := ValidateID("depends_on", f.DependsOn); err != nil {
			return err
		}
	}
	if f.UniqueKey != "" {
		if err := ValidateUniqueKey("unique_key", f.UniqueKey); err != nil {
			return err
		}
	}
	if f.Batch != "" {
		if err := ValidateBatchID("batch", f.Batch); err != nil {
			return err
		}
	}
	for _, b := range []struct {
		field string
		t     time.Time
	}{{"created_after", f.CreatedAfter}, {"created_before", f.CreatedBefore},
		{"updated_after", f.UpdatedAfter}, {"updated_before", f.UpdatedBefore}} {
		if err := ValidateTime(b.field, b.t); err != nil {
			return err
		}
	}
	return ValidateLabels("labels", f.Labels)
}

// Empty reports whether the filter matches every task.
func (f *Filter) Empty() bool {
	return len(f.Queues) == 0 && len(f.Statuses) == 0 && len(f.Labels) == 0 && f.Owner == "" &&
		f.IDContains == "" && f.DependsOn == "" && f.UniqueKey == "" && f.Batch == "" && f.CreatedAfter.IsZero() && f.CreatedBefore.IsZero() &&
		f.UpdatedAfter.IsZero() && f.UpdatedBefore.IsZero()
}

// Match reports whether t passes the filter. Time bounds are exclusive:
// CreatedAfter matches created > bound, CreatedBefore matches created < bound.
func (f *Filter) Match(t *Task) bool {
	if len(f.Queues) > 0 && !slices.Contains(f.Queues, t.Queue) {
		return false
	}
	if len(f.Statuses) > 0 && !slices.Contains(f.Statuses, t.Status) {
		return false
	}
	for k, v := range f.Labels {
		if tv, ok := t.Labels[k]; !ok || tv != v {
			return false
		}
	}
	if f.Owner != "" && t.Owner != f.Owner {
		return false
	}
	if f.IDContains != "" && !strings.Contains(t.ID, f.IDContains) {
		return false
	}
	if f.DependsOn != "" && !slices.Contains(t.DependsOn, f.DependsOn) {
		return false
	}
	if f.UniqueKey != "" && t.UniqueKey != f.UniqueKey {
		return false
	}
	if f.Batch != "" && t.Batch != f.Batch {
		return false
	}
	if !f.CreatedAfter.IsZero() && !t.Created.After(f.CreatedAfter) {
		return false
	}
	if !f.CreatedBefore.IsZero() && !t.Created.Before(f.CreatedBefore) {
		return false
	}
	if !f.UpdatedAfter.IsZero() && !t.Updated.After(f.UpdatedAfter) {
		return false
	}
	if !f.UpdatedBefore.IsZero() && !t.Updated.Before(f.UpdatedBefore) {
		return false
	}
	return true
}

// statusAliases are the work-queue aliases (pending, succeeded, failed, terminal).
var statusAliases = map[string][]Status{
	"pending":   {StatusScheduled, StatusBlocked, StatusReady, StatusRunning},
	"succeeded": {StatusCompleted},
	"failed":    {StatusAborted},
	"terminal":  {StatusCompleted, StatusAborted, StatusCancelled},
}

// ParseStatuses parses a comma-separated list of statuses and aliases
// (pending, succeeded, failed, terminal) into a sorted set without duplicates.
func ParseStatuses(s string) ([]Status, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	set := map[Status]bool{}
	for _, part := range strings.Split(s, ",") {
		p := strings.ToLower(strings.TrimSpace(part))
		if al, ok := statusAliases[p]; ok {
			for _, st := range al {
				set[st] = true
			}
			continue
		}
		st := Status(p)
		if !st.Valid() {
			return nil, Invalid("status", "unknown status %q (want one of scheduled, blocked, ready, running, completed, aborted, cancelled, pending, succeeded, failed, terminal)", truncate(part, 40))
		}
		set[st] = true
	}
	out := make([]Status, 0, len(set))
	for _, st := range AllStatuses {
		if set[st] {
			out = append(out, st)
		}
	}
	return out, nil
}

// StatusIndex is the position of s in AllStatuses (for sorting), or len(AllStatuses).
func StatusIndex(s Status) int {
	if i := slices.Index(AllStatuses, s); i >= 0 {
		return i
	}
	return len(AllStatuses)
}

// SortGroupCounts sorts by queue, then status lifecycle order.
func SortGroupCounts(g []GroupCount) {
	sort.Slice(g, func(i, j int) bool {
		if g[i].Queue != g[j].Queue {
			return g[i].Queue < g[j].Queue
		}
		return StatusIndex(g[i].Status) < StatusIndex(g[j].Status)
	})
}

// validateSequence checks sequence_key.
func (n *NewTask) validateSequence() error {
	if n.SequenceKey == "" {
		return nil
	}
	if err := ValidateSequenceKey("sequence_key", n.SequenceKey); err != nil {
		return err
	}
	if len(n.DependsOn) > 0 {
		return Invalid("sequence_key", "a task in a sequence cannot have depends_on: the sequence orders it")
	}
	return nil
}

// Validate checks a List or Stream query: its filter, its order, and a
// limit that is not negative (a page's size for List, a total for Stream).
func (q *Query) Validate() error {
	if err := q.Filter.Validate(); err != nil {
		return err
	}
	switch q.Order {
	case OrderID, OrderNewest, OrderPriority:
	default:
		return Invalid("order", "unknown order %q (want \"\", newest or priority)", q.Order)
	}
	if q.Limit < 0 {
		return Invalid("limit", "must not be negative")
	}
	return nil
}

// PageLimit validates a List query and returns its page size:
// DefaultListLimit when Limit is 0; a Limit over MaxListLimit is refused, as
// the API refuses it, rather than cut short without a word.
func (q *Query) PageLimit() (int, error) {
	if err := q.Validate(); err != nil {
		return 0, err
	}
	switch {
	case q.Limit == 0:
		return DefaultListLimit, nil
	case q.Limit > MaxListLimit:
		return 0, Invalid("limit", "must be at most %d", MaxListLimit)
	}
	return q.Limit, nil
}

// CursorString wraps a store's position after a page (bytes only the store
// reads) as the opaque cursor clients pass back: unpadded base64url.
func CursorString(pos []byte) string { return base64.RawURLEncoding.EncodeToString(pos) }

// CursorBytes unwraps a cursor made by CursorString. Only that exact
// spelling is accepted: Go's decoder skips line breaks, so without the
// check many strings would name one position. A store that cannot read
// the bytes answers BadCursor as well.
func CursorBytes(c string) ([]byte, error) {
	b, err := base64.RawURLEncoding.Strict().DecodeString(c)
	if err != nil || len(b) == 0 || CursorString(b) != c {
		return nil, BadCursor()
	}
	return b, nil
}

// BadCursor is the error for a cursor no page of this store and order
// returned.
func BadCursor() error {
	return Invalid("cursor", "malformed cursor; pass next_cursor from the previous page unchanged")
}

// ValidateDelete checks a filter for DeleteMatching, which refuses an
// empty one: it would delete every task.
func (f *Filter) ValidateDelete() error {
	if err := f.Validate(); err != nil {
		return err
	}
	if f.Empty() {
		return Invalid("filter", "an empty filter would delete every task; give at least one condition")
	}
	return nil
}

// ValidateLogRead checks ReadLog's arguments.
func ValidateLogRead(id string, limit int) error {
	if err := ValidateID("id", id); err != nil {
		return err
	}
	if limit < 0 {
		return Invalid("limit", "must not be negative")
	}
	return nil
}

// GetManyIDs checks GetMany's ids (at most MaxBatch, each valid, named
// ids[i]) and returns them each once, in the order first asked: a task is
// answered once however often its id is repeated, as the API answers it.
func GetManyIDs(ids []string) ([]string, error) {
	if len(ids) > MaxBatch {
		return nil, TooLarge("ids", "%d ids, more than the limit of %d", len(ids), MaxBatch)
	}
	seen := make(map[string]bool, len(ids))
	out := make([]string, 0, len(ids))
	for i, id := range ids {
		if err := ValidateID(fmt.Sprintf("ids[%d]", i), id); err != nil {
			return nil, err
		}
		if !seen[id] {
			seen[id] = true
			out = append(out, id)
		}
	}
	return out, nil
}
