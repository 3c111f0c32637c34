package embedded

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"math"
	"strconv"
	"time"

	"github.com/nornq/norn"
)

// Key schema (see docs/design.md). Every key of one task shares the prefix
// 't' + id + 0x00; ids cannot contain bytes <= ' ', so the 0x00 separator
// keeps tasks in id order and makes [prefix, 't'+id+0x01) exactly one task.
const (
	pfxTask   = 't'
	pfxQueue  = 'q'
	pfxWorker = 'w'
	pfxMeta   = 'm'

	sufImmutable  = 'a' // written once at submit, with the initial labels and state
	sufLabels     = 'b' // labels set by Update (supersede those in 'a')
	sufState      = 'c' // compact state record of every later transition (supersedes 'a')
	sufDepResult  = 'd' // + the dependency's id: an ended dependency's outcome
	sufError      = 'e' // + be64 seq: one key per recorded error
	sufLog        = 'g' // + be64 seq: update log
	sufHistory    = 'h' // + be64 seq: history entries (but those state.implied stands for)
	sufSignal     = 'i' // + be64 seq: signals received
	sufSignalWait = 'j' // the last wait for a signal
	sufResult     = 'r' // result of a completed task
)

var errCorrupt = errors.New("embedded: corrupt record")

func taskPrefix(id string) []byte {
	k := make([]byte, 0, len(id)+12)
	k = append(k, pfxTask)
	k = append(k, id...)
	return append(k, 0)
}

func taskEnd(id string) []byte {
	k := make([]byte, 0, len(id)+2)
	k = append(k, pfxTask)
	k = append(k, id...)
	return append(k, 1)
}

func taskKey(id string, suf byte) []byte {
	return append(taskPrefix(id), suf)
}

func taskSeqKey(id string, suf byte, seq uint64) []byte {
	return binary.BigEndian.AppendUint64(taskKey(id, suf), seq)
}

// depResultKey is the key of the outcome of dependency dep recorded with
// task id. Keyed by the dependency, not by a position: an await adds
// dependencies, and a dependency that ends again replaces its record.
func depResultKey(id, dep string) []byte {
	return append(taskKey(id, sufDepResult), dep...)
}

// splitTaskKey returns the id and the suffix part of a task key.
func splitTaskKey(k []byte) (id string, suf []byte, ok bool) {
	if len(k) < 3 || k[0] != pfxTask {
		return "", nil, false
	}
	for i := 1; i < len(k); i++ {
		if k[i] == 0 {
			return string(k[1:i]), k[i+1:], i+1 < len(k)
		}
	}
	return "", nil, false
}

func queueKey(name string) []byte { return append([]byte{pfxQueue}, name...) }

func workerKey(n uint64) []byte {
	return binary.BigEndian.AppendUint64([]byte{pfxWorker}, n)
}

// enc appends compact binary fields.
type enc struct{ b []byte }

func (e *enc) u(v uint64)  { e.b = binary.AppendUvarint(e.b, v) }
func (e *enc) i(v int64)   { e.b = binary.AppendVarint(e.b, v) }
func (e *enc) s(v string)  { e.u(uint64(len(v))); e.b = append(e.b, v...) }
func (e *enc) by(v []byte) { e.u(uint64(len(v))); e.b = append(e.b, v...) }
func (e *enc) f(v float64) { e.b = binary.LittleEndian.AppendUint64(e.b, math.Float64bits(v)) }

// dec reads what enc wrote; the first error sticks.
type dec struct {
	b   []byte
	err error
}

func (d *dec) u() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.err = errCorrupt
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *dec) i() int64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.err = errCorrupt
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *dec) by() []byte {
	n := d.u()
	if d.err != nil {
		return nil
	}
	if uint64(len(d.b)) < n {
		d.err = errCorrupt
		return nil
	}
	v := d.b[:n:n]
	d.b = d.b[n:]
	return v
}

func (d *dec) s() string { return string(d.by()) }

func (d *dec) f() float64 {
	if d.err != nil {
		return 0
	}
	if len(d.b) < 8 {
		d.err = errCorrupt
		return 0
	}
	v := math.Float64frombits(binary.LittleEndian.Uint64(d.b))
	d.b = d.b[8:]
	return v
}

// Times are stored as Unix nanoseconds; 0 is the zero time.
func nanos(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

func fromNanos(n int64) time.Time {
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n).UTC()
}

