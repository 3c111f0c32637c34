package worker

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/nornq/norn"
)

func TestParseProgress(t *testing.T) {
	t.Parallel()
	cases := []struct {
		line string
		want float64
		ok   bool
	}{
		{"progress: 0.4", 0.4, true},
		{"progress: 0.4\n", 0.4, true},
		{"  Progress:1", 1, true},
		{"PROGRESS: 0", 0, true},
		{"progress: 40%", 0.4, true},
		{"progress: 100 %", 1, true},
		{"progress: 1.5", 0, false},
		{"progress: -0.1", 0, false},
		{"progress: NaN", 0, false},
		{"progress: Inf", 0, false},
		{"progress: 150%", 0, false},
		{"progress:", 0, false},
		{"progress: half", 0, false},
		{"my progress: 0.4", 0, false},
		{"", 0, false},
	}
	for _, c := range cases {
		got, ok := ParseProgress(c.line)
		if ok != c.ok || (ok && got != c.want) {
			t.Errorf("ParseProgress(%q) = %v, %v; want %v, %v", c.line, got, ok, c.want, c.ok)
		}
	}
}

func TestParseResult(t *testing.T) {
	t.Parallel()
	cases := []struct{ out, want string }{
		{"", ""},
		{" \n\t", ""},
		{`{"a":1}` + "\n", `{"a":1}`},
		{"  [1, 2]  ", "[1, 2]"},
		{"42\n", "42"},
		{`"quoted"`, `"quoted"`},
		{"hello world\n", `"hello world"`},
		{"two\nlines\n\n", `"two\nlines"`},
		{"{broken", `"{broken"`},
	}
	for _, c := range cases {
		if got := string(ParseResult([]byte(c.out))); got != c.want {
			t.Errorf("ParseResult(%q) = %s, want %s", c.out, got, c.want)
		}
	}
}

func TestTailBufferKeepsTheEnd(t *testing.T) {
	t.Parallel()
	tb := &tailBuffer{max: 10}
	for i := 0; i < 100; i++ {
		tb.Write([]byte("abcdefg\n"))
	}
	tb.Write([]byte("last line"))
	if got := tb.String(); got != "\nlast line" && got != "last line" {
		t.Errorf("tail = %q", got)
	}
	tb = &tailBuffer{max: 4}
	tb.Write([]byte("ééé")) // 6 bytes; the cut lands inside a rune
	if got := tb.String(); !utf8.ValidString(got) || !strings.HasSuffix(got, "é") {
		t.Errorf("tail %q is not valid UTF-8 ending in é", got)
	}
}

func TestScanStderr(t *testing.T) {
	t.Parallel()
	var got []float64
	var copied strings.Builder
	long := "progress: 0.1" + strings.Repeat("x", 10000) + "\n"
	in := "hello\nprogress: 0.25\n" + long + "progress: 50%\nprogress: 0.75"
	tail := &tailBuffer{max: 64}
	scanStderr(strings.NewReader(in), &copied, tail, func(p float64) { got = append(got, p) })
	if copied.String() != in {
		t.Error("stderr not copied verbatim")
	}
	if len(got) != 3 || got[0] != 0.25 || got[1] != 0.5 || got[2] != 0.75 {
		t.Errorf("progress updates %v, want [0.25 0.5 0.75]", got)
	}
}

func TestErrorInfoTruncates(t *testing.T) {
	t.Parallel()
	info := errorInfo(WithCode("big", errStr(strings.Repeat("é", maxDescription))))
	if info.Code != "big" || len(info.Description) > maxDescription || !utf8.ValidString(info.Description) {
		t.Errorf("code %q, %d bytes, valid %v", info.Code, len(info.Description), utf8.ValidString(info.Description))
	}
}

func TestErrorInfoRetryIn(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		err  error
		code string
		in   time.Duration
	}{
		{"plain error", errStr("x"), DefaultErrorCode, 0},
		{"retry in", RetryIn(time.Minute, errStr("x")), DefaultErrorCode, time.Minute},
		{"coded inside", RetryIn(time.Minute, WithCode("rate_limited", errStr("x"))), "rate_limited", time.Minute},
		{"coded outside", WithCode("rate_limited", RetryIn(time.Minute, errStr("x"))), "rate_limited", time.Minute},
		{"wrapped", fmt.Errorf("call: %w", RetryIn(time.Second, errStr("x"))), DefaultErrorCode, time.Second},
		{"beyond what a store holds", RetryIn(1<<62, errStr("x")), DefaultErrorCode, norn.MaxDuration},
	} {
		t.Run(c.name, func(t *testing.T) {
			info := errorInfo(c.err)
			if info.Code != c.code || info.RetryIn.D() != c.in {
				t.Errorf("code %q retry_in %s, want %q %s", info.Code, info.RetryIn.D(), c.code, c.in)
			}
		})
	}
	if RetryIn(time.Second, nil) != nil {
		t.Error("RetryIn(d, nil) is not nil")
	}
}

type errStr string

func (e errStr) Error() string { return string(e) }

func TestParseLoadavg(t *testing.T) {
	t.Parallel()
	if v, ok := parseLoadavg([]byte("0.52 0.58 0.59 1/467 12345\n")); !ok || v != 0.52 {
		t.Errorf("got %v %v", v, ok)
	}
	if _, ok := parseLoadavg([]byte("")); ok {
		t.Error("empty loadavg parsed")
	}
}

