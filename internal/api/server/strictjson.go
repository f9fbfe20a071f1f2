package server

import (
	"encoding"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
)

// maxJSONDepth bounds the nesting of a request body: the API's deepest is
// three objects (a stats push's window and its quantiles).
const maxJSONDepth = 16

// checkStrict walks the one JSON value dec holds against the Go type it
// is to be decoded into, refusing what encoding/json lets through: a key
// twice in one object (json keeps the last, so a proxy or log that reads
// the first sees another request than the daemon), and a struct field
// named in another case ("CLASS" for "class", which json matches without
// regard to case). Unknown fields are refused by the decoder that follows
// (DisallowUnknownFields); the walk refuses them too, since a field it
// does not know has no type to check below it.
func checkStrict(dec *json.Decoder, t reflect.Type) error {
	return strictValue(dec, t, "", 0)
}

func strictValue(dec *json.Decoder, t reflect.Type, at string, depth int) error {
	if depth > maxJSONDepth {
		return fmt.Errorf("%s: nested more than %d deep", where(at), maxJSONDepth)
	}
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	d, ok := tok.(json.Delim)
	if !ok {
		return nil // a scalar: its type is the decoder's to check
	}
	switch d {
	case '{':
		var fields map[string]reflect.Type
		var elem reflect.Type
		if t != nil && decodesItself(t) {
			t = nil // its own decoder's fields: keys are only checked to be once each
		}
		if t != nil {
			switch t.Kind() {
			case reflect.Struct:
				fields = jsonFields(t)
			case reflect.Map:
				elem = t.Elem()
			}
		}
		seen := map[string]bool{}
		for dec.More() {
			kt, err := dec.Token()
			if err != nil {
				return err
			}
			key, _ := kt.(string)
			if seen[key] {
				return fmt.Errorf("%s: key %q twice", where(at), key)
			}
			seen[key] = true
			ft := elem
			if fields != nil {
				if ft, ok = fields[key]; !ok {
					return fmt.Errorf("%s: unknown field %q (field names are case-sensitive)", where(at), key)
				}
			}
			if err := strictValue(dec, ft, at+"."+key, depth+1); err != nil {
				return err
			}
		}
	case '[':
		var elem reflect.Type
		if t != nil && (t.Kind() == reflect.Slice || t.Kind() == reflect.Array) {
			elem = t.Elem()
		}
		for dec.More() {
			if err := strictValue(dec, elem, at+"[]", depth+1); err != nil {
				return err
			}
		}
	}
	_, err = dec.Token() // the closing delimiter
	return err
}

var (
	unmarshalerType     = reflect.TypeFor[json.Unmarshaler]()
	textUnmarshalerType = reflect.TypeFor[encoding.TextUnmarshaler]()
)

// decodesItself: t decodes its JSON with a method of its own, so its Go
// fields say nothing of the keys it takes.
func decodesItself(t reflect.Type) bool {
	p := reflect.PointerTo(t)
	return p.Implements(unmarshalerType) || p.Implements(textUnmarshalerType)
}

func where(at string) string {
	if at == "" {
		return "the object"
	}
	return strings.TrimPrefix(at, ".")
}

var fieldCache sync.Map // reflect.Type: map[string]reflect.Type

// jsonFields maps the JSON names of a struct's fields, those of embedded
// structs included (as encoding/json flattens them), to their types.
func jsonFields(t reflect.Type) map[string]reflect.Type {
	if m, ok := fieldCache.Load(t); ok {
		return m.(map[string]reflect.Type)
	}
	m := map[string]reflect.Type{}
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" {
			continue
		}
		ft := f.Type
		if f.Anonymous && name == "" {
			for ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct {
				for k, v := range jsonFields(ft) {
					if _, ok := m[k]; !ok { // the outer field wins, as in encoding/json
						m[k] = v
					}
				}
				continue
			}
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		m[name] = ft
	}
	fieldCache.Store(t, m)
	return m
}

// errNotObject: a body that is not one JSON object.
var errNotObject = errors.New("bad JSON: want one object")
