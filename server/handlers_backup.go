package server

import (
	"net/http"

	"github.com/nornq/norn"
	"github.com/nornq/norn/internal/wire"
)

// handleBackup writes a consistent copy of the store into a new directory
// on the server's machine while the server serves (admins only: it writes
// where the server process may).
func (s *Server) handleBackup(w http.ResponseWriter, r *http.Request) error {
	var req wire.BackupRequest
	if err := readRequest(r, &req, false); err != nil {
		return err
	}
	b, ok := s.store.(norn.Backuper)
	if !ok {
		return norn.Invalid("dir", "this store does not take backups itself: back PostgreSQL up with its own tools (pg_dump, base backups)")
	}
	info, err := b.Backup(r.Context(), req.Dir)
	return reply(w, wire.BackupResponse{Backup: info}, err)
}
