package norn

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

func TestRanges(t *testing.T) {
	late := time.Date(2300, 1, 1, 0, 0, 0, 0, time.UTC)
	early := time.Date(1600, 1, 1, 0, 0, 0, 0, time.UTC)
	huge := Duration(2562047 * time.Hour)
	var big64 int64 = MaxCount + 1
	big := int(big64)
	for _, c := range []struct {
		name  string
		err   error
		field string // "" = valid
	}{
		{"zero time is unset", ValidateTime("t", time.Time{}), ""},
		{"a time just after the epoch", ValidateTime("t", MinTime.Add(time.Nanosecond)), ""},
		{"the epoch itself reads as unset in a store", ValidateTime("t", MinTime), "t"},
		{"before the epoch", ValidateTime("t", early), "t"},
		{"just before MaxTime", ValidateTime("t", MaxTime.Add(-time.Nanosecond)), ""},
		{"MaxTime", ValidateTime("t", MaxTime), "t"},
		{"2300", ValidateTime("t", late), "t"},
		{"zero duration", ValidateDuration("d", 0), ""},
		{"MaxDuration", ValidateDuration("d", Duration(MaxDuration)), ""},
		{"over MaxDuration", ValidateDuration("d", Duration(MaxDuration+1)), "d"},
		{"negative duration", ValidateDuration("d", -1), "d"},
		{"MaxCount", ValidateCount("n", MaxCount), ""},
		{"over MaxCount", ValidateCount("n", big), "n"},
		{"negative count", ValidateCount("n", -1), "n"},
		{"MaxSeq", ValidateSeq("v", math.MaxInt64), ""},
		{"over MaxSeq", ValidateSeq("v", math.MaxInt64+1), "v"},

		{"task run_at", (&NewTask{Queue: "q", RunAt: late}).Validate(), "run_at"},
		{"task delay", (&NewTask{Queue: "q", Delay: huge}).Validate(), "delay"},
		{"task timeout", (&NewTask{Queue: "q", Timeout: huge}).Validate(), "timeout"},
		{"task max_runtime", (&NewTask{Queue: "q", MaxRuntime: huge}).Validate(), "max_runtime"},
		{"task unique_for", (&NewTask{Queue: "q", UniqueKey: "k", UniqueFor: huge}).Validate(), "unique_for"},
		{"task max_attempts", (&NewTask{Queue: "q", MaxAttempts: &big}).Validate(), "max_attempts"},
		{"task retry max_retries", (&NewTask{Queue: "q", Retry: &RetryPolicy{MaxRetries: big}}).Validate(), "retry.max_retries"},
		{"task retry base", (&NewTask{Queue: "q", Retry: &RetryPolicy{MaxRetries: 1, Base: huge}}).Validate(), "retry.base"},
		{"update run_at", (&Update{RunAt: &early}).Validate(), "run_at"},
		{"update if_version", (&Update{IfVersion: math.MaxInt64 + 1}).Validate(), "if_version"},
		{"claim timeout", (&ClaimRequest{Worker: "w", Queues: []string{"q"}, Timeout: huge}).Validate(), "timeout"},
		{"lease number", LeaseRef{TaskID: "a", Worker: "w", Lease: math.MaxInt64 + 1}.Validate(), "lease"},
		{"heartbeat extend", Heartbeat{Extend: huge}.Validate(), "extend"},
		{"snooze delay", Snooze{Delay: huge}.ValidateRange(), "delay"},
		{"snooze run_at", Snooze{RunAt: late}.ValidateRange(), "run_at"},
		{"lease op extend", (&LeaseOp{Op: OpHeartbeat, Heartbeat: Heartbeat{Extend: huge}}).ValidateRange(), "extend"},
		{"lease op snooze", (&LeaseOp{Op: OpSnooze, Snooze: Snooze{RunAt: late}}).ValidateRange(), "run_at"},
		{"fail retry_in", (&LeaseOp{Op: OpFail, LeaseRef: LeaseRef{TaskID: "a", Worker: "w", Lease: 1}, Error: &ErrorInfo{Code: "x", RetryIn: huge}}).Validate(), "error.retry_in"},
		{"abort retry_in", (&LeaseOp{Op: OpAbort, LeaseRef: LeaseRef{TaskID: "a", Worker: "w", Lease: 1}, Error: &ErrorInfo{Code: "x", RetryIn: Duration(time.Second)}}).Validate(), "error.retry_in"},
		{"retry run_at", RetryOptions{RunAt: late}.Validate(), "run_at"},
		{"queue timeout", (&QueueUpdate{Timeout: &huge}).Validate(), "timeout"},
		{"queue retention", (&QueueUpdate{Retention: &Retention{Cancelled: huge}}).Validate(), "retention.cancelled"},
		{"queue max_running", (&QueueUpdate{MaxRunning: &big}).Validate(), "max_running"},
		{"queue key limit", (&QueueUpdate{Keys: map[string]*KeySettings{"k": {Limit: big}}}).Validate(), `keys["k"].limit`},
		{"filter created_after", (&Filter{CreatedAfter: late}).Validate(), "created_after"},
		{"filter updated_before", (&Filter{UpdatedBefore: early}).Validate(), "updated_before"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if c.field == "" {
				if c.err != nil {
					t.Fatalf("refused: %v", c.err)
				}
				return
			}
			var e *Error
			if !errors.As(c.err, &e) || e.Code != CodeInvalidArgument || e.Field != c.field {
				t.Fatalf("got %v, want invalid_argument naming %q", c.err, c.field)
			}
		})
	}
	if _, err := DecideRetry(&Task{ID: "a", Status: StatusAborted}, time.Now(), RetryOptions{RunAt: late}, nil); CodeOf(err) != CodeInvalidArgument {
		t.Errorf("DecideRetry with a run_at of 2300: %v", err)
	}
}