// state is the mutable part of a task: everything a transition changes. Its
// encoding is the 'c' record, a few tens of bytes.
type state struct {
	status uint8 // index into norn.AllStatuses
	// implied says which of the newest history entries the record stands
	// for instead of a history key each (impAssign, impComplete).
	implied  uint8
	priority uint32
	progress float64
	updated  int64
	runAt    int64
	deadline int64
	readyAt  int64 // when it last became ready (claim order)
	endedAt  int64 // when it became terminal (retention)
	started  int64 // when the current or last attempt was claimed
	owner    string
	lease    uint64
	attempts int32
	errN     uint32 // errors recorded
	version  uint64
	histNext uint64 // next history sequence number (= entries ever appended)
	logNext  uint64 // next log sequence number (starts at 1)
}

// recVersion 2 added started, 3 the implied history entries; version 1
// records (written before started existed) decode with started 0, and
// version 1 and 2 records with no implied entries.
const recVersion = 3

// Implied history entries. A claim's assignment entry and the completion
// that ends the same lease say nothing their task's state does not
// (assignment: started, owner, lease; completion: endedAt, owner, lease,
// progress 1), so the state record stands for them: a claim and its
// completion write one key each instead of a state and a history key each
// (docs/internals/embedded-performance.md). Implied entries are always
// the newest, in bit order, ending at histNext-1; the transition that
// appends any other entry, or changes what an implied one is read from,
// writes them out as history keys first (txn.settleImplied).
const (
	impAssign   = 1 << iota // the assignment of the current lease
	impComplete             // the completion of that lease
	impAll      = impAssign | impComplete
)

func (st *state) encode(buf []byte) []byte {
	e := enc{b: buf}
	// implied at a fixed offset: a claim's reader looks at it without
	// decoding the record (decodeTaskIn).
	e.b = append(e.b, recVersion, st.status, st.implied)
	e.i(st.started)
	e.u(uint64(st.priority))
	e.f(st.progress)
	e.i(st.updated)
	e.i(st.runAt)
	e.i(st.deadline)
	e.i(st.readyAt)
	e.i(st.endedAt)
	e.s(st.owner)
	e.u(st.lease)
	e.i(int64(st.attempts))
	e.u(st.version)
	e.u(st.histNext)
	e.u(st.logNext)
	e.u(uint64(st.errN))
	return e.b
}

func decodeState(b []byte) (state, error) {
	var st state
	if len(b) < 2 || b[0] < 1 || b[0] > recVersion || int(b[1]) >= len(norn.AllStatuses) {
		return st, errCorrupt
	}
	st.status = b[1]
	d := dec{b: b[2:]}
	if b[0] >= 3 {
		if len(b) < 3 || b[2]&^impAll != 0 {
			return st, errCorrupt
		}
		st.implied = b[2]
		d.b = b[3:]
	}
	if b[0] >= 2 {
		st.started = d.i()
	}
	st.priority = uint32(d.u())
	st.progress = d.f()
	st.updated = d.i()
	st.runAt = d.i()
	st.deadline = d.i()
	st.readyAt = d.i()
	st.endedAt = d.i()
	st.owner = d.s()
	st.lease = d.u()
	st.attempts = int32(d.i())
	st.version = d.u()
	st.histNext = d.u()
	st.logNext = d.u()
	st.errN = uint32(d.u())
	if d.err == nil && uint64(impliedCount(st.implied)) > st.histNext {
		return st, errCorrupt
	}
	return st, d.err
}

// storedImplied reports whether a state record has implied history
// entries, without decoding it.
func storedImplied(b []byte) bool { return len(b) > 2 && b[0] >= 3 && b[2] != 0 }

func impliedCount(implied uint8) int { return int(implied&impAssign) + int(implied&impComplete)>>1 }

// impliedEntry is the history entry that bit of st's implied set stands for.
func (st *state) impliedEntry(bit uint8) norn.HistoryEntry {
	if bit == impAssign {
		return norn.HistoryEntry{Type: norn.TaskAssignment, Time: fromNanos(st.started), Worker: st.owner, Lease: st.lease}
	}
	return norn.HistoryEntry{Type: norn.TaskComplete, Time: fromNanos(st.endedAt), Worker: st.owner, Lease: st.lease, Progress: 1}
}

