package postgres

import (
	"context"

	"github.com/nornq/norn"
)

// Placeholder while the PostgreSQL batch tables are written.

func (s *Store) CreateBatch(ctx context.Context, nb norn.NewBatch) (*norn.BatchCreated, error) {
	return nil, norn.Errorf(norn.CodeUnavailable, "batches: not yet on postgres")
}
func (s *Store) GetBatch(ctx context.Context, id string) (*norn.Batch, error) {
	return nil, norn.Errorf(norn.CodeUnavailable, "batches: not yet on postgres")
}
func (s *Store) ListBatches(ctx context.Context, q norn.BatchQuery) ([]*norn.Batch, error) {
	return nil, norn.Errorf(norn.CodeUnavailable, "batches: not yet on postgres")
}
func (s *Store) SealBatch(ctx context.Context, id string) (*norn.Batch, error) {
	return nil, norn.Errorf(norn.CodeUnavailable, "batches: not yet on postgres")
}
func (s *Store) DeleteBatch(ctx context.Context, id string, members bool) (int, error) {
	return 0, norn.Errorf(norn.CodeUnavailable, "batches: not yet on postgres")
}
