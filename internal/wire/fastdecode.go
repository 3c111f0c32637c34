package wire

import (
	"bytes"
	"encoding/json"
	"reflect"
)

// The fast path of the strict decoder. DecodeStrict walks a value one
// member at a time so that every error names its field, which costs
// several passes over the bytes and an allocation per member. Almost every
// body is valid, so decodeFast first lets encoding/json decode the value in
// one pass, and accepts the result only when it
// is certain to equal what DecodeStrict would have produced:
//   - encoding/json reported no error (type errors, negative
//     durations, … all fall back, and DecodeStrict then names the field);
//   - every member name of every struct is an exact, unescaped match
//     (encoding/json also accepts case-insensitive matches, the API does not);
//   - no struct member is null (DecodeStrict clears a null json.RawMessage
//     where encoding/json keeps the bytes "null", and reads a null duration
//     as zero where norn.Duration refuses it).
// Otherwise the caller runs DecodeStrict, whose answer is authoritative.

// decodeFast decodes raw, which must be valid JSON (it came out of a
// successful encoding/json decode), into v and reports whether the result
// can be used. When it returns false, *v may be partly written and must be
// reset before DecodeStrict runs.
func decodeFast(raw []byte, v any) bool {
	t := reflect.TypeOf(v).Elem()
	if !exactKeys(raw, t) {
		return false
	}
	// exactKeys has already refused every member that is not a field, so
	// json.Unmarshal needs no DisallowUnknownFields (and no Decoder).
	return json.Unmarshal(raw, v) == nil
}

// exactKeys reports whether every object in raw that decodes into a struct
// (per t) names only fields of that struct, exactly and without escapes,
// and has no null members. raw must be valid JSON.
func exactKeys(raw []byte, t reflect.Type) bool {
	w := keyWalker{b: raw}
	w.ws()
	if !w.value(t) {
		return false
	}
	w.ws()
	return w.i == len(w.b)
}

type keyWalker struct {
	b []byte
	i int
}

func (w *keyWalker) ws() {
	for w.i < len(w.b) {
		switch w.b[w.i] {
		case ' ', '\t', '\n', '\r':
			w.i++
		default:
			return
		}
	}
}

// value checks the value at w.i against type t and moves past it.
func (w *keyWalker) value(t reflect.Type) bool {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if w.i >= len(w.b) {
		return false
	}
	switch {
	case t == rawMessageType || t == durationType || reflect.PointerTo(t).Implements(unmarshalerType):
		return w.skip()
	case t.Kind() == reflect.Struct:
		if w.b[w.i] != '{' {
			return false // encoding/json would refuse it; let DecodeStrict say why
		}
		return w.object(fieldsOf(t), t)
	case t.Kind() == reflect.Slice && needsWalk(t.Elem()):
		if w.b[w.i] != '[' {
			return w.skip() // null or a type error: encoding/json decides
		}
		w.i++
		w.ws()
		if w.i < len(w.b) && w.b[w.i] == ']' {
			w.i++
			return true
		}
		for {
			w.ws()
			if !w.value(t.Elem()) {
				return false
			}
			w.ws()
			if w.i >= len(w.b) {
				return false
			}
			if w.b[w.i] == ']' {
				w.i++
				return true
			}
			if w.b[w.i] != ',' {
				return false
			}
			w.i++
		}
	default:
		return w.skip()
	}
}

func (w *keyWalker) object(fields map[string]jsonField, t reflect.Type) bool {
	w.i++ // '{'
	w.ws()
	if w.i < len(w.b) && w.b[w.i] == '}' {
		w.i++
		return true
	}
	for {
		w.ws()
		if w.i >= len(w.b) || w.b[w.i] != '"' {
			return false
		}
		start := w.i + 1
		end := bytes.IndexByte(w.b[start:], '"')
		if end < 0 {
			return false
		}
		key := w.b[start : start+end]
		if bytes.IndexByte(key, '\\') >= 0 {
			return false
		}
		jf, ok := fields[string(key)]
		if !ok {
			return false
		}
		w.i = start + end + 1
		w.ws()
		if w.i >= len(w.b) || w.b[w.i] != ':' {
			return false
		}
		w.i++
		w.ws()
		if w.i >= len(w.b) || w.b[w.i] == 'n' { // null member
			return false
		}
		if !w.value(t.FieldByIndex(jf.index).Type) {
			return false
		}
		w.ws()
		if w.i >= len(w.b) {
			return false
		}
		if w.b[w.i] == '}' {
			w.i++
			return true
		}
		if w.b[w.i] != ',' {
			return false
		}
		w.i++
	}
}

// skip moves past one valid JSON value.
func (w *keyWalker) skip() bool {
	if w.i >= len(w.b) {
		return false
	}
	switch c := w.b[w.i]; c {
	case '"':
		return w.str()
	case '{', '[':
		depth := 0
		for w.i < len(w.b) {
			switch w.b[w.i] {
			case '"':
				if !w.str() {
					return false
				}
				continue
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					w.i++
					return true
				}
			}
			w.i++
		}
		return false
	default:
		for w.i < len(w.b) {
			switch w.b[w.i] {
			case ',', '}', ']', ' ', '\t', '\n', '\r':
				return true
			}
			w.i++
		}
		return true
	}
}

// str moves past a string starting at w.i.
func (w *keyWalker) str() bool {
	w.i++
	for w.i < len(w.b) {
		switch w.b[w.i] {
		case '\\':
			w.i += 2
			continue
		case '"':
			w.i++
			return true
		}
		w.i++
	}
	return false
}