// impliedSeq is the history sequence number of bit in st's implied set.
func (st *state) impliedSeq(bit uint8) uint64 {
	return st.histNext - uint64(impliedCount(st.implied&^(bit-1)))
}

// sameImplied reports whether bit stands for the same entry in a and b.
func sameImplied(bit uint8, a, b *state) bool {
	if a.implied&bit == 0 || b.implied&bit == 0 || a.impliedSeq(bit) != b.impliedSeq(bit) ||
		a.owner != b.owner || a.lease != b.lease {
		return false
	}
	if bit == impAssign {
		return a.started == b.started
	}
	return a.endedAt == b.endedAt
}

// impliedBy returns the implied bit that stands for h, the entry being
// appended to a task whose new state is ns at time now, or 0 when h needs
// a history key of its own.
func impliedBy(ns *state, h *norn.HistoryEntry, now int64) uint8 {
	if h.Error != nil || h.Worker != ns.owner || h.Lease != ns.lease {
		return 0
	}
	switch {
	case h.Type == norn.TaskAssignment && h.Progress == 0 && ns.started == now:
		return impAssign
	case h.Type == norn.TaskComplete && h.Progress == 1 && ns.endedAt == now:
		return impComplete
	}
	return 0
}

// appendImplied appends the entries st's implied set stands for.
func (a *taskArena) appendImplied(hs []norn.HistoryEntry, st *state) []norn.HistoryEntry {
	for bit := uint8(impAssign); bit <= impComplete; bit <<= 1 {
		if st.implied&bit != 0 {
			hs = a.appendHistory(hs, st.impliedEntry(bit))
		}
	}
	return hs
}

// immutable is the part of a task written once at submit (the 'a' record).
type immutable struct {
	queue       string
	created     int64
	maxAttempts int64
	timeout     int64
	maxRuntime  int64
	retry       *norn.RetryPolicy
	// expires is the task's expiry in nanoseconds (0: none).
	expires int64
	// uniqueKey is the task's unique key ("" when none).
	uniqueKey string
	// batch is the batch the task joined ("" when none).
	batch string
	// depRun: on_dependency_failure run.
	depRun bool
	// seqKey is the sequence key ("" when none), seqNo the task's number
	// in its sequence.
	seqKey string
	seqNo  uint64
	deps   []string
	spec   []byte
	// key is the concurrency key ("" for none).
	key string
	// traceparent and tracestate are the task's W3C trace context.
	traceparent, tracestate string
	// labels and st are the task's labels and state at submit; a later
	// labels record ('b') or state record ('c') supersedes them, so a
	// submit writes one key per task.
	labels map[string]string
	st     state
}

// immVersion 3 added the unique key, 4 the concurrency key after the
// spec, 5 maxRuntime after the timeout, 6 the optional fields after the
// concurrency key; version 2 to 5 records (without them) are still read,
// as no key, no limit and no optional field.
const immVersion = 6

// Optional fields of the immutable record (version 6 on): a count, then
// each present one as a tag and its bytes. Absent fields cost one byte in
// all, a field added later takes the next tag instead of a new version,
// and a reader skips tags it does not know, so records written by a newer
// version stay readable by an older one.
const (
	optTraceparent = 1
	optTracestate  = 2
	// optRetryJitter is the retry policy's jitter mode (only with a policy).
	optRetryJitter = 3
	// optExpires is the task's expiry (nanoseconds, as a string of
	// decimal digits so that every optional field is bytes).
	optExpires = 4
	// optBatch is the batch the task joined.
	optBatch = 5
	// optDepRun marks on_dependency_failure run (value "1").
	optDepRun = 6
	// optSequence is the task's sequence key, optSequenceNo its number
	// in the sequence (decimal digits).
	optSequence   = 7
	optSequenceNo = 8
)

func (im *immutable) encode(buf []byte) []byte {
	e := enc{b: buf}
	e.b = append(e.b, immVersion)
	e.s(im.queue)
	e.i(im.created)
	e.i(im.maxAttempts)
	e.i(im.timeout)
	e.i(im.maxRuntime)
	if im.retry != nil {
		e.b = append(e.b, 1)
		e.i(int64(im.retry.MaxRetries))
		e.i(int64(im.retry.Base))
		e.i(int64(im.retry.Max))
	} else {
		e.b = append(e.b, 0)
	}
	e.s(im.uniqueKey)
	e.u(uint64(len(im.deps)))
	for _, d := range im.deps {
		e.s(d)
	}
	if im.spec == nil {
		e.b = append(e.b, 0)
	} else {
		e.b = append(e.b, 1)
		e.by(im.spec)
	}
	e.s(im.key)
	im.appendOptional(&e)
	e.b = appendLabels(e.b, im.labels)
	return im.st.encode(e.b)
}

