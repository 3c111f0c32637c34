package cli

import (
	"bytes"
	"strings"
	"testing"
)

// TestHelpNeverPrintsTheToken: with NORN_TOKEN set, --help says that it is
// set but never prints its value (a flag default would).
func TestHelpNeverPrintsTheToken(t *testing.T) {
	const secret = "s3cr3t-token-value"
	t.Setenv("NORN_TOKEN", secret)
	for _, args := range [][]string{{"--help"}, {"list", "--help"}, {"server", "--help"}} {
		root := NewRoot()
		var out bytes.Buffer
		root.SetOut(&out)
		root.SetErr(&out)
		root.SetArgs(args)
		if err := root.Execute(); err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		if strings.Contains(out.String(), secret) {
			t.Errorf("%v prints the token:\n%s", args, out.String())
		}
		if args[0] != "server" && !strings.Contains(out.String(), "NORN_TOKEN, which is set") {
			t.Errorf("%v does not say NORN_TOKEN is set:\n%s", args, out.String())
		}
	}
}

// TestBearerToken: --token wins over NORN_TOKEN, which is read at use.
func TestBearerToken(t *testing.T) {
	t.Setenv("NORN_TOKEN", "from-env")
	g := &Globals{}
	if g.bearerToken() != "from-env" {
		t.Errorf("bearerToken() does not read NORN_TOKEN")
	}
	g.Token = "flag"
	if g.bearerToken() != "flag" {
		t.Errorf("--token does not win over NORN_TOKEN")
	}
}
