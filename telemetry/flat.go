package telemetry

import (
	"bytes"
	"strconv"
	"unicode/utf8"
	"unsafe"
)

// Every record the daemon takes is decoded twice (by the socket, and by
// the job's runner from the stream), and encoding/json's reflection costs
// more than the rest of a record's way to the store (issue 25). decodeFlat
// reads the records clients write, a flat object of the known fields in
// plain form, in one pass without reflection; anything else (an escape in
// a string, a nested value, null, a number of another form, a key that
// only differs in case from a known one) it leaves to encoding/json, so
// that what it decodes is exactly what encoding/json would
// (FuzzDecodeFlat).

// flatField decodes one field's value at the start of b into d's record
// and returns the bytes it took; ok is false for a form it leaves to
// encoding/json.
type flatField func(d *flatDecoder, b []byte) (n int, ok bool)

// flatDecoder is what decoding a record needs beyond the record: where its
// pointer fields' values are kept (one allocation for all of them, not one
// each), and the job id of the last record (a message's records share it,
// so it is allocated once).
type flatDecoder struct {
	r     *StepRecord
	slots []float64
	job   string
}

// floatSlots is how many pointer fields to floats a record has.
const floatSlots = 5

// float is a pointer to v, kept in the record's slots.
func (d *flatDecoder) float(v float64) *float64 {
	if len(d.slots) == 0 {
		d.slots = make([]float64, floatSlots)
	}
	p := &d.slots[0]
	*p, d.slots = v, d.slots[1:]
	return p
}

// record starts decoding into r.
func (d *flatDecoder) record(r *StepRecord) {
	d.r, d.slots = r, nil
}

// flatFields are the record's fields by their JSON names.
var flatFields = map[string]flatField{
	"v":            intField(func(r *StepRecord) *int { return &r.V }),
	"kind":         stringField(func(r *StepRecord) *string { return &r.Kind }),
	"job":          jobField,
	"attempt":      intField(func(r *StepRecord) *int { return &r.Attempt }),
	"rank":         intField(func(r *StepRecord) *int { return &r.Rank }),
	"world":        intField(func(r *StepRecord) *int { return &r.World }),
	"step":         int64Field(func(r *StepRecord) *int64 { return &r.Step }),
	"t":            floatField(func(r *StepRecord) *float64 { return &r.Time }),
	"dt":           floatField(func(r *StepRecord) *float64 { return &r.Seconds }),
	"samples":      intField(func(r *StepRecord) *int { return &r.Samples }),
	"local_batch":  intField(func(r *StepRecord) *int { return &r.LocalBatch }),
	"global_batch": intField(func(r *StepRecord) *int { return &r.GlobalBatch }),
	"micro":        intField(func(r *StepRecord) *int { return &r.Micro }),
	"compute_s":    floatPtrField(func(r *StepRecord) **float64 { return &r.ComputeSeconds }),
	"sync_s":       floatPtrField(func(r *StepRecord) **float64 { return &r.SyncSeconds }),
	"loss":         lossField,
	"local_sqr":    floatPtrField(func(r *StepRecord) **float64 { return &r.LocalSqr }),
	"avg_sqr":      floatPtrField(func(r *StepRecord) **float64 { return &r.AvgSqr }),
	"count":        intField(func(r *StepRecord) *int { return &r.Count }),
	"biased":       boolField(func(r *StepRecord) *bool { return &r.Biased }),
	"epoch":        intPtrField(func(r *StepRecord) **int { return &r.Epoch }),
	"from":         stringField(func(r *StepRecord) *string { return &r.From }),
	"id":           stringField(func(r *StepRecord) *string { return &r.ID }),
	"checkpoint":   stringField(func(r *StepRecord) *string { return &r.Checkpoint }),
	"total":        int64Field(func(r *StepRecord) *int64 { return &r.Total }),
	"token":        stringField(func(r *StepRecord) *string { return &r.Token }),
	"confirm":      boolField(func(r *StepRecord) *bool { return &r.Confirm }),
	"session":      stringField(func(r *StepRecord) *string { return &r.Session }),
	"code":         intPtrField(func(r *StepRecord) **int { return &r.ExitCode }),
}

// flatByLen is flatFields by the length of their names, for lookup: a map
// lookup hashes the key, which cost a fifth of a record's decoding.
var flatByLen = func() (t [16][]flatEntry) {
	for name, f := range flatFields {
		t[len(name)] = append(t[len(name)], flatEntry{name, f})
	}
	return t
}()

// flatEntry is one of flatFields.
type flatEntry struct {
	name string
	f    flatField
}

