package storetest

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/nornq/norn"
)

// exerciseRanges feeds every operation times, durations and numbers just
// outside what a store can hold (norn.MinTime, MaxTime, MaxDuration,
// MaxCount, MaxSeq): each must be refused naming the field, with nothing
// changed, rather than stored wrapped (a run_at of 2300 read back as
// 1715, a filter created_after=2300 matching every task).
func exerciseRanges(t *testing.T, setup setupFunc) {
	t.Run("Ranges", func(t *testing.T) {
		t.Parallel()
		ranges(t, setup)
	})
	t.Run("Characters", func(t *testing.T) {
		t.Parallel()
		characters(t, setup)
	})
	t.Run("WorkerRegistry", func(t *testing.T) {
		t.Parallel()
		workerRegistry(t, setup)
	})
}

// rangeCase is one value out of range: the call and the field its
// invalid_argument must name.
type rangeCase struct {
	name  string
	call  func() error
	field string
}

// rangeFixture is the store the range cases share and the values just
// outside what a store holds.
type rangeFixture struct {
	s           norn.Store
	b           *testBundle
	r           norn.LeaseRef // the lease of the running task "run"
	late, early time.Time     // after MaxTime, before MinTime
	epoch       time.Time     // 1970, before MinTime too
	huge        norn.Duration // the largest whole number of hours a time.Duration holds
	over        norn.Duration // just over MaxDuration
	big         int           // MaxCount + 1
}

func ranges(t *testing.T, setup setupFunc) {
	s, b := setup(t)
	b.submit(norn.NewTask{ID: "ready", Queue: "q"}, norn.NewTask{ID: "run", Queue: "r"}, norn.NewTask{ID: "run2", Queue: "r"},
		norn.NewTask{ID: "ended", Queue: "e"})
	run := b.claim("w", "r")
	run2 := b.claim("w", "r")
	b.abort(b.claim("w", "e"), "no")
	before := b.snapshot()

	var big64 int64 = norn.MaxCount + 1
	f := &rangeFixture{s: s, b: b, r: ref(run),
		late:  time.Date(2300, 1, 1, 0, 0, 0, 0, time.UTC),
		early: time.Date(1600, 1, 1, 0, 0, 0, 0, time.UTC),
		epoch: time.Unix(0, 0).UTC(),
		huge:  dur(2562047 * time.Hour),
		over:  dur(norn.MaxDuration + time.Second),
		big:   int(big64)}
	if int64(f.big) != big64 {
		t.Skip("int is 32 bits here: no count can exceed MaxCount")
	}
	var cases []rangeCase
	for _, group := range []func(*rangeFixture) []rangeCase{
		rangeClientCases, rangeWorkerCases, rangeAdminCases, rangeFilterCases,
	} {
		cases = append(cases, group(f)...)
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			wantField(t, tc.name, tc.call(), norn.ErrInvalidArgument, tc.field)
			b.with(t).unchanged(tc.name, before)
		})
	}
	t.Run("RefusedCallsLeaveTheLeaseQueueAndSchedulesAlone", func(t *testing.T) {
		bt := b.with(t)
		if _, err := s.Heartbeat(t.Context(), ref(run2), norn.Heartbeat{}); err != nil {
			t.Fatalf("heartbeat after refused calls: %v", err)
		}
		qi, err := s.Queue(t.Context(), "q")
		if err != nil {
			t.Fatal(err)
		}
		sameDefaults(t, "queue q after refused updates", qi.Defaults, norn.DefaultQueueDefaults())
		if qi.MaxRunning != 0 || qi.KeyLimit != 0 || len(qi.Keys) != 0 {
			t.Fatalf("queue q's flow after refused updates: %+v", qi.QueueFlow)
		}
		if scs, err := s.ListSchedules(t.Context()); err != nil || len(scs) != 0 {
			t.Fatalf("schedules after refused puts: %d, %v", len(scs), err)
		}
		bt.status("run", norn.StatusRunning)
	})
	t.Run("TheEdgesOfTheRangesAreStored", func(t *testing.T) {
		bt := b.with(t)
		edge := norn.MaxTime.Add(-time.Microsecond)
		got := bt.submitOne(norn.NewTask{ID: "edge", Queue: "edge", RunAt: edge, Timeout: dur(norn.MaxDuration),
			MaxAttempts: ptr(norn.MaxCount), Retry: &norn.RetryPolicy{MaxRetries: norn.MaxCount, Base: dur(time.Second), Max: dur(norn.MaxDuration)}})
		back := bt.status("edge", norn.StatusScheduled)
		if !back.RunAt.Equal(edge) || back.Timeout != dur(norn.MaxDuration) || back.MaxAttempts != norn.MaxCount ||
			back.Retry == nil || back.Retry.MaxRetries != norn.MaxCount || back.Retry.Max != dur(norn.MaxDuration) {
			t.Fatalf("stored at the edges: %s", canonTask(back))
		}
		sameTask(t, "submitted at the edges", got, back)
		bt.delete("edge")
	})
}

