package wire

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nornq/norn"
)

// The request decoders of the server. encoding/json reports unknown fields
// and errors from custom unmarshalers (durations, times) without saying
// where they happened, and the API promises that every 400 names the field.
// So bodies are decoded one level at a time: an object is first split into
// its members, every member is matched against the Go field by its exact
// JSON name, and errors are prefixed with the member's path
// ("tasks[3].retry.base"). Only the current value is held in memory; batch
// arrays are streamed element by element (see DecodeBatch). That walk is
// the authority but costly, so a body that encoding/json decodes cleanly
// with exactly named members takes a one-pass fast path (fastdecode.go);
// the walk runs only to find and name what is wrong.

// DecodeStrict decodes the JSON value raw into v (a pointer), rejecting
// unknown fields and naming the offending field, prefixed with path, in
// every error.
func DecodeStrict(raw []byte, v any, path string) error {
	rv := reflect.ValueOf(v)
	if rv.Kind() != reflect.Pointer || rv.IsNil() {
		return fmt.Errorf("DecodeStrict: need a non-nil pointer, got %T", v)
	}
	raw = bytes.TrimSpace(raw)
	// The one-pass fast path needs a zero v: when it gives up, v is reset
	// to zero and decoded again the slow way.
	if rv.Elem().IsZero() {
		if decodeFast(raw, v) {
			return nil
		}
		rv.Elem().SetZero()
	}
	return decodeSlow(raw, rv, path)
}

// decodeSlow is DecodeStrict without the fast path: the member-by-member
// walk whose errors name the field. raw is already trimmed.
func decodeSlow(raw []byte, rv reflect.Value, path string) error {
	if !json.Valid(raw) {
		// Malformed JSON cannot be blamed on a field; say where it broke.
		var x any
		err := json.Unmarshal(raw, &x)
		var se *json.SyntaxError
		if errors.As(err, &se) {
			return norn.Invalid(rootField(path), "malformed JSON at byte %d: %v", se.Offset, se)
		}
		return norn.Invalid(rootField(path), "malformed JSON: unexpected end of input")
	}
	return decodeValue(raw, rv.Elem(), path)
}

var unmarshalerType = reflect.TypeFor[json.Unmarshaler]()
var rawMessageType = reflect.TypeFor[json.RawMessage]()
var durationType = reflect.TypeFor[norn.Duration]()

// decodeDuration reads a Go duration string. Unlike norn.Duration's own
// UnmarshalJSON it lets negative values through, so the shared validators
// (NewTask.Validate, ValidateRetry, …) refuse them with the same field
// names the stores use ("retry", not "retry.base"): a client sees the same
// error over HTTP as in process.
func decodeDuration(raw []byte, v reflect.Value, path string) error {
	if bytes.Equal(raw, []byte("null")) {
		return nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return norn.Invalid(rootField(path), "must be a duration string like \"10s\"")
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return norn.Invalid(rootField(path), "invalid duration %q", Trunc(s))
	}
	v.SetInt(int64(d))
	return nil
}

func fieldName(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}

func indexName(path string, i int) string {
	if path == "" {
		return "[" + strconv.Itoa(i) + "]"
	}
	return path + "[" + strconv.Itoa(i) + "]"
}

// rootField names the body itself in errors about the top-level value.
func rootField(path string) string {
	if path == "" {
		return "body"
	}
	return path
}