// lookupFlat is key's decoder in flatFields, or nil.
func lookupFlat(key []byte) flatField {
	if len(key) >= len(flatByLen) {
		return nil
	}
	for _, e := range flatByLen[len(key)] {
		if string(key) == e.name {
			return e.f
		}
	}
	return nil
}

// decodeFlat decodes line into r, or says false (r then holds whatever it
// had read: the caller starts again with encoding/json).
func decodeFlat(line []byte, r *StepRecord) bool {
	var d flatDecoder
	return d.decode(line, r)
}

// decode is decodeFlat with d's state.
func (d *flatDecoder) decode(line []byte, r *StepRecord) bool {
	d.record(r)
	b := skipSpace(line)
	if len(b) == 0 || b[0] != '{' {
		return false
	}
	b = skipSpace(b[1:])
	if len(b) > 0 && b[0] == '}' {
		return len(skipSpace(b[1:])) == 0
	}
	for {
		key, n, ok := plainString(b)
		if !ok {
			return false
		}
		b = skipSpace(b[n:])
		if len(b) == 0 || b[0] != ':' {
			return false
		}
		b = skipSpace(b[1:])
		if f := lookupFlat(key); f != nil {
			n, ok = f(d, b)
		} else {
			n, ok = skipScalar(key, b)
		}
		if !ok {
			return false
		}
		b = skipSpace(b[n:])
		switch {
		case len(b) == 0:
			return false
		case b[0] == '}':
			return len(skipSpace(b[1:])) == 0
		case b[0] != ',':
			return false
		}
		b = skipSpace(b[1:])
	}
}

func skipSpace(b []byte) []byte {
	for len(b) > 0 && (b[0] == ' ' || b[0] == '\t' || b[0] == '\n' || b[0] == '\r') {
		b = b[1:]
	}
	return b
}

// plainString reads a JSON string without escapes or control characters,
// of valid UTF-8, and returns its content and the bytes it took.
func plainString(b []byte) (s []byte, n int, ok bool) {
	if len(b) == 0 || b[0] != '"' {
		return nil, 0, false
	}
	ascii := true
	for i := 1; i < len(b); i++ {
		switch c := b[i]; {
		case c == '"':
			if !ascii && !utf8.Valid(b[1:i]) {
				return nil, 0, false // encoding/json would replace the bad bytes
			}
			return b[1:i], i + 1, true
		case c == '\\' || c < 0x20:
			return nil, 0, false
		case c >= 0x80:
			ascii = false
		}
	}
	return nil, 0, false
}

// number reads a JSON number literal and returns its bytes; integer says
// it has no fraction and no exponent.
func number(b []byte) (lit []byte, integer, ok bool) {
	i := 0
	if i < len(b) && b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && b[i] >= '1' && b[i] <= '9':
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
	default:
		return nil, false, false
	}
	integer = true
	if i < len(b) && b[i] == '.' {
		integer = false
		i++
		start := i
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
		if i == start {
			return nil, false, false
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		integer = false
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		start := i
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
		if i == start {
			return nil, false, false
		}
	}
	return b[:i], integer, true
}

// parseInt reads a JSON integer literal at the start of b that fits in
// bits bits.
func parseInt(b []byte, bits int) (v int64, n int, ok bool) {
	lit, integer, ok := number(b)
	if !ok || !integer {
		return 0, 0, false
	}
	neg := lit[0] == '-'
	digits := lit
	if neg {
		digits = lit[1:]
	}
	limit := uint64(1)<<(bits-1) - 1 // the largest positive; one more when negative
	if neg {
		limit++
	}
	var u uint64
	for _, c := range digits {
		d := uint64(c - '0')
		if u > (limit-d)/10 {
			return 0, 0, false
		}
		u = u*10 + d
	}
	if neg {
		return -int64(u), len(lit), true // -(2^63) wraps to itself
	}
	return int64(u), len(lit), true
}

// parseFloat reads a JSON number at the start of b as strconv (and so
// encoding/json) does.
func parseFloat(b []byte) (v float64, n int, ok bool) {
	lit, _, ok := number(b)
	if !ok {
		return 0, 0, false
	}
	if v, ok := exactDecimal(lit); ok {
		return v, len(lit), true
	}
	// The literal is only read for the call: no copy of it is needed.
	v, err := strconv.ParseFloat(unsafe.String(&lit[0], len(lit)), 64)
	return v, len(lit), err == nil
}

// pow10 are the powers of ten a float64 holds exactly.
var pow10 = [...]float64{1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15, 1e16,
	1e17, 1e18, 1e19, 1e20, 1e21, 1e22}