// TestBackoffStaysWithinMaxDuration: without a cap, backoffs double up to
// MaxDuration and no further, so a retry time never leaves what stores hold.
func TestBackoffStaysWithinMaxDuration(t *testing.T) {
	r := RetryPolicy{MaxRetries: MaxCount, Base: Duration(time.Hour)}
	for _, n := range []int{0, 10, 20, 40, 1000, MaxCount} {
		if d := r.backoff(n); d <= 0 || d > MaxDuration {
			t.Errorf("backoff(%d) = %s", n, d)
		}
	}
	if d := (RetryPolicy{Base: Duration(MaxDuration)}).backoff(3); d != MaxDuration {
		t.Errorf("backoff from a MaxDuration base: %s", d)
	}
}

// TestIDByteTable: ValidateID's table of ASCII bytes decides every
// ASCII id as the check of each character does, and an id with a refused
// byte anywhere gets that check's error.
func TestIDByteTable(t *testing.T) {
	for b := 0; b < utf8.RuneSelf; b++ {
		for _, id := range []string{string(rune(b)) + "a", "0198c1e2-7a4b-7cde-8f01-23456789abc" + string(rune(b))} {
			got, want := ValidateID("id", id), validateIDRunes("id", id)
			if (got == nil) != (want == nil) || (got != nil && got.Error() != want.Error()) {
				t.Errorf("ValidateID(%q) = %v, want %v", id, got, want)
			}
		}
	}
	if err := ValidateID("id", "0198c1e2-7a4b-7cde-8f01-23456789abcd"); err != nil {
		t.Errorf("a UUID: %v", err)
	}
}

func TestInvisibleCharactersInIDs(t *testing.T) {
	for _, id := range []string{"a\u200bb", "a\u200cb", "a\u200db", "a\u202eb", "a\u2066b", "\ufeffa", "a\u00a0b", "a\u3000b",
		"a\u2028b", "a\u0085b", "a\ufe0fb", "a\U000e0041b"} {
		if err := ValidateID("id", id); CodeOf(err) != CodeInvalidArgument {
			t.Errorf("ValidateID(%q) = %v, want refused", id, err)
		}
	}
	for _, id := range []string{"ｆｕｌｌ", "日本語", "😀", "ß-é", "a:b~c"} {
		if err := ValidateID("id", id); err != nil {
			t.Errorf("ValidateID(%q) = %v, want accepted", id, err)
		}
	}
	for _, v := range []string{"\x00", "a\nb", "\t", "\u202e", "\u2028", "\x7f", "\xff"} {
		if err := ValidateLabels("labels", map[string]string{"k": v}); CodeOf(err) != CodeInvalidArgument || !strings.HasPrefix(err.(*Error).Field, "labels.k") {
			t.Errorf("label value %q: %v, want refused naming labels.k", v, err)
		}
	}
	for _, v := range []string{"ｆｕｌｌ width", "a\u200db", "日本 😀"} {
		if err := ValidateLabels("labels", map[string]string{"k": v}); err != nil {
			t.Errorf("label value %q: %v, want accepted", v, err)
		}
	}
}

func TestNewWorkerID(t *testing.T) {
	seen := map[string]bool{}
	for range 1000 {
		id := NewWorkerID()
		if len(id) != len("worker-")+16 || !strings.HasPrefix(id, "worker-") || seen[id] {
			t.Fatalf("NewWorkerID() = %q", id)
		}
		if err := ValidateID("worker", id); err != nil {
			t.Fatal(err)
		}
		seen[id] = true
	}
}
