package telemetry

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
)

// A step's loss may be NaN or infinite: a run that diverged says so, and a
// reader must see it. JSON has no such numbers, so a record carries them as
// the strings "NaN", "Infinity" and "-Infinity" (the spellings of
// JavaScript's Number and of Python's json module) and a finite loss as a
// number. Every other field stays a plain JSON number, finite.

// Spellings of the non-finite losses on the wire.
const (
	lossNaN    = "NaN"
	lossInf    = "Infinity"
	lossNegInf = "-Infinity"
)

// stepFields is StepRecord without its methods: what encoding/json reads
// and writes field by field.
type stepFields StepRecord

// stringLoss marks a line whose loss is written as a string.
var stringLoss = []byte(`"loss":"`)

// unmarshalStep decodes a record line into r, the loss's strings
// included: a flat record in one pass of its own (flat.go), anything else
// with encoding/json.
func unmarshalStep(line []byte, r *StepRecord) error {
	var d flatDecoder
	return d.unmarshal(line, r)
}

// unmarshal is unmarshalStep with d's state.
func (d *flatDecoder) unmarshal(line []byte, r *StepRecord) error {
	orig := *r
	if d.decode(line, r) {
		return nil
	}
	*r = orig
	return unmarshalJSON(line, r)
}

// unmarshalJSON is unmarshalStep with encoding/json alone; a line without a
// string loss (every finite one) is decoded in one pass.
func unmarshalJSON(line []byte, r *StepRecord) error {
	if !bytes.Contains(line, stringLoss) {
		return json.Unmarshal(line, (*stepFields)(r))
	}
	w := struct {
		*stepFields
		Loss *Loss `json:"loss"`
	}{stepFields: (*stepFields)(r)}
	if err := json.Unmarshal(line, &w); err != nil {
		return err
	}
	r.Loss = (*float64)(w.Loss)
	return nil
}

// UnmarshalJSON decodes a record, its loss written as a number or as one
// of the strings of a non-finite loss.
func (r *StepRecord) UnmarshalJSON(b []byte) error { return unmarshalStep(b, r) }

// MarshalJSON encodes a record as DecodeStep reads it: a non-finite loss as
// its string.
func (r StepRecord) MarshalJSON() ([]byte, error) {
	if r.Loss == nil || !math.IsNaN(*r.Loss) && !math.IsInf(*r.Loss, 0) {
		return json.Marshal((*stepFields)(&r))
	}
	w := struct {
		*stepFields
		Loss Loss `json:"loss"`
	}{stepFields: (*stepFields)(&r), Loss: Loss(*r.Loss)}
	return json.Marshal(w)
}

// Loss is a loss as the wire carries it: a JSON number when finite, else
// one of the strings "NaN", "Infinity" and "-Infinity". A reader that
// encodes a loss it computed (a summary's first and last) uses it too.
type Loss float64

// MarshalJSON writes a finite loss as a number, else as its string.
func (l Loss) MarshalJSON() ([]byte, error) {
	switch v := float64(l); {
	case math.IsNaN(v):
		return []byte(`"` + lossNaN + `"`), nil
	case math.IsInf(v, 1):
		return []byte(`"` + lossInf + `"`), nil
	case math.IsInf(v, -1):
		return []byte(`"` + lossNegInf + `"`), nil
	default:
		return json.Marshal(v)
	}
}

// UnmarshalJSON reads a number, or the string of a non-finite loss.
func (l *Loss) UnmarshalJSON(b []byte) error {
	if len(b) == 0 || b[0] != '"' {
		var v float64
		err := json.Unmarshal(b, &v)
		*l = Loss(v)
		return err
	}
	switch string(b) {
	case `"` + lossNaN + `"`:
		*l = Loss(math.NaN())
	case `"` + lossInf + `"`:
		*l = Loss(math.Inf(1))
	case `"` + lossNegInf + `"`:
		*l = Loss(math.Inf(-1))
	default:
		return fmt.Errorf("loss %s: a number, or one of %q, %q, %q", b, lossNaN, lossInf, lossNegInf)
	}
	return nil
}
