package telemetry

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

const good = `{"v":1,"job":"cnn-1a2b3c","attempt":1,"rank":1,"world":2,"step":7,"t":1795938441.7,"dt":0.025,"samples":32,"local_batch":32,"global_batch":64,"micro":1,"compute_s":0.02,"sync_s":0.005,"loss":2.3,"local_sqr":0.87,"avg_sqr":0.31,"future_field":{"x":1}}`

func TestDecodeStep(t *testing.T) {
	r, err := DecodeStep([]byte(good))
	if err != nil {
		t.Fatalf("DecodeStep(good): %v", err)
	}
	if r.Job != "cnn-1a2b3c" || r.Rank != 1 || r.World != 2 || r.Step != 7 || r.GlobalBatch != 64 || *r.LocalSqr != 0.87 || *r.AvgSqr != 0.31 {
		t.Fatalf("decoded %+v", r)
	}
	if r.Epoch != nil {
		t.Fatalf("absent epoch decoded as %v", *r.Epoch)
	}

	cases := []struct {
		name, line, kind string
	}{
		{"not json", `{"v":1,`, DropMalformed},
		{"array", `[1,2]`, DropMalformed},
		{"wrong type", strings.Replace(good, `"rank":1`, `"rank":"one"`, 1), DropMalformed},
		{"version 2", strings.Replace(good, `"v":1`, `"v":2`, 1), DropVersion},
		{"no version", strings.Replace(good, `"v":1,`, ``, 1), DropVersion},
		{"rank outside world", strings.Replace(good, `"rank":1`, `"rank":2`, 1), DropInvalid},
		{"negative rank", strings.Replace(good, `"rank":1`, `"rank":-1`, 1), DropInvalid},
		{"step 0", strings.Replace(good, `"step":7`, `"step":0`, 1), DropInvalid},
		{"bad job id", strings.Replace(good, `cnn-1a2b3c`, `cnn.*`, 1), DropInvalid},
		{"empty job", strings.Replace(good, `"cnn-1a2b3c"`, `""`, 1), DropInvalid},
		{"attempt 0", strings.Replace(good, `"attempt":1`, `"attempt":0`, 1), DropInvalid},
		{"no time", strings.Replace(good, `"t":1795938441.7,`, ``, 1), DropInvalid},
		{"negative norm", strings.Replace(good, `"avg_sqr":0.31`, `"avg_sqr":-0.31`, 1), DropInvalid},
		{"negative dt", strings.Replace(good, `"dt":0.025`, `"dt":-1`, 1), DropInvalid},
		{"negative samples", strings.Replace(good, `"samples":32`, `"samples":-32`, 1), DropInvalid},
		{"huge number", strings.Replace(good, `"loss":2.3`, `"loss":1e999`, 1), DropMalformed},
		{"oversized", `{"v":1,"pad":"` + strings.Repeat("x", MaxRecordBytes) + `"}`, DropOversized},
		{"unknown kind", strings.Replace(good, `"v":1,`, `"v":1,"kind":"bogus",`, 1), DropInvalid},
		{"ack without id", strings.Replace(good, `"v":1,`, `"v":1,"kind":"ack",`, 1), DropInvalid},
		{"hello with negative step", strings.Replace(strings.Replace(good, `"v":1,`, `"v":1,"kind":"hello",`, 1), `"step":7`, `"step":-1`, 1), DropInvalid},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := DecodeStep([]byte(c.line))
			var de *DecodeError
			if !errors.As(err, &de) {
				t.Fatalf("DecodeStep = %v, want a *DecodeError", err)
			}
			if de.Kind != c.kind {
				t.Fatalf("kind %q (%v), want %q", de.Kind, err, c.kind)
			}
		})
	}
}

