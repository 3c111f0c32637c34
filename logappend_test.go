package norn

import (
	"encoding/json"
	"errors"
	"math"
	"strings"
	"testing"
)

func TestLogAppendValidate(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name  string
		a     LogAppend
		code  Code // "": valid
		field string
	}{
		{"json", LogAppend{Data: json.RawMessage(`{"step":1}`)}, "", ""},
		{"with seq", LogAppend{Seq: 3, Data: json.RawMessage(`1`)}, "", ""},
		{"no data", LogAppend{}, CodeInvalidArgument, "data"},
		{"not json", LogAppend{Data: json.RawMessage(`{`)}, CodeInvalidArgument, "data"},
		{"too large", LogAppend{Data: json.RawMessage(`"` + strings.Repeat("x", MaxLogBytes) + `"`)}, CodeTooLarge, "data"},
		{"seq over 63 bits", LogAppend{Seq: math.MaxInt64 + 1, Data: json.RawMessage(`1`)}, CodeInvalidArgument, "seq"},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := c.a.Validate()
			if c.code == "" {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				return
			}
			var ne *Error
			if !errors.As(err, &ne) || ne.Code != c.code || ne.Field != c.field {
				t.Fatalf("Validate = %v, want %s naming %q", err, c.code, c.field)
			}
		})
	}
}

func TestLogAppendCheckSeq(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		seq, next uint64
		field     string // "-": allowed
	}{
		{0, 4, "-"},
		{4, 4, "-"},
		{3, 4, "seq"},
		{5, 4, "seq"},
	} {
		wantConflict(t, LogAppend{Seq: c.seq}.CheckSeq("l", c.next), c.field)
	}
}
