package cli

import "testing"

func TestParseRate(t *testing.T) {
	for _, c := range []struct {
		in   string
		want float64
		ok   bool
	}{
		{"100/s", 100, true},
		{"100", 100, true},
		{"30/m", 0.5, true},
		{"36/h", 0.01, true},
		{"0", 0, true},
		{"off", 0, true},
		{"fast", 0, false},
		{"10/d", 0, false},
		{"-1/s", 0, false},
		{"", 0, false},
	} {
		got, err := parseRate(c.in)
		if (err == nil) != c.ok || (c.ok && got != c.want) {
			t.Errorf("parseRate(%q) = %v, %v; want %v (ok %v)", c.in, got, err, c.want, c.ok)
		}
	}
}
