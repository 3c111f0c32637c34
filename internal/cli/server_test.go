package cli

import (
	"strings"
	"testing"

	"github.com/nornq/norn/server"
	"github.com/spf13/pflag"
)

func TestParseAuthToken(t *testing.T) {
	t.Parallel()
	tok, err := parseAuthToken("s3cret:worker:emails,sms")
	if err != nil || tok.Token != "s3cret" || tok.Role != server.RoleWorker || strings.Join(tok.Queues, ",") != "emails,sms" {
		t.Fatalf("parseAuthToken = %+v, %v", tok, err)
	}
	for _, bad := range []string{"", "tok", ":admin", "tok:root", "tok:client:bad queue"} {
		if _, err := parseAuthToken(bad); err == nil {
			t.Errorf("parseAuthToken(%q) accepted", bad)
		}
	}
}

func FuzzParseAuthToken(f *testing.F) {
	f.Add("t:admin")
	f.Add("t:client:a,b")
	f.Add("::")
	f.Fuzz(func(t *testing.T, s string) {
		tok, err := parseAuthToken(s)
		if err != nil {
			return
		}
		if tok.Token == "" || (tok.Role != server.RoleClient && tok.Role != server.RoleWorker && tok.Role != server.RoleAdmin) {
			t.Fatalf("accepted %q as %+v", s, tok)
		}
	})
}

func TestApplyEnv(t *testing.T) {
	t.Parallel()
	fs := pflag.NewFlagSet("x", pflag.ContinueOnError)
	addr := fs.String("addr", "def", "")
	n := fs.Int("max-batch", 1, "")
	toks := fs.StringArray("auth-token", nil, "")
	if err := fs.Parse([]string{"--addr", "flag"}); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"NORN_ADDR": "env", "NORN_MAX_BATCH": "7", "NORN_AUTH_TOKENS": "a:admin, b:client"}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	names := map[string]string{"addr": "NORN_ADDR", "max-batch": "NORN_MAX_BATCH", "auth-token": "NORN_AUTH_TOKENS"}
	if err := applyEnv(fs, names, lookup); err != nil {
		t.Fatal(err)
	}
	if *addr != "flag" || *n != 7 || strings.Join(*toks, " ") != "a:admin b:client" {
		t.Fatalf("addr %q n %d tokens %q", *addr, *n, *toks)
	}
	env["NORN_MAX_BATCH"] = "lots"
	fs2 := pflag.NewFlagSet("y", pflag.ContinueOnError)
	fs2.Int("max-batch", 1, "")
	if err := applyEnv(fs2, names, lookup); err == nil || !strings.Contains(err.Error(), "NORN_MAX_BATCH") {
		t.Fatalf("bad env value: %v", err)
	}
}