// decodeImmutable decodes the record; withSpec and withLabels false skip
// copying what a caller does not need (recovery needs neither, nor the
// optional fields, which are skipped when both are false).
func decodeImmutable(b []byte, withSpec, withLabels bool) (immutable, error) {
	return decodeImmutableIn(b, withSpec, withLabels, nil)
}

// decodeImmutableIn is decodeImmutable copying the spec into a's memory.
func decodeImmutableIn(b []byte, withSpec, withLabels bool, a *taskArena) (immutable, error) {
	var im immutable
	if len(b) < 1 || b[0] < 2 || b[0] > immVersion {
		return im, errCorrupt
	}
	d := dec{b: b[1:]}
	im.queue = d.s()
	im.created = d.i()
	im.maxAttempts = d.i()
	im.timeout = d.i()
	if b[0] >= 5 {
		im.maxRuntime = d.i()
	}
	if len(d.b) < 1 {
		return im, errCorrupt
	}
	hasRetry := d.b[0] == 1
	d.b = d.b[1:]
	if hasRetry {
		im.retry = &norn.RetryPolicy{MaxRetries: int(d.i()), Base: norn.Duration(d.i()), Max: norn.Duration(d.i())}
	}
	if b[0] >= 3 {
		im.uniqueKey = d.s()
	}
	n := d.u()
	if n > norn.MaxDependencies {
		return im, errCorrupt
	}
	if n > 0 {
		im.deps = make([]string, n)
		for i := range im.deps {
			im.deps[i] = d.s()
		}
	}
	if d.err == nil && len(d.b) >= 1 {
		has := d.b[0] == 1
		d.b = d.b[1:]
		if has {
			sp := d.by()
			if withSpec && d.err == nil {
				im.spec = a.copy(sp)
			}
		}
	} else if d.err == nil {
		d.err = errCorrupt
	}
	if b[0] >= 4 {
		im.key = d.s()
	}
	if b[0] >= 6 {
		im.decodeOptional(&d, withSpec || withLabels)
	}
	if d.err != nil {
		return im, d.err
	}
	var err error
	var rest []byte
	if withLabels {
		im.labels, rest, err = decodeLabelsPrefix(d.b)
	} else {
		rest, err = skipLabels(d.b)
	}
	if err != nil {
		return im, err
	}
	im.st, err = decodeState(rest)
	return im, err
}

func (im *immutable) appendOptional(e *enc) {
	n := 0
	if im.traceparent != "" {
		n++
	}
	if im.tracestate != "" {
		n++
	}
	jitter := im.retry != nil && im.retry.Jitter != ""
	if jitter {
		n++
	}
	if im.expires != 0 {
		n++
	}
	if im.batch != "" {
		n++
	}
	if im.depRun {
		n++
	}
	if im.seqKey != "" {
		n += 2
	}
	e.u(uint64(n))
	if im.traceparent != "" {
		e.u(optTraceparent)
		e.s(im.traceparent)
	}
	if im.tracestate != "" {
		e.u(optTracestate)
		e.s(im.tracestate)
	}
	if jitter {
		e.u(optRetryJitter)
		e.s(im.retry.Jitter)
	}
	if im.expires != 0 {
		e.u(optExpires)
		e.s(strconv.FormatInt(im.expires, 10))
	}
	if im.batch != "" {
		e.u(optBatch)
		e.s(im.batch)
	}
	if im.depRun {
		e.u(optDepRun)
		e.s("1")
	}
	if im.seqKey != "" {
		e.u(optSequence)
		e.s(im.seqKey)
		e.u(optSequenceNo)
		e.s(strconv.FormatUint(im.seqNo, 10))
	}
}

