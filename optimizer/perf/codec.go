package perf

import (
	"encoding/json"
	"fmt"
)

// stored is the JSON envelope of a model: its form and parameters.
type stored struct {
	Form   Form            `json:"form"`
	Params json.RawMessage `json:"params"`
	Ref    *stored         `json:"ref,omitempty"`
}

// Marshal encodes a model (for the none policy's store, keyed by job
// signature) as {"form": ..., "params": {...}}.
func Marshal(m Model) ([]byte, error) {
	s, err := envelope(m)
	if err != nil {
		return nil, err
	}
	return json.Marshal(s)
}

func envelope(m Model) (*stored, error) {
	switch v := m.(type) {
	case *Fitted:
		return envelope(v.Model)
	case Transferred:
		ref, err := envelope(v.Ref)
		if err != nil {
			return nil, err
		}
		p, _ := json.Marshal(struct {
			Factor float64 `json:"factor"`
		}{v.Factor})
		return &stored{Form: "transferred", Params: p, Ref: ref}, nil
	case Pollux, Scavenger, Measured:
		p, err := json.Marshal(v)
		if err != nil {
			return nil, fmt.Errorf("marshal %s model: %w", m.Form(), err)
		}
		return &stored{Form: m.Form(), Params: p}, nil
	}
	return nil, fmt.Errorf("marshal model %T: %w", m, ErrUnknownForm)
}

// Unmarshal decodes a model written by Marshal.
func Unmarshal(data []byte) (Model, error) {
	var s stored
	if err := json.Unmarshal(data, &s); err != nil {
		return nil, fmt.Errorf("unmarshal model: %w", err)
	}
	return decode(&s)
}

func decode(s *stored) (Model, error) {
	switch s.Form {
	case FormPollux:
		var m Pollux
		return m, unmarshalParams(s, &m)
	case FormScavenger:
		var m Scavenger
		return m, unmarshalParams(s, &m)
	case FormMeasured:
		var m Measured
		return m, unmarshalParams(s, &m)
	case "transferred":
		if s.Ref == nil {
			return nil, fmt.Errorf("unmarshal transferred model: %w: no reference", ErrUnknownForm)
		}
		ref, err := decode(s.Ref)
		if err != nil {
			return nil, err
		}
		var p struct {
			Factor float64 `json:"factor"`
		}
		if err := json.Unmarshal(s.Params, &p); err != nil {
			return nil, fmt.Errorf("unmarshal transferred model: %w", err)
		}
		return Transferred{Ref: ref, Factor: p.Factor}, nil
	}
	return nil, fmt.Errorf("unmarshal model form %q: %w", s.Form, ErrUnknownForm)
}

func unmarshalParams(s *stored, v any) error {
	if err := json.Unmarshal(s.Params, v); err != nil {
		return fmt.Errorf("unmarshal %s model: %w", s.Form, err)
	}
	return nil
}
