package norn

// Why a store is unavailable, as a class any caller may see: it names the
// kind of failure, never an address, a query or a server's words. The
// server puts it in a 503's body (error.cause) with a Retry-After.
const (
	// CauseUnreachable: the database does not answer in time (a silent
	// network, a frozen or overloaded server).
	CauseUnreachable = "database_unreachable"
	// CauseRefused: connections are refused or reset (the server is down
	// or restarting).
	CauseRefused = "database_refused"
	// CauseReadOnly: the database accepts reads only (a standby, as during
	// a failover before the promotion is seen).
	CauseReadOnly = "database_read_only"
	// CauseOverloaded: the database is out of connections or resources.
	CauseOverloaded = "database_overloaded"
	// CauseShuttingDown: the database is shutting down or not yet
	// accepting connections.
	CauseShuttingDown = "database_starting_or_stopping"
)

var causeText = map[string]string{
	CauseUnreachable:  "the database does not answer",
	CauseRefused:      "the database refuses connections",
	CauseReadOnly:     "the database is read-only (a standby; a failover may be under way)",
	CauseOverloaded:   "the database is out of connections or resources",
	CauseShuttingDown: "the database is starting or shutting down",
}

// UnavailableBecause is Unavailable with a cause class (one of the Cause
// constants) that its message states, so a client learns what kind of
// failure it is without seeing internals; err stays for the server's log.
func UnavailableBecause(cause string, err error) *Error {
	msg := "store unavailable"
	if t, ok := causeText[cause]; ok {
		msg += ": " + t
	}
	return &Error{Code: CodeUnavailable, Message: msg, Cause: cause, Err: err}
}