func decodeValue(raw []byte, v reflect.Value, path string) error {
	t := v.Type()
	isNull := bytes.Equal(raw, []byte("null"))
	switch {
	case t == rawMessageType:
		if isNull {
			v.SetBytes(nil)
			return nil
		}
		if !json.Valid(raw) {
			return norn.Invalid(rootField(path), "is not valid JSON")
		}
		v.SetBytes(append([]byte(nil), raw...))
		return nil
	case t == durationType:
		return decodeDuration(raw, v, path)
	case reflect.PointerTo(t).Implements(unmarshalerType):
		return plainUnmarshal(raw, v, path)
	case t.Kind() == reflect.Pointer:
		if isNull {
			v.SetZero()
			return nil
		}
		if v.IsNil() {
			v.Set(reflect.New(t.Elem()))
		}
		return decodeValue(raw, v.Elem(), path)
	case t.Kind() == reflect.Struct:
		if isNull {
			return nil
		}
		return decodeObject(raw, v, path)
	case t.Kind() == reflect.Slice && needsWalk(t.Elem()):
		if isNull {
			v.SetZero()
			return nil
		}
		var items []json.RawMessage
		if err := json.Unmarshal(raw, &items); err != nil {
			return jsonError(err, path, "an array")
		}
		s := reflect.MakeSlice(t, len(items), len(items))
		for i, it := range items {
			if err := decodeValue(bytes.TrimSpace(it), s.Index(i), indexName(path, i)); err != nil {
				return err
			}
		}
		v.Set(s)
		return nil
	default:
		return plainUnmarshal(raw, v, path)
	}
}

// needsWalk reports whether values of t must be decoded member by member
// (structs, possibly behind a pointer) rather than by encoding/json.
func needsWalk(t reflect.Type) bool {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return t.Kind() == reflect.Struct && !reflect.PointerTo(t).Implements(unmarshalerType)
}

func plainUnmarshal(raw []byte, v reflect.Value, path string) error {
	if err := json.Unmarshal(raw, v.Addr().Interface()); err != nil {
		return jsonError(err, path, describeType(v.Type()))
	}
	return nil
}

func describeType(t reflect.Type) string {
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "a boolean"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return "an integer"
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return fmt.Sprintf("an integer between 0 and %d", uint64(1)<<(t.Bits())-1)
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Map:
		if t.Elem().Kind() == reflect.String {
			return "an object of strings"
		}
		return "an object"
	case reflect.Slice:
		if t.Elem().Kind() == reflect.String {
			return "an array of strings"
		}
		return "an array"
	case reflect.Struct:
		if t.String() == "time.Time" {
			return "an RFC 3339 time"
		}
	}
	return "a " + t.String()
}

// jsonError turns an encoding/json error into an invalid_argument naming path.
func jsonError(err error, path, want string) error {
	field := rootField(path)
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case errors.As(err, &se):
		return norn.Invalid(field, "malformed JSON: %v", se)
	case errors.As(err, &te):
		f := field
		if te.Field != "" {
			f = fieldName(path, te.Field)
		}
		return norn.Invalid(f, "must be %s, got %s", want, te.Value)
	case errors.Is(err, io.ErrUnexpectedEOF):
		return norn.Invalid(field, "malformed JSON: unexpected end of input")
	}
	// Errors from custom unmarshalers (norn.Duration, time.Time) carry
	// their own explanation.
	return norn.Invalid(field, "%s", strings.TrimPrefix(err.Error(), "json: "))
}

// jsonField is one decodable member of a struct: its JSON name and the
// index path to the Go field (embedded structs flatten into their parent,
// as encoding/json does).
type jsonField struct {
	index []int
}

var fieldCache sync.Map // reflect.Type → map[string]jsonField

func fieldsOf(t reflect.Type) map[string]jsonField {
	if m, ok := fieldCache.Load(t); ok {
		return m.(map[string]jsonField)
	}
	m := map[string]jsonField{}
	collectFields(t, nil, m)
	fieldCache.Store(t, m)
	return m
}

func collectFields(t reflect.Type, prefix []int, m map[string]jsonField) {
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, _, _ := strings.Cut(tag, ",")
		idx := append(append([]int(nil), prefix...), i)
		if f.Anonymous && name == "" && f.Type.Kind() == reflect.Struct {
			collectFields(f.Type, idx, m)
			continue
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		if _, dup := m[name]; !dup {
			m[name] = jsonField{index: idx}
		}
	}
}

