package wire

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	jsonv2 "github.com/go-json-experiment/json"

	"github.com/nornq/norn"
)

// BenchmarkDecode measures the strict decoder (DecodeStrict, DecodeBatch
// for batches) on the bodies of the hot routes, valid and invalid, beside a
// bare github.com/go-json-experiment/json decode with unknown members
// refused: the difference is the cost of streaming batches item by item
// and of the API's own rules. docs/benchmarks.md has the figures, with
// those of the encoding/json-based decoder this one replaced.
func BenchmarkDecode(b *testing.B) {
	spec := `{"to":"ada@example.com","subject":"` + strings.Repeat("x", 160) + `"}`
	newTask := `{"queue":"emails","spec":` + spec + `,"priority":3,"labels":{"tenant":"acme"},"timeout":"30s","retry":{"max_retries":3,"base":"1s"}}`
	var batch strings.Builder
	batch.WriteString(`{"tasks":[`)
	for i := range 1000 {
		if i > 0 {
			batch.WriteByte(',')
		}
		batch.WriteString(`{"queue":"emails","spec":` + spec + `}`)
	}
	batch.WriteString(`]}`)
	var ops strings.Builder
	ops.WriteString(`{"ops":[`)
	for i := range 100 {
		if i > 0 {
			ops.WriteByte(',')
		}
		fmt.Fprintf(&ops, `{"op":"complete","id":"0193b2f4-7c1e-7000-8000-%012d","worker":"worker-1","lease":%d,"result":{"ok":true}}`, i, i+1)
	}
	ops.WriteString(`]}`)
	bad := strings.Replace(newTask, `"priority"`, `"prority"`, 1)

	type body struct {
		name  string
		raw   string
		new   func() any
		batch string // DecodeBatch key, "" for a single value
		ok    bool
	}
	bodies := []body{
		{"submit", newTask, func() any { return new(norn.NewTask) }, "", true},
		{"submit-unknown-field", bad, func() any { return new(norn.NewTask) }, "", false},
		{"complete", `{"worker":"worker-1","lease":7,"result":{"sent":true,"n":[1,2,3]}}`, func() any { return new(CompleteRequest) }, "", true},
		{"batch-1000", batch.String(), func() any { return new(BatchRequest) }, "tasks", true},
		{"lease-batch-100", ops.String(), func() any { return new(LeaseBatchRequest) }, "ops", true},
	}
	for _, bd := range bodies {
		raw := []byte(bd.raw)
		b.Run(bd.name+"/strict", func(b *testing.B) {
			b.SetBytes(int64(len(raw)))
			b.ReportAllocs()
			for range b.N {
				var err error
				switch bd.batch {
				case "tasks":
					err = DecodeBatch(bytes.NewReader(raw), "tasks", norn.MaxBatch, func(int, *norn.NewTask) error { return nil })
				case "ops":
					err = DecodeBatch(bytes.NewReader(raw), "ops", norn.MaxBatch, func(int, *norn.LeaseOp) error { return nil })
				default:
					err = DecodeStrict(raw, bd.new(), "")
				}
				if (err == nil) != bd.ok {
					b.Fatal(err)
				}
			}
		})
		b.Run(bd.name+"/jsonv2", func(b *testing.B) {
			b.SetBytes(int64(len(raw)))
			b.ReportAllocs()
			for range b.N {
				err := jsonv2.Unmarshal(raw, bd.new(), jsonv2.RejectUnknownMembers(true))
				if (err == nil) != bd.ok {
					b.Fatal(err)
				}
			}
		})
	}
}
