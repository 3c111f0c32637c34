package client

import (
	"context"
	"net/http"
	"net/url"

	"github.com/nornq/norn"
	"github.com/nornq/norn/internal/wire"
)

func batchPath(id, suffix string) (string, error) {
	if err := norn.ValidateBatchID("id", id); err != nil {
		return "", err
	}
	return "/v1/batches/" + url.PathEscape(id) + suffix, nil
}

// CreateBatch creates a batch, with its first members when nb.Tasks is
// not empty (POST /v1/batches).
func (c *Client) CreateBatch(ctx context.Context, nb norn.NewBatch) (*norn.BatchCreated, error) {
	if err := nb.Validate(); err != nil {
		return nil, err
	}
	var out norn.BatchCreated
	if err := c.do(ctx, request{method: http.MethodPost, path: "/v1/batches", body: nb}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// GetBatch returns a batch with its members' counts (GET /v1/batches/{id}).
func (c *Client) GetBatch(ctx context.Context, id string) (*norn.Batch, error) {
	p, err := batchPath(id, "")
	if err != nil {
		return nil, err
	}
	var out wire.OneBatch
	if err := c.do(ctx, request{method: http.MethodGet, path: p}, &out); err != nil {
		return nil, err
	}
	return out.Batch, nil
}

// ListBatches lists batches in id order (GET /v1/batches).
func (c *Client) ListBatches(ctx context.Context, q norn.BatchQuery) ([]*norn.Batch, error) {
	if err := q.Validate(); err != nil {
		return nil, err
	}
	var out wire.BatchesResponse
	if err := c.do(ctx, request{method: http.MethodGet, path: "/v1/batches", query: wire.BatchQueryValues(q)}, &out); err != nil {
		return nil, err
	}
	if out.Batches == nil {
		out.Batches = []*norn.Batch{}
	}
	return out.Batches, nil
}

// SealBatch closes a batch to new members (POST /v1/batches/{id}/seal).
func (c *Client) SealBatch(ctx context.Context, id string) (*norn.Batch, error) {
	p, err := batchPath(id, "/seal")
	if err != nil {
		return nil, err
	}
	var out wire.OneBatch
	if err := c.do(ctx, request{method: http.MethodPost, path: p}, &out); err != nil {
		return nil, err
	}
	return out.Batch, nil
}

// DeleteBatch deletes a batch, and with members its members
// (DELETE /v1/batches/{id}?members=true).
func (c *Client) DeleteBatch(ctx context.Context, id string, members bool) (int, error) {
	p, err := batchPath(id, "")
	if err != nil {
		return 0, err
	}
	var q url.Values
	if members {
		q = url.Values{"members": {"true"}}
	}
	var out wire.BatchDeleted
	if err := c.do(ctx, request{method: http.MethodDelete, path: p, query: q}, &out); err != nil {
		return 0, err
	}
	return out.Deleted, nil
}
