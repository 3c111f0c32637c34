package embedded

import (
	"context"
	"encoding/json"

	"github.com/nornq/norn"
)

// workerRecord is a worker's stored registration: the API's view and the
// registrar, which the API never shows (norn.WorkerInfo leaves it out of
// its JSON).
type workerRecord struct {
	norn.WorkerInfo
	Registrar string `json:"registrar,omitempty"`
}

func workerJSON(info norn.WorkerInfo) []byte {
	j, _ := json.Marshal(workerRecord{WorkerInfo: info, Registrar: info.Registrar})
	return j
}

func parseWorker(v []byte) (norn.WorkerInfo, error) {
	var rec workerRecord
	if err := json.Unmarshal(v, &rec); err != nil {
		return norn.WorkerInfo{}, err
	}
	rec.WorkerInfo.Registrar = rec.Registrar
	return rec.WorkerInfo, nil
}

// newWorkerID draws a worker id no registered worker has; called under s.mu.
func (s *Store) newWorkerID() string {
	for {
		if id := norn.NewWorkerID(); s.workers[id] == nil {
			return id
		}
	}
}

// Worker returns one worker's registration, registrar included; see
// norn.WorkerRegistry.
func (s *Store) Worker(ctx context.Context, id string) (norn.WorkerInfo, error) {
	if err := s.enter(); err != nil {
		return norn.WorkerInfo{}, err
	}
	defer s.exit()
	s.mu.Lock()
	defer s.mu.Unlock()
	w := s.workers[id]
	if w == nil {
		return norn.WorkerInfo{}, norn.WorkerNotFound(id)
	}
	info := w.info
	info.Queues = append([]string(nil), w.info.Queues...)
	return info, nil
}

var _ norn.WorkerRegistry = (*Store)(nil)
