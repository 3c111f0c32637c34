package norn

import (
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
