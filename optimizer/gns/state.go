package gns

import "encoding/json"

// estimatorJSON is an Estimator's JSON form: its whole state, so that an
// estimate kept in a store (a job's step digest) goes on where it was.
type estimatorJSON struct {
	Decay  float64 `json:"decay,omitempty"`
	SqrB   float64 `json:"sqr_b"`
	VarB   float64 `json:"var_b"`
	Unbias float64 `json:"unbias"`
	Steps  int     `json:"steps"`
	Biased bool    `json:"biased,omitempty"`
}

// MarshalJSON writes the estimator's state.
func (e Estimator) MarshalJSON() ([]byte, error) {
	return json.Marshal(estimatorJSON{e.Decay, e.sqrB, e.varB, e.unbias, e.steps, e.biased})
}

// UnmarshalJSON reads what MarshalJSON wrote.
func (e *Estimator) UnmarshalJSON(b []byte) error {
	var v estimatorJSON
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	*e = Estimator{Decay: v.Decay, sqrB: v.SqrB, varB: v.VarB, unbias: v.Unbias, steps: v.Steps, biased: v.Biased}
	return nil
}