// exactDecimal reads a number literal without an exponent whose digits,
// the point left out, make an integer m <= 2^53, with at most 22 of them
// after the point: m and the power of ten are then exact float64s, and
// their quotient is the correctly rounded value, as strconv gives it
// (Clinger's fast path), at a fraction of strconv's cost. Any other
// literal says false.
func exactDecimal(lit []byte) (float64, bool) {
	neg := lit[0] == '-'
	if neg {
		lit = lit[1:]
	}
	var m uint64
	frac, point := 0, false
	for _, c := range lit {
		switch {
		case c == '.':
			point = true
			continue
		case c < '0' || c > '9':
			return 0, false // an exponent
		}
		if m = m*10 + uint64(c-'0'); m > 1<<53 {
			return 0, false
		}
		if point {
			frac++
		}
	}
	if frac >= len(pow10) {
		return 0, false
	}
	v := float64(m) / pow10[frac]
	if neg {
		v = -v
	}
	return v, true
}

func intField(field func(*StepRecord) *int) flatField {
	return func(d *flatDecoder, b []byte) (int, bool) {
		v, n, ok := parseInt(b, strconv.IntSize)
		if ok {
			*field(d.r) = int(v)
		}
		return n, ok
	}
}

func intPtrField(field func(*StepRecord) **int) flatField {
	return func(d *flatDecoder, b []byte) (int, bool) {
		v, n, ok := parseInt(b, strconv.IntSize)
		if ok {
			i := int(v)
			*field(d.r) = &i
		}
		return n, ok
	}
}

func int64Field(field func(*StepRecord) *int64) flatField {
	return func(d *flatDecoder, b []byte) (int, bool) {
		v, n, ok := parseInt(b, 64)
		if ok {
			*field(d.r) = v
		}
		return n, ok
	}
}

func floatField(field func(*StepRecord) *float64) flatField {
	return func(d *flatDecoder, b []byte) (int, bool) {
		v, n, ok := parseFloat(b)
		if ok {
			*field(d.r) = v
		}
		return n, ok
	}
}

func floatPtrField(field func(*StepRecord) **float64) flatField {
	return func(d *flatDecoder, b []byte) (int, bool) {
		v, n, ok := parseFloat(b)
		if ok {
			*field(d.r) = d.float(v)
		}
		return n, ok
	}
}

// lossField reads a loss: a number, or the string of a non-finite one.
func lossField(d *flatDecoder, b []byte) (int, bool) {
	if len(b) == 0 || b[0] != '"' {
		return numericLoss(d, b)
	}
	_, n, ok := plainString(b)
	if !ok {
		return 0, false
	}
	var l Loss
	if l.UnmarshalJSON(b[:n]) != nil {
		return 0, false
	}
	d.r.Loss = d.float(float64(l))
	return n, true
}

// numericLoss reads a loss written as a number.
var numericLoss = floatPtrField(func(r *StepRecord) **float64 { return &r.Loss })

func stringField(field func(*StepRecord) *string) flatField {
	return func(d *flatDecoder, b []byte) (int, bool) {
		s, n, ok := plainString(b)
		if ok {
			*field(d.r) = string(s)
		}
		return n, ok
	}
}

// jobField reads the job id, allocated once for a run of records of one job.
func jobField(d *flatDecoder, b []byte) (int, bool) {
	s, n, ok := plainString(b)
	if ok {
		if string(s) != d.job {
			d.job = string(s)
		}
		d.r.Job = d.job
	}
	return n, ok
}

func boolField(field func(*StepRecord) *bool) flatField {
	return func(d *flatDecoder, b []byte) (int, bool) {
		switch {
		case bytes.HasPrefix(b, []byte("true")):
			*field(d.r) = true
			return 4, true
		case bytes.HasPrefix(b, []byte("false")):
			*field(d.r) = false
			return 5, true
		}
		return 0, false
	}
}

// skipScalar skips the value of an unknown key: a number, a plain string,
// true, false or null. A key that matches a known one but for case is
// encoding/json's (it matches names without regard to case).
func skipScalar(key, b []byte) (int, bool) {
	for name := range flatFields {
		if bytes.EqualFold(key, []byte(name)) {
			return 0, false
		}
	}
	switch {
	case len(b) == 0:
		return 0, false
	case b[0] == '"':
		_, n, ok := plainString(b)
		return n, ok
	case bytes.HasPrefix(b, []byte("true")), bytes.HasPrefix(b, []byte("null")):
		return 4, true
	case bytes.HasPrefix(b, []byte("false")):
		return 5, true
	}
	lit, _, ok := number(b)
	return len(lit), ok
}
