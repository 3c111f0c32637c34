package norn

// ClaimPath names the way a store's claims of a queue go, for operators:
// the PostgreSQL store routes each queue's claims to one of several paths
// by its flow settings (docs/postgres.md, "What flow limits cost";
// docs/internals/postgres-claims.md says how each path works).
type ClaimPath struct {
	Path   string `json:"path"`
	Reason string `json:"reason"`
}

// PathCount is how many claims one claim path served.
type PathCount struct {
	Path   string
	Claims int64
}

// ClaimPathReporter is implemented by stores whose claims take one of
// several paths; the server exports the counts as
// norn_store_claims_total{path} (docs/metrics.md).
type ClaimPathReporter interface {
	// ClaimPaths lists every path with the claims it served on this node
	// since the store was opened.
	ClaimPaths() []PathCount
}