// rangeClientCases are the out-of-range values of Submit, Update, Transact and AppendLog.
func rangeClientCases(f *rangeFixture) []rangeCase {
	s, b, r, late, early, epoch, huge, over, big := f.s, f.b, f.r, f.late, f.early, f.epoch, f.huge, f.over, f.big
	sub := func(nt norn.NewTask) func() error {
		return func() error { _, err := s.Submit(b.ctx, nt); return err }
	}
	return []rangeCase{
		{"SubmitRunAtAfterMaxTime", sub(norn.NewTask{Queue: "q", RunAt: late}), "tasks[0].run_at"},
		{"SubmitRunAtBeforeMinTime", sub(norn.NewTask{Queue: "q", RunAt: early}), "tasks[0].run_at"},
		{"SubmitRunAtAtTheEpoch", sub(norn.NewTask{Queue: "q", RunAt: epoch}), "tasks[0].run_at"},
		{"SubmitHugeDelay", sub(norn.NewTask{Queue: "q", Delay: huge}), "tasks[0].delay"},
		{"SubmitDelayOverMaxDuration", sub(norn.NewTask{Queue: "q", Delay: over}), "tasks[0].delay"},
		{"SubmitHugeTimeout", sub(norn.NewTask{Queue: "q", Timeout: huge}), "tasks[0].timeout"},
		{"SubmitHugeMaxRuntime", sub(norn.NewTask{Queue: "q", MaxRuntime: huge}), "tasks[0].max_runtime"},
		{"SubmitHugeUniqueFor", sub(norn.NewTask{Queue: "q", UniqueKey: "k", UniqueFor: huge}), "tasks[0].unique_for"},
		{"SubmitMaxAttemptsOver32Bits", sub(norn.NewTask{Queue: "q", MaxAttempts: ptr(big)}), "tasks[0].max_attempts"},
		{"SubmitMaxRetriesOver32Bits", sub(norn.NewTask{Queue: "q", Retry: &norn.RetryPolicy{MaxRetries: big}}), "tasks[0].retry.max_retries"},
		{"SubmitHugeBackoff", sub(norn.NewTask{Queue: "q", Retry: &norn.RetryPolicy{MaxRetries: 1, Base: huge}}), "tasks[0].retry.base"},
		{"SubmitHugeBackoffCap", sub(norn.NewTask{Queue: "q", Retry: &norn.RetryPolicy{MaxRetries: 1, Base: dur(time.Second), Max: huge}}), "tasks[0].retry.max"},
		{"TransactionSubmitRunAt", func() error {
			_, err := s.Transact(b.ctx, norn.Txn{Submit: []norn.NewTask{{Queue: "q", RunAt: late}}})
			return err
		}, "submit[0].run_at"},
		{"TransactionUpdateRunAt", func() error {
			_, err := s.Transact(b.ctx, norn.Txn{Update: []norn.TxnUpdate{{ID: "ready", Update: norn.Update{RunAt: &late}}}})
			return err
		}, "update[0].run_at"},
		{"TransactionRequireVersionOver63Bits", func() error {
			_, err := s.Transact(b.ctx, norn.Txn{Require: []norn.Requirement{{ID: "ready", Version: math.MaxInt64 + 1}}})
			return err
		}, "require[0].version"},
		{"LogSeqOver63Bits", func() error {
			_, err := s.AppendLog(b.ctx, r, norn.LogAppend{Seq: math.MaxInt64 + 1, Data: []byte(`1`)})
			return err
		}, "seq"},
		{"UpdateRunAtAfterMaxTime", func() error { _, err := s.Update(b.ctx, "ready", norn.Update{RunAt: &late}); return err }, "run_at"},
		{"UpdateRunAtBeforeMinTime", func() error { _, err := s.Update(b.ctx, "ready", norn.Update{RunAt: &early}); return err }, "run_at"},
		{"UpdateIfVersionOver63Bits", func() error {
			_, err := s.Update(b.ctx, "ready", norn.Update{Priority: ptr(uint32(1)), IfVersion: math.MaxInt64 + 1})
			return err
		}, "if_version"},
	}
}

