package server

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strings"

	"github.com/nornq/norn"
)

// Role is what a token may do.
type Role string

// The roles. Admin may do everything; see docs/security.md for the table.
const (
	// RoleClient submits, reads, updates, cancels and deletes tasks, reads
	// logs, queues, stats and events.
	RoleClient Role = "client"
	// RoleWorker registers workers, claims, makes lease calls and reads tasks
	// and their logs.
	RoleWorker Role = "worker"
	// RoleAdmin may do everything, including queue changes and sweeps.
	RoleAdmin Role = "admin"
)

// Token is one accepted bearer token.
type Token struct {
	// Token is the secret sent as "Authorization: Bearer <Token>".
	Token string
	// Role is client, worker or admin.
	Role Role
	// Queues, when non-empty, restricts the token to these queues:
	// queue-scoped calls on any other queue are refused with 403, and
	// listings without a queue filter only show these queues.
	Queues []string
}

func (t Token) validate() error {
	if t.Token == "" {
		return norn.Invalid("Token", "token is empty")
	}
	if strings.ContainsAny(t.Token, " \t\r\n") {
		return norn.Invalid("Token", "token contains whitespace")
	}
	switch t.Role {
	case RoleClient, RoleWorker, RoleAdmin:
	default:
		return norn.Invalid("Role", "unknown role %q (want client, worker or admin)", t.Role)
	}
	for i, q := range t.Queues {
		if err := norn.ValidateQueue(fmt.Sprintf("Queues[%d]", i), q); err != nil {
			return err
		}
	}
	return nil
}

// LoadTokens reads a token file: one token per line as
//
//	<token> <role> [queue,queue,…]
//
// separated by spaces or tabs; blank lines and lines starting with '#' are
// ignored. Errors name the line.
func LoadTokens(path string) ([]Token, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("tokens: %w", err)
	}
	defer f.Close()
	var out []Token
	sc := bufio.NewScanner(f)
	line := 0
	seen := map[string]int{}
	for sc.Scan() {
		line++
		text := strings.TrimSpace(sc.Text())
		if text == "" || strings.HasPrefix(text, "#") {
			continue
		}
		parts := strings.Fields(text)
		if len(parts) < 2 || len(parts) > 3 {
			return nil, fmt.Errorf("%s:%d: want \"<token> <role> [queue,…]\", got %d fields", path, line, len(parts))
		}
		t := Token{Token: parts[0], Role: Role(parts[1])}
		if len(parts) == 3 {
			t.Queues = strings.Split(parts[2], ",")
		}
		if err := t.validate(); err != nil {
			return nil, fmt.Errorf("%s:%d: %w", path, line, err)
		}
		if prev, ok := seen[t.Token]; ok {
			return nil, fmt.Errorf("%s:%d: token repeats line %d", path, line, prev)
		}
		seen[t.Token] = line
		out = append(out, t)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return out, nil
}

// principal is the authenticated caller of a request.
type principal struct {
	role   Role
	queues []string // nil: every queue
	// key names the token for per-caller limits (a prefix of its hash,
	// never the token); empty when authentication is off.
	key string
}

// unrestricted is the principal of every request when authentication is off.
var unrestricted = &principal{role: RoleAdmin}

// authenticator checks bearer tokens. Tokens are looked up by their
// SHA-256 so the comparison time does not depend on how much of a guessed
// token matches a real one.
type authenticator struct {
	byHash map[[32]byte]*principal
}

func newAuthenticator(tokens []Token) *authenticator {
	if len(tokens) == 0 {
		return nil
	}
	a := &authenticator{byHash: make(map[[32]byte]*principal, len(tokens))}
	for _, t := range tokens {
		h := sha256.Sum256([]byte(t.Token))
		p := &principal{role: t.Role, key: "token:" + hex.EncodeToString(h[:8])}
		if len(t.Queues) > 0 {
			p.queues = slices.Clone(t.Queues)
		}
		a.byHash[h] = p
	}
	return a
}

func (a *authenticator) authenticate(r *http.Request) (*principal, error) {
	if a == nil {
		return unrestricted, nil
	}
	h := r.Header.Get("Authorization")
	scheme, tok, ok := strings.Cut(h, " ")
	if h == "" || !ok || !strings.EqualFold(scheme, "Bearer") || strings.TrimSpace(tok) == "" {
		return nil, &norn.Error{Code: norn.CodeUnauthenticated, Message: "a bearer token is required (Authorization: Bearer <token>)"}
	}
	p, ok := a.byHash[sha256.Sum256([]byte(strings.TrimSpace(tok)))]
	if !ok {
		return nil, &norn.Error{Code: norn.CodeUnauthenticated, Message: "unknown token"}
	}
	return p, nil
}

// roleAllowed reports whether p's role is among allowed (admin always is).
func (p *principal) roleAllowed(allowed []Role) bool {
	return p.role == RoleAdmin || slices.Contains(allowed, p.role)
}

// scoped reports whether p is restricted to some queues.
func (p *principal) scoped() bool { return len(p.queues) > 0 }

// checkQueue refuses a queue outside p's scope.
func (p *principal) checkQueue(q string) error {
	if !p.scoped() || slices.Contains(p.queues, q) {
		return nil
	}
	return norn.Errorf(norn.CodePermissionDenied, "this token may not use queue %q", q)
}

// scopeQueues checks explicitly requested queues and, when none were
// requested, restricts to p's queues (nil for an unrestricted principal).
func (p *principal) scopeQueues(requested []string) ([]string, error) {
	for _, q := range requested {
		if err := p.checkQueue(q); err != nil {
			return nil, err
		}
	}
	if len(requested) == 0 && p.scoped() {
		return slices.Clone(p.queues), nil
	}
	return requested, nil
}

type principalKey struct{}

func principalFrom(ctx context.Context) *principal {
	if p, ok := ctx.Value(principalKey{}).(*principal); ok {
		return p
	}
	return unrestricted
}
