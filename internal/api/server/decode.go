package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"reflect"

	"github.com/gpreempt/gpreempt/class"
	"github.com/gpreempt/gpreempt/internal/api"
)

// DecodeJSON decodes one strict JSON object from b into v: no key twice,
// field names as written (case-sensitive), no unknown field, nothing
// after it.
func DecodeJSON(b []byte, v any) (int, error) {
	// One object: null (which decodes into nothing), a list or a scalar
	// is not one.
	if t := bytes.TrimLeft(b, " \t\r\n"); len(t) == 0 || t[0] != '{' {
		return http.StatusBadRequest, errNotObject
	}
	if err := checkStrict(json.NewDecoder(bytes.NewReader(b)), reflect.TypeOf(v)); err != nil {
		return http.StatusBadRequest, fmt.Errorf("bad JSON: %w", err)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return http.StatusBadRequest, fmt.Errorf("bad JSON: %w", err)
	}
	if dec.More() {
		return http.StatusBadRequest, errors.New("bad JSON: data after the object")
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return http.StatusBadRequest, errors.New("bad JSON: data after the object")
	}
	return 0, nil
}

// ParseClassRequest checks a decoded request: a class spec, a pid that
// is not negative.
func ParseClassRequest(b []byte) (api.ClassRequest, class.Spec, int, error) {
	var req api.ClassRequest
	if code, err := DecodeJSON(b, &req); err != nil {
		return req, class.Spec{}, code, err
	}
	if req.PID < 0 {
		return req, class.Spec{}, http.StatusBadRequest, fmt.Errorf("pid %d", req.PID)
	}
	sp, err := class.ParseSpec(req.Class)
	if err != nil {
		return req, class.Spec{}, http.StatusBadRequest, err
	}
	return req, sp, 0, nil
}