// rangeWorkerCases are the out-of-range values of Claim and the lease holder's other calls.
func rangeWorkerCases(f *rangeFixture) []rangeCase {
	s, b, r, late, huge := f.s, f.b, f.r, f.late, f.huge
	return []rangeCase{
		{"ClaimHugeTimeout", func() error {
			_, err := s.Claim(b.ctx, norn.ClaimRequest{Worker: "w", Queues: []string{"q"}, Timeout: huge})
			return err
		}, "timeout"},
		{"HeartbeatHugeExtend", func() error { _, err := s.Heartbeat(b.ctx, r, norn.Heartbeat{Extend: huge}); return err }, "extend"},
		{"HeartbeatLeaseOver63Bits", func() error {
			_, err := s.Heartbeat(b.ctx, norn.LeaseRef{TaskID: "run", Worker: "w", Lease: math.MaxInt64 + 1}, norn.Heartbeat{})
			return err
		}, "lease"},
		{"LeaseBatchHugeExtend", func() error {
			// Refused whole or for its one op: either way naming the op
			// ("ops[0].extend") or not.
			res, err := s.LeaseBatch(b.ctx, []norn.LeaseOp{{Op: norn.OpHeartbeat, LeaseRef: r, Heartbeat: norn.Heartbeat{Extend: huge}}})
			var e *norn.Error
			switch {
			case err != nil && errors.As(err, &e):
			case err != nil:
				return err
			case res[0].Err == nil:
				return nil
			default:
				e = res[0].Err
			}
			c := *e
			c.Field = strings.TrimPrefix(c.Field, "ops[0].")
			return &c
		}, "extend"},
		{"SnoozeHugeDelay", func() error { _, err := s.Snooze(b.ctx, r, norn.Snooze{Delay: huge}); return err }, "delay"},
		{"SnoozeRunAtAfterMaxTime", func() error { _, err := s.Snooze(b.ctx, r, norn.Snooze{RunAt: late}); return err }, "run_at"},
	}
}

// rangeAdminCases are the out-of-range values of Retry, UpdateQueue and PutSchedule.
func rangeAdminCases(f *rangeFixture) []rangeCase {
	s, b, late, huge, big := f.s, f.b, f.late, f.huge, f.big
	uq := func(u norn.QueueUpdate) func() error {
		return func() error { _, err := s.UpdateQueue(b.ctx, "q", u); return err }
	}
	return []rangeCase{
		{"RetryRunAtAfterMaxTime", func() error {
			_, err := s.Retry(b.ctx, "ended", norn.RetryOptions{RunAt: late})
			return err
		}, "run_at"},
		{"UpdateQueueHugeTimeout", uq(norn.QueueUpdate{Timeout: &huge}), "timeout"},
		{"UpdateQueueHugeMaxRuntime", uq(norn.QueueUpdate{MaxRuntime: &huge}), "max_runtime"},
		{"UpdateQueueMaxAttemptsOver32Bits", uq(norn.QueueUpdate{MaxAttempts: ptr(big)}), "max_attempts"},
		{"UpdateQueueMaxRetriesOver32Bits", uq(norn.QueueUpdate{Retry: &norn.RetryPolicy{MaxRetries: big}}), "retry.max_retries"},
		{"UpdateQueueHugeRetention", uq(norn.QueueUpdate{Retention: &norn.Retention{Completed: dur(time.Hour), Aborted: huge, Cancelled: dur(time.Hour)}}), "retention.aborted"},
		{"UpdateQueueMaxRunningOver32Bits", uq(norn.QueueUpdate{MaxRunning: ptr(big)}), "max_running"},
		{"UpdateQueueKeyLimitOver32Bits", uq(norn.QueueUpdate{KeyLimit: ptr(big)}), "key_limit"},
		{"UpdateQueueKeyOwnLimitOver32Bits", uq(norn.QueueUpdate{Keys: map[string]*norn.KeySettings{"k": {Limit: big}}}), `keys["k"].limit`},
		{"PutScheduleMaxAttemptsOver32Bits", func() error {
			_, err := s.PutSchedule(b.ctx, norn.Schedule{Name: "s", Queue: "q", Cron: "@hourly", MaxAttempts: ptr(big)})
			return err
		}, "max_attempts"},
		{"PutScheduleHugeTimeout", func() error {
			_, err := s.PutSchedule(b.ctx, norn.Schedule{Name: "s", Queue: "q", Cron: "@hourly", Timeout: huge})
			return err
		}, "timeout"},
	}
}

