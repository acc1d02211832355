package telemetry

import (
	"encoding/json"
	"errors"
	"math"
	"strings"
	"testing"
)

// TestNonFiniteLoss: a NaN or infinite loss travels as the strings "NaN",
// "Infinity" and "-Infinity" (JSON has no such numbers), is decoded to the
// float, and is encoded back the same way (issue 21: a NaN loss was
// dropped, so a diverged run looked healthy).
func TestNonFiniteLoss(t *testing.T) {
	for wire, want := range map[string]float64{`"NaN"`: math.NaN(), `"Infinity"`: math.Inf(1), `"-Infinity"`: math.Inf(-1), `2.5`: 2.5} {
		line := strings.Replace(good, `"loss":2.3`, `"loss":`+wire, 1)
		r, err := DecodeStep([]byte(line))
		if err != nil {
			t.Fatalf("DecodeStep(loss %s): %v", wire, err)
		}
		if r.Loss == nil || !(*r.Loss == want || math.IsNaN(want) && math.IsNaN(*r.Loss)) {
			t.Fatalf("loss %s decoded as %v, want %v", wire, r.Loss, want)
		}
		b, err := json.Marshal(r)
		if err != nil {
			t.Fatalf("encode a record of loss %v: %v", want, err)
		}
		if !strings.Contains(string(b), `"loss":`+wire) {
			t.Errorf("loss %v encoded as %s, want %s", want, b, wire)
		}
		back, err := DecodeStep(b)
		if err != nil || back.Loss == nil || !(*back.Loss == want || math.IsNaN(*back.Loss)) {
			t.Errorf("round trip of loss %v: %v, %v", want, back.Loss, err)
		}
	}
	for _, wire := range []string{`"nan"`, `"inf"`, `"2.5"`, `""`, `true`} {
		_, err := DecodeStep([]byte(strings.Replace(good, `"loss":2.3`, `"loss":`+wire, 1)))
		var de *DecodeError
		if !errors.As(err, &de) || de.Kind != DropMalformed {
			t.Errorf("loss %s: %v, want it refused as malformed", wire, err)
		}
	}
}

// TestValidateBounds: values no job can have are refused (issue 21: step
// 2^63-1, t=1e300 and a world of a million were stored).
func TestValidateBounds(t *testing.T) {
	for name, line := range map[string]string{
		"step 2^63-1":          strings.Replace(good, `"step":7`, `"step":9223372036854775807`, 1),
		"step 2^53":            strings.Replace(good, `"step":7`, `"step":9007199254740992`, 1),
		"t=1e300":              strings.Replace(good, `"t":1795938441.7`, `"t":1e300`, 1),
		"world of 2^21":        strings.Replace(good, `"world":2`, `"world":2097152`, 1),
		"dt of 1e300":          strings.Replace(good, `"dt":0.025`, `"dt":1e300`, 1),
		"compute_s of 1e300":   strings.Replace(good, `"compute_s":0.02`, `"compute_s":1e300`, 1),
		"total of 2^62":        strings.Replace(good, `"v":1,`, `"v":1,"total":4611686018427387904,`, 1),
		"a session of 65":      strings.Replace(good, `"v":1,`, `"v":1,"session":"`+strings.Repeat("s", 65)+`",`, 1),
		"a session with a dot": strings.Replace(good, `"v":1,`, `"v":1,"session":"a.b",`, 1),
	} {
		_, err := DecodeStep([]byte(line))
		var de *DecodeError
		if !errors.As(err, &de) || de.Kind != DropInvalid {
			t.Errorf("%s: %v, want it refused as invalid", name, err)
		}
	}
	ok := strings.Replace(good, `"v":1,`, `"v":1,"session":"0123456789abcdef",`, 1)
	if _, err := DecodeStep([]byte(ok)); err != nil {
		t.Errorf("a record with a session: %v", err)
	}
}