func decodeObject(raw []byte, v reflect.Value, path string) error {
	if len(raw) == 0 || raw[0] != '{' {
		if len(raw) > 0 && !json.Valid(raw) {
			return norn.Invalid(rootField(path), "malformed JSON")
		}
		return norn.Invalid(rootField(path), "must be a JSON object")
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if _, err := dec.Token(); err != nil { // '{'
		return jsonError(err, path, "an object")
	}
	fields := fieldsOf(v.Type())
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return jsonError(err, path, "an object")
		}
		key, ok := tok.(string)
		if !ok {
			return norn.Invalid(rootField(path), "malformed JSON object")
		}
		var member json.RawMessage
		if err := dec.Decode(&member); err != nil {
			return jsonError(err, fieldName(path, key), "a JSON value")
		}
		jf, ok := fields[key]
		if !ok {
			return norn.Invalid(fieldName(path, key), "unknown field")
		}
		if err := decodeValue(bytes.TrimSpace(member), v.FieldByIndex(jf.index), fieldName(path, key)); err != nil {
			return err
		}
	}
	if _, err := dec.Token(); err != nil { // '}'
		return jsonError(err, path, "an object")
	}
	if dec.More() {
		return norn.Invalid(rootField(path), "unexpected data after the JSON object")
	}
	if _, err := dec.Token(); err != io.EOF {
		return norn.Invalid(rootField(path), "unexpected data after the JSON object")
	}
	return nil
}

// ReadBody reads a whole request body (already limited by
// http.MaxBytesReader) and decodes it strictly into v. An empty body is
// allowed only when emptyOK (e.g. cancel), leaving v zero.
func ReadBody(body io.Reader, v any, emptyOK bool) error {
	raw, err := io.ReadAll(body)
	if err != nil {
		return err
	}
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		if emptyOK {
			return nil
		}
		return norn.Invalid("body", "a JSON object is required")
	}
	return DecodeStrict(raw, v, "")
}

// DecodeBatch streams a body of the form {"<key>":[item,…]} and calls fn
// for every item (decoded strictly into a fresh T) as soon as it is read,
// so a batch that is too long, or an item that is too large or invalid, is
// refused before the rest of the body is read. maxItems bounds the count.
func DecodeBatch[T any](body io.Reader, key string, maxItems int, fn func(i int, item *T) error) error {
	dec := json.NewDecoder(body)
	tok, err := dec.Token()
	if err == io.EOF {
		return norn.Invalid("body", "a JSON object is required")
	}
	if err != nil {
		return streamErr(err, "body")
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return norn.Invalid("body", "must be a JSON object")
	}
	seen := false
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return streamErr(err, "body")
		}
		name, _ := tok.(string)
		if name != key {
			return norn.Invalid(name, "unknown field")
		}
		if seen {
			return norn.Invalid(key, "appears twice")
		}
		seen = true
		tok, err = dec.Token()
		if err != nil {
			return streamErr(err, key)
		}
		if tok == nil { // null: an empty batch
			continue
		}
		if d, ok := tok.(json.Delim); !ok || d != '[' {
			return norn.Invalid(key, "must be an array")
		}
		for i := 0; dec.More(); i++ {
			if i >= maxItems {
				return norn.TooLarge(key, "has more than the limit of %d items", maxItems)
			}
			var raw json.RawMessage
			if err := dec.Decode(&raw); err != nil {
				return streamErr(err, indexName(key, i))
			}
			item := new(T)
			if err := DecodeStrict(raw, item, indexName(key, i)); err != nil {
				return err
			}
			if err := fn(i, item); err != nil {
				return err
			}
		}
		if _, err := dec.Token(); err != nil { // ']'
			return streamErr(err, key)
		}
	}
	if _, err := dec.Token(); err != nil { // '}'
		return streamErr(err, "body")
	}
	if _, err := dec.Token(); err != io.EOF {
		return norn.Invalid("body", "unexpected data after the JSON object")
	}
	if !seen {
		return norn.Invalid(key, "is required")
	}
	return nil
}

// streamErr keeps body-size errors intact (they become 413) and names the
// field for JSON errors.
func streamErr(err error, field string) error {
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return err
	}
	return jsonError(err, field, "a JSON value")
}
