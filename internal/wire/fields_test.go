package wire

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/nornq/norn"
)

// fill sets every exported field of the value v points to (recursively)
// to a non-zero value, so that json.Marshal writes every member. A field
// added to a domain type later is filled too, which is what makes the tests
// below fail when a hand-written encoder forgets it.
func fill(t *testing.T, v reflect.Value) {
	t.Helper()
	switch v.Type() {
	case reflect.TypeFor[json.RawMessage]():
		v.SetBytes([]byte(`{"k":[1,"v"]}`))
		return
	case reflect.TypeFor[time.Time]():
		v.Set(reflect.ValueOf(time.Date(2030, 1, 2, 3, 4, 5, 6, time.UTC)))
		return
	case reflect.TypeFor[norn.LeaseOpKind]():
		v.SetString(string(norn.OpFail))
		return
	}
	switch v.Kind() {
	case reflect.String:
		v.SetString("s<é>")
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		v.SetInt(3)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		v.SetUint(7)
	case reflect.Float32, reflect.Float64:
		v.SetFloat(0.25)
	case reflect.Pointer:
		p := reflect.New(v.Type().Elem())
		fill(t, p.Elem())
		v.Set(p)
	case reflect.Slice:
		s := reflect.MakeSlice(v.Type(), 1, 1)
		fill(t, s.Index(0))
		v.Set(s)
	case reflect.Map:
		m := reflect.MakeMap(v.Type())
		k := reflect.New(v.Type().Key()).Elem()
		fill(t, k)
		e := reflect.New(v.Type().Elem()).Elem()
		if e.Kind() == reflect.Interface {
			e.Set(reflect.ValueOf("v"))
		} else {
			fill(t, e)
		}
		m.SetMapIndex(k, e)
		v.Set(m)
	case reflect.Struct:
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				fill(t, v.Field(i))
			}
		}
	case reflect.Interface:
		v.Set(reflect.ValueOf("v"))
	default:
		t.Fatalf("fill: no filler for %s", v.Type())
	}
}

// jsonNames lists the JSON member names of struct type t, embedded structs
// flattened (fieldsOf is the decoder's own view of the same type).
func jsonNames(t reflect.Type) []string {
	var names []string
	for name := range fieldsOf(t) {
		names = append(names, name)
	}
	return names
}

// TestEncodersCoverEveryField: every field of norn.Task, norn.NewTask and
// norn.LeaseOp, set to a non-zero value, is written by the hand-written
// encoder exactly as json.Marshal writes it. Forgetting a field (today's or
// one added later) fails here.
func TestEncodersCoverEveryField(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		typ    reflect.Type
		encode func(v any) ([]byte, error)
	}{
		{"Task/AppendTask", reflect.TypeFor[norn.Task](), func(v any) ([]byte, error) { return AppendTask(nil, v.(*norn.Task)) }},
		{"NewTask/AppendNewTask", reflect.TypeFor[norn.NewTask](), func(v any) ([]byte, error) { return AppendNewTask(nil, v.(*norn.NewTask)) }},
		{"LeaseOp/AppendLeaseOps", reflect.TypeFor[norn.LeaseOp](), func(v any) ([]byte, error) {
			b, err := AppendLeaseOps(nil, []norn.LeaseOp{*v.(*norn.LeaseOp)})
			if err != nil {
				return nil, err
			}
			// Unwrap {"ops":[…]} to the one op.
			return b[len(`{"ops":[`) : len(b)-len(`]}`)], nil
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			v := reflect.New(c.typ)
			fill(t, v.Elem())
			want, err := json.Marshal(v.Interface())
			if err != nil {
				t.Fatal(err)
			}
			for _, name := range jsonNames(c.typ) {
				if !strings.Contains(string(want), `"`+name+`":`) {
					t.Fatalf("the filled value does not set %q: %s", name, want)
				}
			}
			got, err := c.encode(v.Interface())
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != string(want) {
				t.Errorf("hand-written encoder and json.Marshal differ:\n got %s\nwant %s", got, want)
			}
		})
	}
}