// rangeFilterCases are out-of-range times in a filter, given to every call
// that takes one.
func rangeFilterCases(f *rangeFixture) []rangeCase {
	s, b, late, early := f.s, f.b, f.late, f.early
	var cases []rangeCase
	filter := func(flt norn.Filter) []func() error {
		return []func() error{
			func() error { _, err := s.List(b.ctx, norn.Query{Filter: flt}); return err },
			func() error { _, err := s.Count(b.ctx, flt); return err },
			func() error { _, err := s.CountGrouped(b.ctx, flt); return err },
			func() error { _, err := s.DeleteMatching(b.ctx, flt); return err },
			func() error { _, err := s.RetryMatching(b.ctx, flt); return err },
			func() error {
				it, err := s.Stream(b.ctx, norn.Query{Filter: flt})
				if err == nil {
					for it.Next() {
					}
					err = it.Err()
					it.Close()
				}
				return err
			},
		}
	}
	for _, tf := range []struct {
		name string
		f    norn.Filter
	}{
		{"CreatedAfterAfterMaxTime", norn.Filter{Queues: []string{"r"}, CreatedAfter: late}},
		{"CreatedBeforeBeforeMinTime", norn.Filter{Queues: []string{"r"}, CreatedBefore: early}},
		{"UpdatedAfterAfterMaxTime", norn.Filter{Queues: []string{"r"}, UpdatedAfter: late}},
		{"UpdatedBeforeBeforeMinTime", norn.Filter{Queues: []string{"r"}, UpdatedBefore: early}},
	} {
		field := map[string]string{"CreatedAfterAfterMaxTime": "created_after", "CreatedBeforeBeforeMinTime": "created_before",
			"UpdatedAfterAfterMaxTime": "updated_after", "UpdatedBeforeBeforeMinTime": "updated_before"}[tf.name]
		for i, call := range filter(tf.f) {
			op := []string{"List", "Count", "CountGrouped", "DeleteMatching", "RetryMatching", "Stream"}[i]
			cases = append(cases, rangeCase{op + tf.name, call, field})
		}
	}
	return cases
}

// characters: ids refuse characters that show nothing or reorder the text
// around them, so two different ids cannot look the same; labels refuse
// controls (NUL, newline), which break logs and line-based tools.
func characters(t *testing.T, setup setupFunc) {
	s, b := setup(t)
	b.submit(norn.NewTask{ID: "ready", Queue: "q", Labels: map[string]string{"k": "v"}})
	before := b.snapshot()
	sub := func(nt norn.NewTask) func() error {
		return func() error { _, err := s.Submit(b.ctx, nt); return err }
	}
	for _, tc := range []struct {
		name  string
		call  func() error
		field string
	}{
		{"IDWithZeroWidthSpace", sub(norn.NewTask{ID: "in\u200bvoice", Queue: "q"}), "tasks[0].id"},
		{"IDWithZeroWidthJoiner", sub(norn.NewTask{ID: "a\u200db", Queue: "q"}), "tasks[0].id"},
		{"IDWithBidiOverride", sub(norn.NewTask{ID: "abc\u202efdp.exe", Queue: "q"}), "tasks[0].id"},
		{"IDWithBidiIsolate", sub(norn.NewTask{ID: "a\u2066b", Queue: "q"}), "tasks[0].id"},
		{"IDWithByteOrderMark", sub(norn.NewTask{ID: "\ufeffready", Queue: "q"}), "tasks[0].id"},
		{"IDWithNoBreakSpace", sub(norn.NewTask{ID: "a\u00a0b", Queue: "q"}), "tasks[0].id"},
		{"IDWithC1Control", sub(norn.NewTask{ID: "a\u0085b", Queue: "q"}), "tasks[0].id"},
		{"DependencyWithZeroWidthSpace", sub(norn.NewTask{Queue: "q", DependsOn: []string{"ready\u200b"}}), "tasks[0].depends_on[0]"},
		{"LabelValueWithNUL", sub(norn.NewTask{Queue: "q", Labels: map[string]string{"k": "a\x00b"}}), "tasks[0].labels.k"},
		{"LabelValueWithNewline", sub(norn.NewTask{Queue: "q", Labels: map[string]string{"k": "a\nb"}}), "tasks[0].labels.k"},
		{"LabelValueWithBidiOverride", sub(norn.NewTask{Queue: "q", Labels: map[string]string{"k": "a\u202eb"}}), "tasks[0].labels.k"},
		{"LabelValueNotUTF8", sub(norn.NewTask{Queue: "q", Labels: map[string]string{"k": "\xff"}}), "tasks[0].labels.k"},
		{"LabelKeyWithNewline", sub(norn.NewTask{Queue: "q", Labels: map[string]string{"a\nb": "v"}}), "tasks[0].labels"},
		{"LabelKeyWithZeroWidthSpace", sub(norn.NewTask{Queue: "q", Labels: map[string]string{"k\u200b": "v"}}), "tasks[0].labels"},
		{"UpdateLabelValueWithNUL", func() error {
			_, err := s.Update(b.ctx, "ready", norn.Update{Labels: map[string]string{"k": "\x00"}})
			return err
		}, "labels.k"},
		{"FilterLabelValueWithNewline", func() error {
			_, err := s.Count(b.ctx, norn.Filter{Labels: map[string]string{"k": "v\n"}})
			return err
		}, "labels.k"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wantField(t, tc.name, tc.call(), norn.ErrInvalidArgument, tc.field)
			b.with(t).unchanged(tc.name, before)
		})
	}
	t.Run("PrintableUnicodeIsAccepted", func(t *testing.T) {
		bt := b.with(t)
		id := "ｆｕｌｌ-ß-日本-😀"
		got := bt.submitOne(norn.NewTask{ID: id, Queue: "q", Labels: map[string]string{"名前": "ｆｕｌｌ width ok 😀", "tab-free": strings.Repeat("é", 10)}})
		if got.ID != id || got.Labels["名前"] != "ｆｕｌｌ width ok 😀" {
			t.Fatalf("stored %s", canonTask(got))
		}
		bt.delete(id)
	})
}