// decodeOptional reads the optional fields; keep false skips them without
// copying (recovery reads every task at open and needs none of them), all
// but the retry jitter, the expiry and the batch, which memory keeps.
func (im *immutable) decodeOptional(d *dec, keep bool) {
	n := d.u()
	for i := uint64(0); i < n && d.err == nil; i++ {
		tag := d.u()
		switch {
		case tag == optRetryJitter:
			j := d.s()
			if im.retry != nil {
				im.retry.Jitter = j
			}
		case tag == optExpires:
			// Kept by recovery too: the in-memory task's timer needs it.
			v, err := strconv.ParseInt(d.s(), 10, 64)
			if err != nil && d.err == nil {
				d.err = errCorrupt
			}
			im.expires = v
		case tag == optBatch:
			// Kept by recovery too: it rebuilds the batches' membership.
			im.batch = d.s()
		case tag == optDepRun:
			// Kept by recovery too: a failing dependency reads it.
			im.depRun = d.s() == "1"
		case tag == optSequence:
			// Kept by recovery too: it rebuilds the sequences.
			im.seqKey = d.s()
		case tag == optSequenceNo:
			v, err := strconv.ParseUint(d.s(), 10, 64)
			if err != nil && d.err == nil {
				d.err = errCorrupt
			}
			im.seqNo = v
		case !keep:
			d.by()
		case tag == optTraceparent:
			im.traceparent = d.s()
		case tag == optTracestate:
			im.tracestate = d.s()
		default:
			d.by()
		}
	}
}

func appendLabels(b []byte, l map[string]string) []byte {
	e := enc{b: b}
	e.u(uint64(len(l)))
	for k, v := range l {
		e.s(k)
		e.s(v)
	}
	return e.b
}

func encodeLabels(l map[string]string) []byte { return appendLabels(nil, l) }

func decodeLabels(b []byte) (map[string]string, error) {
	m, _, err := decodeLabelsPrefix(b)
	return m, err
}

// decodeLabelsPrefix decodes labels at the start of b and returns the rest.
func decodeLabelsPrefix(b []byte) (map[string]string, []byte, error) {
	d := dec{b: b}
	n := d.u()
	if n > norn.MaxLabels*4 {
		return nil, nil, errCorrupt
	}
	if n == 0 {
		return nil, d.b, d.err
	}
	m := make(map[string]string, n)
	for i := uint64(0); i < n && d.err == nil; i++ {
		k := d.s()
		m[k] = d.s()
	}
	return m, d.b, d.err
}

func skipLabels(b []byte) ([]byte, error) {
	d := dec{b: b}
	n := d.u()
	if n > norn.MaxLabels*4 {
		return nil, errCorrupt
	}
	for i := uint64(0); i < 2*n && d.err == nil; i++ {
		d.by()
	}
	return d.b, d.err
}

func encodeHistory(h norn.HistoryEntry) []byte { return appendHistory(make([]byte, 0, 48), h) }

func appendHistory(buf []byte, h norn.HistoryEntry) []byte {
	e := enc{b: buf}
	e.s(string(h.Type))
	e.i(nanos(h.Time))
	e.s(h.Worker)
	e.u(h.Lease)
	e.f(h.Progress)
	if h.Error != nil {
		j, _ := json.Marshal(h.Error)
		e.by(j)
	} else {
		e.u(0)
	}
	return e.b
}

func decodeHistory(b []byte) (norn.HistoryEntry, error) {
	d := dec{b: b}
	var h norn.HistoryEntry
	h.Type = norn.HistoryType(d.s())
	h.Time = fromNanos(d.i())
	h.Worker = d.s()
	h.Lease = d.u()
	h.Progress = d.f()
	ej := d.by()
	if d.err != nil {
		return h, d.err
	}
	if len(ej) > 0 {
		h.Error = new(norn.ErrorInfo)
		if err := json.Unmarshal(ej, h.Error); err != nil {
			return h, errCorrupt
		}
	}
	return h, nil
}

func encodeLog(l norn.LogEntry) []byte {
	e := enc{b: make([]byte, 0, 16+len(l.Data))}
	e.u(l.Lease)
	e.i(nanos(l.Time))
	e.by(l.Data)
	return e.b
}

func decodeLog(seq uint64, b []byte) (norn.LogEntry, error) {
	d := dec{b: b}
	l := norn.LogEntry{Seq: seq}
	l.Lease = d.u()
	l.Time = fromNanos(d.i())
	data := d.by()
	if data != nil {
		l.Data = append(json.RawMessage(nil), data...)
	}
	return l, d.err
}