func FuzzParseProgress(f *testing.F) {
	for _, s := range []string{"progress: 0.4", "progress: 40%", "Progress:1e-3", "progress: 0x1p-2", "progress: -0"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, line string) {
		p, ok := ParseProgress(line)
		if ok && !(p >= 0 && p <= 1) {
			t.Fatalf("ParseProgress(%q) = %v outside 0..1", line, p)
		}
		if !ok && p != 0 {
			t.Fatalf("rejected line returned %v", p)
		}
	})
}

func FuzzParseResult(f *testing.F) {
	for _, s := range []string{"", "{}", "text\n", "\xff\xfe", `{"a":`, "null", " 1 "} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, out []byte) {
		res := ParseResult(out)
		if res == nil {
			if len(strings.TrimSpace(string(out))) != 0 {
				t.Fatalf("non-empty output %q gave no result", out)
			}
			return
		}
		if !json.Valid(res) {
			t.Fatalf("ParseResult(%q) = %q is not JSON", out, res)
		}
	})
}

func FuzzScanStderr(f *testing.F) {
	f.Add([]byte("progress: 0.5\nhello\n"), 8)
	f.Fuzz(func(t *testing.T, in []byte, tailMax int) {
		if tailMax <= 0 || tailMax > 1<<16 {
			tailMax = 16
		}
		var copied strings.Builder
		tail := &tailBuffer{max: tailMax}
		scanStderr(strings.NewReader(string(in)), &copied, tail, func(p float64) {
			if !(p >= 0 && p <= 1) {
				t.Fatalf("progress %v", p)
			}
		})
		if copied.String() != string(in) {
			t.Fatal("stderr not copied verbatim")
		}
		if s := tail.String(); len(s) > tailMax || !utf8.ValidString(s) {
			t.Fatalf("tail %q", s)
		}
	})
}

func TestParseSnooze(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 1, 2, 15, 4, 5, 0, time.UTC)
	cases := []struct {
		out   string
		want  norn.Snooze
		ok    bool
		wrong bool // a snooze line with a bad value
	}{
		{"norn:snooze 30s", norn.Snooze{Delay: norn.Duration(30 * time.Second)}, true, false},
		{"working…\nnorn:snooze 1h30m\n", norn.Snooze{Delay: norn.Duration(90 * time.Minute)}, true, false},
		{"norn:snooze 2026-01-02T15:04:05Z\n\n  \n", norn.Snooze{RunAt: at}, true, false},
		{"  norn:snooze\t2026-01-02T16:04:05+01:00 \r\n", norn.Snooze{RunAt: at}, true, false},
		{"norn:snooze 30s key", norn.Snooze{Delay: norn.Duration(30 * time.Second), Scope: norn.SnoozeScopeKey}, true, false},
		{"norn:snooze 2026-01-02T15:04:05Z  key \n", norn.Snooze{RunAt: at, Scope: norn.SnoozeScopeKey}, true, false},
		{"norn:snooze 30s queue", norn.Snooze{}, true, true},
		{"norn:snooze 30s key key", norn.Snooze{}, true, true},
		{"norn:snooze key", norn.Snooze{}, true, true},
		{"norn:snooze 0s", norn.Snooze{}, true, true},
		{"norn:snooze -5s", norn.Snooze{}, true, true},
		{"norn:snooze", norn.Snooze{}, true, true},
		{"norn:snooze tomorrow", norn.Snooze{}, true, true},
		{"norn:snooze 30", norn.Snooze{}, true, true},
		{"norn:snooze 30s\nthen more output", norn.Snooze{}, false, false},
		{"norn:snoozed 30s", norn.Snooze{}, false, false},
		{"please norn:snooze 30s", norn.Snooze{}, false, false},
		{"", norn.Snooze{}, false, false},
	}
	for _, c := range cases {
		got, ok, err := ParseSnooze([]byte(c.out))
		if ok != c.ok || (err != nil) != c.wrong || got != c.want {
			t.Errorf("ParseSnooze(%q) = %+v, %v, %v; want %+v, %v, error %v", c.out, got, ok, err, c.want, c.ok, c.wrong)
		}
		if err == nil && ok && got.Validate() != nil {
			t.Errorf("ParseSnooze(%q) = %+v, which the store refuses: %v", c.out, got, got.Validate())
		}
	}
}

func FuzzParseSnooze(f *testing.F) {
	for _, s := range []string{"norn:snooze 30s", "x\nnorn:snooze 2026-01-02T15:04:05Z\n", "norn:snooze -1s", "norn:snooze \xff"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, out []byte) {
		sn, ok, err := ParseSnooze(out)
		switch {
		case !ok && (err != nil || sn != norn.Snooze{}):
			t.Fatalf("no snooze line in %q, yet %+v, %v", out, sn, err)
		case ok && err == nil && sn.Validate() != nil:
			t.Fatalf("ParseSnooze(%q) = %+v, which the store refuses: %v", out, sn, sn.Validate())
		case err != nil && !utf8.ValidString(err.Error()):
			t.Fatalf("error is not UTF-8: %q", err.Error())
		}
	})
}