// workerRegistry: a store that implements norn.WorkerRegistry keeps each
// worker's registrar with its registration and reads it back, and worker
// ids are random rather than a count. (The HTTP client has no registry:
// the registrar is the server's business and never travels over the API.)
func workerRegistry(t *testing.T, setup setupFunc) {
	t.Run("IDsAreNotACount", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		var nums []int64
		for range 3 {
			id := b.registerWorker(norn.WorkerInfo{Name: "n"})
			n, ok := workerNumber(id)
			if !ok {
				t.Fatalf("worker id %q does not look like worker-<digits>", id)
			}
			nums = append(nums, n)
		}
		if nums[1]-nums[0] < 1000 && nums[1] > nums[0] && nums[2]-nums[1] < 1000 && nums[2] > nums[1] {
			t.Fatalf("worker ids %v count up: they tell how many workers registered in between", nums)
		}
	})
	t.Run("KeepsTheRegistrar", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		reg, ok := s.(norn.WorkerRegistry)
		if !ok {
			t.Skip("this store does not implement norn.WorkerRegistry (the HTTP client keeps registrars to the server)")
		}
		a := b.registerWorker(norn.WorkerInfo{Name: "a", Queues: []string{"q"}, Registrar: "token:aaaa"})
		c := b.registerWorker(norn.WorkerInfo{Name: "c", Registrar: "token:cccc"})
		for _, w := range []struct{ id, name, registrar string }{{a, "a", "token:aaaa"}, {c, "c", "token:cccc"}} {
			info, err := reg.Worker(b.ctx, w.id)
			if err != nil {
				t.Fatalf("Worker(%s): %v", w.id, err)
			}
			if info.ID != w.id || info.Name != w.name || info.Registrar != w.registrar {
				t.Fatalf("Worker(%s) = %+v, want name %s registrar %s", w.id, info, w.name, w.registrar)
			}
		}
		_, err := reg.Worker(b.ctx, "worker-0")
		wantErr(t, "Worker of an unknown id", err, norn.ErrNotFound)
		// A claim refreshes last_seen; the registrar stays.
		b.claimed(a, norn.NewTask{Queue: "q"})
		if info, err := reg.Worker(b.ctx, a); err != nil || info.Registrar != "token:aaaa" || len(info.Queues) != 1 {
			t.Fatalf("Worker(%s) after a claim: %+v, %v", a, info, err)
		}
	})
}

func workerNumber(id string) (int64, bool) {
	digits, ok := strings.CutPrefix(id, "worker-")
	if !ok || digits == "" || len(digits) > 18 {
		return 0, false
	}
	var n int64
	for _, c := range digits {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	return n, true
}
