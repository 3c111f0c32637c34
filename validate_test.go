package norn

import (
	"errors"
	"testing"
	"unicode"
)

// TestInvisibleASCIIMatchesTheTables: the ASCII shortcut of invisible
// answers what the Unicode tables answer for every ASCII character.
func TestInvisibleASCIIMatchesTheTables(t *testing.T) {
	for r := rune(0); r < 0x80; r++ {
		want := unicode.IsControl(r) || unicode.Is(unicode.Cf, r) || unicode.Is(unicode.Z, r)
		if got := invisible(r); got != want {
			t.Errorf("invisible(%U) = %v, want %v", r, got, want)
		}
	}
}

func TestCursorBytes(t *testing.T) {
	good := CursorString([]byte("p\x00\x01position"))
	for _, tc := range []struct {
		name, cursor string
		ok           bool
	}{
		{"as made", good, true},
		{"empty", "", false},
		{"a line break inside", good[:2] + "\n" + good[2:], false},
		{"a carriage return inside", good[:2] + "\r" + good[2:], false},
		{"padded", good + "=", false},
		{"standard alphabet", "a+b/", false},
		{"not base64", "%%%", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := CursorBytes(tc.cursor)
			if tc.ok {
				if err != nil || string(b) != "p\x00\x01position" {
					t.Fatalf("CursorBytes(%q) = %q, %v", tc.cursor, b, err)
				}
				return
			}
			var ne *Error
			if !errors.As(err, &ne) || ne.Code != CodeInvalidArgument || ne.Field != "cursor" {
				t.Fatalf("CursorBytes(%q) error %v, want invalid_argument on cursor", tc.cursor, err)
			}
		})
	}
}