func TestDecodeControlKinds(t *testing.T) {
	hello := `{"v":1,"kind":"hello","job":"j","attempt":2,"rank":0,"world":2,"step":0,"t":1}`
	ack := `{"v":1,"kind":"ack","id":"d-1","job":"j","attempt":2,"rank":0,"world":2,"step":12,"t":1,"checkpoint":"/c/12.pt"}`
	preempt := `{"v":1,"kind":"preempt","id":"SIGUSR1","job":"j","attempt":2,"rank":1,"world":2,"step":0,"t":1}`
	for line, kind := range map[string]string{hello: KindHello, ack: KindAck, preempt: KindPreempt, good: ""} {
		r, err := DecodeStep([]byte(line))
		if err != nil || r.Kind != kind || r.IsStep() != (kind == "") {
			t.Errorf("DecodeStep(%s) = %+v, %v; want kind %q", line, r, err, kind)
		}
	}
	c := Control{Kind: ControlCheckpoint, ID: "d-1", Job: "j", Attempt: 2, AfterStep: 12, Dir: "/c"}
	got, err := DecodeControl(c.Encode())
	c.V = SchemaVersion
	if err != nil || got != c {
		t.Fatalf("DecodeControl(Encode(%+v)) = %+v, %v", c, got, err)
	}
	if _, err := DecodeControl([]byte(`{"kind":"checkpoint"}`)); err == nil {
		t.Fatal("DecodeControl accepted a message without job, id and attempt")
	}
}

func TestDecodeBatch(t *testing.T) {
	payload := good + "\n\n" + `garbage` + "\n" + strings.Replace(good, `"step":7`, `"step":8`, 1)
	recs, bad := DecodeBatch([]byte(payload))
	if len(recs) != 2 || bad != 1 || recs[0].Step != 7 || recs[1].Step != 8 {
		t.Fatalf("DecodeBatch = %d records (%+v), %d bad; want steps 7, 8 and 1 bad", len(recs), recs, bad)
	}
}

func TestValidJobID(t *testing.T) {
	for id, want := range map[string]bool{
		"a": true, "cnn-1a2b3c": true, "A_b-9": true, strings.Repeat("x", 64): true,
		"": false, strings.Repeat("x", 65): false, "a.b": false, "a*": false, "a>": false, "a b": false, "é": false,
	} {
		if got := ValidJobID(id); got != want {
			t.Errorf("ValidJobID(%q) = %v, want %v", id, got, want)
		}
	}
}

// FuzzDecodeStep checks that no input panics, that accepted records are
// valid, and that re-encoding an accepted record decodes to the same record.
func FuzzDecodeStep(f *testing.F) {
	f.Add([]byte(good))
	f.Add([]byte(`{"v":1,"job":"j","attempt":1,"rank":0,"world":1,"step":1,"t":1}`))
	f.Add([]byte(`{"v":1,"job":"j","attempt":1,"rank":0,"world":1,"step":1,"t":1,"loss":null}`))
	f.Add([]byte(`{"v":1,"job":"j","attempt":1,"rank":0,"world":1,"step":1,"t":1,"loss":"NaN"}`))
	f.Add([]byte(`{"v":1,"job":"j","attempt":1,"rank":0,"world":1,"step":1,"t":1,"loss":"-Infinity","session":"s1"}`))
	f.Add([]byte(`{"v":2}`))
	f.Add([]byte(`{`))
	f.Add([]byte("\x00\xff"))
	f.Add([]byte(`{"v":1,"job":"j","attempt":1,"rank":0,"world":1,"step":9223372036854775807,"t":1e308}`))
	f.Fuzz(func(t *testing.T, line []byte) {
		r, err := DecodeStep(line)
		if err != nil {
			var de *DecodeError
			if !errors.As(err, &de) {
				t.Fatalf("error %v is not a *DecodeError", err)
			}
			return
		}
		if err := r.Validate(); err != nil {
			t.Fatalf("accepted an invalid record: %v", err)
		}
		b, err := json.Marshal(r)
		if err != nil {
			t.Fatalf("encode an accepted record: %v", err)
		}
		back, err := DecodeStep(b)
		if err != nil {
			t.Fatalf("decode the re-encoded %s: %v", b, err)
		}
		if b2, _ := json.Marshal(back); !bytes.Equal(b, b2) {
			t.Fatalf("re-encoded %s decodes to %s", b, b2)
		}
	})
}

// TestStoredLine: the confirmation written without reflection is the one
// Encode writes.
func TestStoredLine(t *testing.T) {
	for _, n := range []int64{1, 9, 10, 12345, 1 << 62} {
		if got, want := string(StoredLine(n)), string(Control{Kind: ControlStored, Lines: n}.Encode()); got != want {
			t.Errorf("StoredLine(%d) = %q, want %q", n, got, want)
		}
	}
}
