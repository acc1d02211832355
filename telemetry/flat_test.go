package telemetry

import (
	"encoding/json"
	"math"
	"math/rand/v2"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

// FuzzDecodeFlat: whatever the flat decoder takes, it decodes exactly as
// encoding/json does (the same record, from any record it started with).
func FuzzDecodeFlat(f *testing.F) {
	for _, s := range []string{
		good, `{}`, ` { "v" : 1 , "step" : -0 } `, `{"v":1,"loss":"NaN","session":"a"}`, `{"v":1,"Step":2,"step":3}`,
		`{"v":1,"step":1e3}`, `{"v":1,"t":1e999}`, `{"v":1,"job":"a\u0062"}`, `{"v":1,"job":"\xff"}`, `{"x":[1],"v":1}`,
		`{"v":1,"loss":null}`, `{"v":1,"biased":true,"confirm":false,"x":null,"y":"z","w":-1.5e-3}`, `{"v":01}`,
		`{"v":1,"epoch":3,"epoch":4}`, `{"ſtep":1}`, `{"v":1,}`, `{"v":1}x`, `{"job":"é"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		start := StepRecord{Step: 7, Job: "pre", Loss: new(float64)}
		flat := start
		flat.Loss = new(float64)
		if !decodeFlat(line, &flat) {
			return
		}
		want := start
		want.Loss = new(float64)
		if err := json.Unmarshal(line, (*stepFields)(&want)); err != nil {
			if _, isString := lossString(line); !isString {
				t.Fatalf("the flat decoder took %q, which encoding/json refuses: %v", line, err)
			}
			if err := unmarshalJSON(line, &want); err != nil {
				t.Fatalf("the flat decoder took %q, which unmarshalJSON refuses: %v", line, err)
			}
		}
		a, errA := json.Marshal(flat)
		b, errB := json.Marshal(want)
		if errA != nil || errB != nil || string(a) != string(b) {
			t.Fatalf("%q: flat %s (%v), encoding/json %s (%v)", line, a, errA, b, errB)
		}
	})
}

// lossString says whether line has a loss written as a string.
func lossString(line []byte) (int, bool) {
	for i := 0; i+len(stringLoss) <= len(line); i++ {
		if string(line[i:i+len(stringLoss)]) == string(stringLoss) {
			return i, true
		}
	}
	return 0, false
}

// BenchmarkDecodeStep: a torch client's record, through DecodeStep (the
// flat decoder) and through encoding/json alone.
func BenchmarkDecodeStep(b *testing.B) {
	line := []byte(`{"v":1,"job":"bench-ingest","attempt":1,"rank":3,"world":8,"step":1234,"t":1795938441.712345,"dt":0.0251,"samples":32,"local_batch":32,"global_batch":256,"micro":1,"compute_s":0.0212,"sync_s":0.0039,"loss":2.3051,"local_sqr":0.8711,"avg_sqr":0.3145}`)
	b.Run("flat", func(b *testing.B) {
		for range b.N {
			if _, err := DecodeStep(line); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("encoding/json", func(b *testing.B) {
		for range b.N {
			var r StepRecord
			if err := unmarshalJSON(line, &r); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// TestFlatFieldsCoverTheRecord: every field of StepRecord has its decoder in
// the fast path; one without it is skipped there, and a record that needs
// it (an end's exit code) reads as invalid.
func TestFlatFieldsCoverTheRecord(t *testing.T) {
	rt := reflect.TypeOf(StepRecord{})
	for i := range rt.NumField() {
		name, _, _ := strings.Cut(rt.Field(i).Tag.Get("json"), ",")
		if name == "" || name == "-" {
			continue
		}
		if flatFields[name] == nil {
			t.Errorf("StepRecord.%s (%q) has no decoder in flatFields", rt.Field(i).Name, name)
		}
	}
}

// TestExactDecimalIsStrconvs: the fast path gives strconv's value, bit for
// bit, for every literal it takes, and takes the literals clients write.
func TestExactDecimalIsStrconvs(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	lits := []string{"0", "-0", "0.0251", "1795938441.712345", "9007199254740992", "9007199254740993", "0.1", "-2.5",
		"0.0000000000000000000001", "0.00000000000000000000001", "123456789012345678901234", "1e3", "1.5E-3", "00", "5."}
	for range 200000 {
		m := rng.Uint64N(1<<53 + 2)
		s := strconv.FormatUint(m, 10)
		if frac := rng.IntN(len(s) + 24); frac > 0 && frac < len(s) {
			s = s[:len(s)-frac] + "." + s[len(s)-frac:]
		} else if frac >= len(s) {
			s = "0." + strings.Repeat("0", frac-len(s)) + s
		}
		if rng.IntN(2) == 0 {
			s = "-" + s
		}
		lits = append(lits, s)
	}
	took := 0
	for _, s := range lits {
		v, ok := exactDecimal([]byte(s))
		if !ok {
			continue
		}
		took++
		want, err := strconv.ParseFloat(s, 64)
		if err != nil || math.Float64bits(v) != math.Float64bits(want) {
			t.Fatalf("exactDecimal(%q) = %v, strconv %v (%v)", s, v, want, err)
		}
	}
	for _, s := range []string{"0.0251", "1795938441.712345", "-0"} {
		if _, ok := exactDecimal([]byte(s)); !ok {
			t.Errorf("exactDecimal(%q) left to strconv", s)
		}
	}
	for _, s := range []string{"9007199254740993", "1e3", "0.00000000000000000000001"} {
		if _, ok := exactDecimal([]byte(s)); ok {
			t.Errorf("exactDecimal(%q) taken: it is not exact", s)
		}
	}
	if took < len(lits)/2 {
		t.Errorf("exactDecimal took %d of %d literals", took, len(lits))
	}
}
