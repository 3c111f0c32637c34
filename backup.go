package norn

import (
	"context"
	"time"
)

// BackupInfo describes a backup a store wrote.
type BackupInfo struct {
	// Dir is the backup's directory, absolute: a data directory the
	// embedded store opens as it is.
	Dir string `json:"dir"`
	// Bytes is the size of its files.
	Bytes int64 `json:"bytes"`
	// Started is when the backup began: it holds every write acknowledged
	// before then.
	Started time.Time `json:"started"`
	// Took is how long it took.
	Took Duration `json:"took"`
}

// Backuper is implemented by stores that copy themselves while they serve
// (the embedded store; PostgreSQL is backed up with its own tools).
type Backuper interface {
	// Backup writes a consistent copy of the store into dir, a directory
	// that must not exist yet (its parent must).
	Backup(ctx context.Context, dir string) (BackupInfo, error)
}
