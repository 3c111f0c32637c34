package cli

import (
	"errors"
	"net"
	"strings"
	"syscall"
	"testing"

	"github.com/nornq/norn"
)

func TestExplainFirstErrors(t *testing.T) {
	t.Setenv("NORN_TOKEN", "")
	dial := &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	for _, c := range []struct {
		name, token string
		err         error
		want        string
	}{
		{"no server", "", dial, "no norn server answers at http://127.0.0.1:7070"},
		{"no token", "", norn.Errorf(norn.CodeUnauthenticated, "a bearer token is required"), "give it with --token or NORN_TOKEN"},
		{"unknown token", "t", norn.Errorf(norn.CodeUnauthenticated, "unknown token"), "is not one this server knows"},
		{"not allowed", "t", norn.Errorf(norn.CodePermissionDenied, "may not call DELETE /v1/tasks"), "an admin's token"},
	} {
		g := &Globals{Server: "127.0.0.1:7070", Token: c.token}
		err := explain(g, c.err)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want it to say %q", c.name, err, c.want)
		}
		if !errors.Is(err, c.err) {
			t.Errorf("%s: the hint hides the error from errors.Is", c.name)
		}
	}
	other := errors.New("boom")
	if explain(&Globals{}, other) != other {
		t.Error("an error with no hint was changed")
	}
	if got := (&Globals{Server: "https://x:1"}).serverURL(); got != "https://x:1" {
		t.Errorf("a URL with a scheme became %q", got)
	}
}
