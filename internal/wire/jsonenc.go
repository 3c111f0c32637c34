package wire

// The JSON appenders below produce the same bytes as encoding/json for the
// shapes the hot paths write (ids, queue names, times, durations,
// progress), so the hand-written encoders in encode.go can skip
// encoding/json's reflection and re-validation of raw members.

import (
	"encoding/json"
	"math"
	"strconv"
	"time"

	"github.com/nornq/norn"
)

// jsonMarshal appends name followed by v encoded by encoding/json: for members
// rare enough on the hot path not to deserve their own encoder.
func jsonMarshal(b []byte, name string, v any) ([]byte, error) {
	j, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return append(append(b, name...), j...), nil
}

// jsonString appends s as a JSON string. Plain printable ASCII (ids, queue
// names) is written as is; anything else goes through encoding/json so
// escaping, invalid UTF-8 and HTML-safe output stay exactly as json.Marshal
// has them.
func jsonString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			j, _ := json.Marshal(s) // a string always marshals
			return append(b, j...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

// jsonTime appends name and t in RFC 3339 with nanoseconds, as time.Time's
// MarshalJSON does (including its error for years outside 0..9999).
func jsonTime(b []byte, name string, t time.Time) ([]byte, error) {
	if y := t.Year(); y < 0 || y > 9999 {
		return jsonMarshal(b, name, t) // json.Marshal's error
	}
	b = append(b, name...)
	b = append(b, '"')
	b = t.AppendFormat(b, time.RFC3339Nano)
	return append(b, '"'), nil
}

// jsonDuration appends name and d as a Go duration string, as norn.Duration's
// MarshalJSON does.
func jsonDuration(b []byte, name string, d norn.Duration) []byte {
	b = append(b, name...)
	b = append(b, '"')
	b = append(b, time.Duration(d).String()...)
	return append(b, '"')
}

// jsonFloat formats f as encoding/json does (ES6 number formatting); NaN and
// infinities are json.Marshal's error.
func jsonFloat(b []byte, f float64) ([]byte, error) {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		_, err := json.Marshal(f)
		return nil, err
	}
	abs := math.Abs(f)
	format := byte('f')
	if abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	b = strconv.AppendFloat(b, f, format, -1, 64)
	if format == 'e' {
		// json writes e-9, not e-09.
		n := len(b)
		if n >= 4 && b[n-4] == 'e' && b[n-3] == '-' && b[n-2] == '0' {
			b[n-2] = b[n-1]
			b = b[:n-1]
		}
	}
	return b, nil
}
