package client

import (
	"context"
	"net/http"

	"github.com/nornq/norn"
	"github.com/nornq/norn/internal/wire"
)

// Backup asks the server to write a consistent copy of its store into dir,
// a new directory on the server's machine (admins only; the embedded
// store). It implements norn.Backuper.
func (c *Client) Backup(ctx context.Context, dir string) (norn.BackupInfo, error) {
	var out wire.BackupResponse
	if err := c.do(ctx, request{method: http.MethodPost, path: "/v1/backup", body: wire.BackupRequest{Dir: dir}}, &out); err != nil {
		return norn.BackupInfo{}, err
	}
	return out.Backup, nil
}
