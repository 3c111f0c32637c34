package wire

import "github.com/nornq/norn"

// BackupRequest is the body of POST /v1/backup: the new directory, on the
// server's machine, that the backup goes into.
type BackupRequest struct {
	Dir string `json:"dir"`
}

// BackupResponse is its answer.
type BackupResponse struct {
	Backup norn.BackupInfo `json:"backup"`
}
