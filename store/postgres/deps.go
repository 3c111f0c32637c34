package postgres

import (
	"encoding/base64"
	"encoding/json"

	"github.com/jackc/pgx/v5"

	"github.com/nornq/norn"
)

// tasks.dep_results holds the outcomes of a task's ended dependencies as a
// JSON object by dependency id, so that recording one (jsonb ||) replaces
// any earlier record of it and "is it recorded?" is the ? operator. A
// result is kept as base64 of its bytes, so it comes back exactly as the
// dependency's worker sent it (a jsonb value would be reformatted).

// depRecord is one dependency's entry in dep_results.
type depRecord struct {
	Status string          `json:"status"`
	Result string          `json:"result,omitempty"`
	Error  *norn.ErrorInfo `json:"error,omitempty"`
}

// depResultSQL is the dep_results entry of the task t that just completed.
const depResultSQL = `jsonb_strip_nulls(jsonb_build_object('status', t.status, 'result', translate(encode(t.result, 'base64'), E'\n', '')))`

// scanOutcomes reads rows of (id, status, result, last error) into the
// records a dependent keeps of them.
func scanOutcomes(rows pgx.Rows) (map[string]norn.DependencyResult, error) {
	out := map[string]norn.DependencyResult{}
	var (
		id, st       string
		result, last []byte
	)
	_, err := pgx.ForEachRow(rows, []any{&id, &st, &result, &last}, func() error {
		var errs []norn.ErrorInfo
		if len(last) > 0 {
			var e norn.ErrorInfo
			if err := json.Unmarshal(last, &e); err != nil {
				return err
			}
			errs = []norn.ErrorInfo{e}
		}
		out[id] = norn.NewDependencyResult(id, norn.Status(st), append([]byte(nil), result...), errs)
		return nil
	})
	return out, err
}

// decodeDepResults reads a dep_results column in deps order.
func decodeDepResults(deps []string, raw []byte) ([]norn.DependencyResult, error) {
	var m map[string]depRecord
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, err
	}
	out := make([]norn.DependencyResult, 0, len(m))
	for _, id := range deps {
		rec, ok := m[id]
		if !ok {
			continue
		}
		r := norn.DependencyResult{ID: id, Status: rec.Status, Error: rec.Error}
		if rec.Result != "" {
			b, err := base64.StdEncoding.DecodeString(rec.Result)
			if err != nil {
				return nil, err
			}
			r.Result = b
		}
		out = append(out, r)
	}
	if len(out) == 0 {
		return nil, nil
	}
	return out, nil
}

// encodeDepResults is the dep_results column of rs (nil for none).
func encodeDepResults(rs []norn.DependencyResult) *string {
	if len(rs) == 0 {
		return nil
	}
	m := make(map[string]depRecord, len(rs))
	for _, r := range rs {
		rec := depRecord{Status: r.Status, Error: r.Error}
		if len(r.Result) > 0 {
			rec.Result = base64.StdEncoding.EncodeToString(r.Result)
		}
		m[r.ID] = rec
	}
	b, _ := json.Marshal(m)
	s := string(b)
	return &s
}
