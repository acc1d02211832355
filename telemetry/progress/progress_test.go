package progress

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"
)

var t0 = time.Date(2026, 11, 29, 9, 0, 0, 0, time.UTC)

// at returns t0 plus s seconds.
func at(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }

func TestParseLine(t *testing.T) {
	tests := []struct {
		name  string
		regex string
		line  string
		ok    bool
		step  int64 // -1: no step number
		total int64
		rate  float64
	}{
		// tqdm
		{name: "tqdm", line: " 45%|████▌     | 450/1000 [00:12<00:15, 36.51it/s]", ok: true, step: 450, total: 1000, rate: 36.51},
		{name: "tqdm s/it", line: " 45%|████▌     | 450/1000 [18:45<22:55,  2.50s/it]", ok: true, step: 450, total: 1000, rate: 0.4},
		{name: "tqdm with description and postfix", line: "Epoch 3:  45%|████▌     | 450/1000 [00:12<00:15, 36.51it/s, loss=0.123, v_num=0]", ok: true, step: 450, total: 1000, rate: 36.51},
		{name: "tqdm hours", line: "Training:  99%|█████████▉| 9900/10000 [1:02:03<00:37, 2.66it/s]", ok: true, step: 9900, total: 10000, rate: 2.66},
		{name: "tqdm start, unknown rate", line: "  0%|          | 0/1000 [00:00<?, ?it/s]", ok: true, step: 0, total: 1000},
		{name: "tqdm no total", line: "450it [00:12, 36.51it/s]", ok: true, step: 450, rate: 36.51},
		{name: "tqdm unit batch", line: "100%|██████████| 20/20 [00:01<00:00, 15.02batch/s]", ok: true, step: 20, total: 20, rate: 15.02},
		{name: "tqdm counting images is not steps", line: " 45%|████▌     | 4500/10000 [00:12<00:15, 365.1img/s]", ok: false},
		{name: "tqdm counting bytes, no total", line: "4500B [00:12, 365.1B/s]", ok: false},
		{name: "tqdm with ANSI colour", line: "\x1b[32m 45%|████▌     | 450/1000 [00:12<00:15, 36.51it/s]\x1b[0m", ok: true, step: 450, total: 1000, rate: 36.51},
		{name: "tqdm nested bar cursor moves", line: "\x1b[A\x1b[2K 12%|█▏        | 120/1000 [00:03<00:22, 39.9it/s]\x1b[K", ok: true, step: 120, total: 1000, rate: 39.9},
		{name: "tqdm redraws in one line: the last wins", line: "\r 10%|█         | 100/1000 [00:03<00:27, 33.0it/s]\r 11%|█         | 110/1000 [00:03<00:26, 33.5it/s]\r", ok: true, step: 110, total: 1000, rate: 33.5},
		{name: "redraws then a plain log line", line: " 11%|█         | 110/1000 [00:03<00:26, 33.5it/s]\rsaving", ok: true, step: 110, total: 1000, rate: 33.5},
		// Keras
		{name: "keras 2", line: " 120/1000 [==>...........................] - ETA: 25s - loss: 0.3125 - accuracy: 0.9021", ok: true, step: 120, total: 1000},
		{name: "keras 2 epoch end", line: "1000/1000 [==============================] - 12s 12ms/step - loss: 0.2", ok: true, step: 1000, total: 1000, rate: 1000.0 / 12},
		{name: "keras 3", line: "\x1b[1m 120/1000\x1b[0m \x1b[32m━━━━\x1b[0m\x1b[37m━━━━━━━━━━━━━━━━\x1b[0m \x1b[1m2s\x1b[0m 12ms/step - loss: 0.3", ok: true, step: 120, total: 1000, rate: 1000.0 / 12},
		// step words
		{name: "step", line: "step 120 loss 0.53", ok: true, step: 120},
		{name: "Step bracket", line: "Epoch [3/10], Step [120/1000], Loss: 0.5312", ok: true, step: 120, total: 1000},
		{name: "Epoch Step", line: "Epoch 3 Step 120 | loss 0.5", ok: true, step: 120},
		{name: "iter", line: "iter 120: loss 2.31, time 80.52ms", ok: true, step: 120},
		{name: "Iteration colon", line: "Iteration: 120, lr: 0.001", ok: true, step: 120},
		{name: "global_step", line: "global_step=120 loss=0.5 12.5 it/s", ok: true, step: 120, rate: 12.5},
		{name: "step with s/it", line: "step 7 | 0.25 s/it", ok: true, step: 7, rate: 4},
		{name: "step with ms/step", line: "step 7 80ms/step", ok: true, step: 7, rate: 12.5},
		// not progress
		{name: "plain log", line: "INFO loading dataset from /data/train", ok: false},
		{name: "max_steps is no step", line: "max_steps=1000 warmup_steps=100", ok: false},
		{name: "fraction without a bar", line: "accuracy 120/1000", ok: false},
		{name: "empty", line: "", ok: false},
		{name: "only cr", line: "\r\r", ok: false},
		{name: "huge step number", line: "step 99999999999999999999999", ok: false},
		// user regex
		{name: "user step", regex: `done (?P<step>\d+) batches`, line: "done 42 batches", ok: true, step: 42},
		{name: "user step and rate", regex: `it=(?P<step>\d+) .*speed=(?P<rate>[\d.]+)`, line: "it=42 loss=1 speed=3.5", ok: true, step: 42, rate: 3.5},
		{name: "user rate only", regex: `(?P<rate>[\d.]+) samples/s`, line: "throughput 512.5 samples/s", ok: true, step: -1, rate: 512.5},
		{name: "user total", regex: `(?P<step>\d+) of (?P<total>\d+)`, line: "7 of 9", ok: true, step: 7, total: 9},
		{name: "user regex replaces built-ins", regex: `done (?P<step>\d+)`, line: " 45%|████▌     | 450/1000 [00:12<00:15, 36.51it/s]", ok: false},
		{name: "user regex after ANSI strip", regex: `^step (?P<step>\d+)$`, line: "\x1b[1mstep 5\x1b[0m", ok: true, step: 5},
		{name: "user rate not a number", regex: `rate (?P<rate>\S+)`, line: "rate NaN", ok: false},
		{name: "user optional step missing", regex: `x(?P<step>\d+)?y`, line: "xy", ok: false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, err := New(tc.regex)
			if err != nil {
				t.Fatal(err)
			}
			s, ok := p.Parse(tc.line, t0)
			if ok != tc.ok {
				t.Fatalf("ok %v, want %v (%+v)", ok, tc.ok, s)
			}
			if !ok {
				return
			}
			if tc.step < 0 {
				if s.HasStep {
					t.Errorf("step %d, want none", s.Step)
				}
			} else if !s.HasStep || s.Step != tc.step {
				t.Errorf("step %d (has %v), want %d", s.Step, s.HasStep, tc.step)
			}
			if s.Total != tc.total {
				t.Errorf("total %d, want %d", s.Total, tc.total)
			}
			if math.Abs(s.Rate-tc.rate) > 1e-9*math.Max(1, tc.rate) {
				t.Errorf("rate %g, want %g", s.Rate, tc.rate)
			}
			if !s.Time.Equal(t0) || s.Delta != max(s.Step, 0) || s.Elapsed != 0 || s.Restart {
				t.Errorf("first observation %+v: want its steps counted from 0, untimed", s)
			}
		})
	}
}

// obs is one expected observation of a sequence.
type obs struct {
	ok      bool
	step    int64
	delta   int64
	elapsed float64
	restart bool
}

func TestParseSequence(t *testing.T) {
	type line struct {
		s   string
		at  float64
		out obs
	}
	bar := func(n int) string {
		return " " + strings.Repeat("█", n/100) + "| " + itoa(n) + "/1000 [00:01<00:10, 40.0it/s]"
	}
	tests := []struct {
		name  string
		lines []line
	}{
		{"steps to dt", []line{
			{"step 10", 0, obs{ok: true, step: 10, delta: 10}},
			{"step 20", 2, obs{ok: true, step: 20, delta: 10, elapsed: 2}},
			{"step 25", 3, obs{ok: true, step: 25, delta: 5, elapsed: 1}},
		}},
		{"tqdm redraws the same step", []line{
			{bar(100), 0, obs{ok: true, step: 100, delta: 100}},
			{bar(100), 0.5, obs{}},
			{bar(100), 0.7, obs{}},
			{bar(140), 1, obs{ok: true, step: 140, delta: 40, elapsed: 1}},
		}},
		{"backwards restarts", []line{
			{"step 500", 0, obs{ok: true, step: 500, delta: 500}},
			{"step 520", 1, obs{ok: true, step: 520, delta: 20, elapsed: 1}},
			{"step 501", 5, obs{ok: true, step: 501, restart: true}},
			{"step 511", 6, obs{ok: true, step: 511, delta: 10, elapsed: 1}},
		}},
		{"new epoch bar counts on", []line{
			{bar(990), 0, obs{ok: true, step: 990, delta: 990}},
			{bar(1000), 1, obs{ok: true, step: 1000, delta: 10, elapsed: 1}},
			{"  0%|          | 0/1000 [00:00<?, ?it/s]", 3, obs{ok: true, step: 0}},
			{bar(30), 4, obs{ok: true, step: 30, delta: 30, elapsed: 1}},
		}},
		{"keras epochs count on from 1", []line{
			{"999/1000 [=============================>] - ETA: 0s", 0, obs{ok: true, step: 999, delta: 999}},
			{"1000/1000 [==============================] - 10s 10ms/step", 1, obs{ok: true, step: 1000, delta: 1, elapsed: 1}},
			{"Epoch 2/10", 1, obs{}},
			{"   1/1000 [..............................] - ETA: 9s", 2, obs{ok: true, step: 1, delta: 1, elapsed: 1}},
		}},
		{"unfinished bar going back is a restart", []line{
			{bar(500), 0, obs{ok: true, step: 500, delta: 500}},
			{bar(100), 1, obs{ok: true, step: 100, restart: true}},
		}},
		{"clock going backwards gives no negative dt", []line{
			{"step 1", 5, obs{ok: true, step: 1, delta: 1}},
			{"step 2", 4, obs{ok: true, step: 2, delta: 1, elapsed: 0}},
		}},
		{"a burst at one instant is counted, not timed", []line{
			{"step 1", 1, obs{ok: true, step: 1, delta: 1}},
			{"step 2", 1, obs{ok: true, step: 2, delta: 1}},
			{"step 3", 2, obs{ok: true, step: 3, delta: 1, elapsed: 1}},
		}},
		{"cr-separated updates arriving as one line", []line{
			{"\r 10%|█         | 100/1000 [00:03<00:27, 33.0it/s]", 0, obs{ok: true, step: 100, delta: 100}},
			{"\r 11%|█         | 110/1000 [00:03<00:26, 33.5it/s]\r 12%|█▏        | 120/1000 [00:03<00:26, 33.5it/s]", 1, obs{ok: true, step: 120, delta: 20, elapsed: 1}},
		}},
		{"other lines leave the state alone", []line{
			{"step 1", 0, obs{ok: true, step: 1, delta: 1}},
			{"loss 0.5", 1, obs{}},
			{"step 3", 2, obs{ok: true, step: 3, delta: 2, elapsed: 2}},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, err := New("")
			if err != nil {
				t.Fatal(err)
			}
			for i, l := range tc.lines {
				s, ok := p.Parse(l.s, at(l.at))
				got := obs{ok: ok, step: s.Step, delta: s.Delta, elapsed: s.Elapsed, restart: s.Restart}
				if math.Abs(got.elapsed-l.out.elapsed) < 1e-9 {
					got.elapsed = l.out.elapsed
				}
				if got != l.out {
					t.Errorf("line %d %q: got %+v, want %+v", i, l.s, got, l.out)
				}
			}
		})
	}
}

func itoa(n int) string {
	if n == 0 {
		return "0"
	}
	var b []byte
	for ; n > 0; n /= 10 {
		b = append([]byte{byte('0' + n%10)}, b...)
	}
	return string(b)
}

func TestRateOnlySequence(t *testing.T) {
	p, err := New(`(?P<rate>[\d.]+) it/s`)
	if err != nil {
		t.Fatal(err)
	}
	s, ok := p.Parse("10 it/s", at(0))
	if !ok || s.HasStep || s.Elapsed != 0 || s.StepSeconds() != 0.1 {
		t.Fatalf("first %+v", s)
	}
	s, ok = p.Parse("20 it/s", at(2))
	if !ok || s.Elapsed != 2 || s.Rate != 20 || s.Delta != 0 || s.StepSeconds() != 0.05 {
		t.Fatalf("second %+v", s)
	}
}

func TestStepSeconds(t *testing.T) {
	tests := []struct {
		s    Step
		want float64
	}{
		{Step{Delta: 10, Elapsed: 2, Rate: 100}, 0.2},
		{Step{Delta: 10, Elapsed: 0, Rate: 4}, 0.25},
		{Step{Rate: 2}, 0.5},
		{Step{}, 0},
	}
	for _, tc := range tests {
		if got := tc.s.StepSeconds(); got != tc.want {
			t.Errorf("%+v: %g, want %g", tc.s, got, tc.want)
		}
	}
}

func TestNewErrors(t *testing.T) {
	tests := []struct {
		regex string
		want  string // "" for no error
	}{
		{"", ""},
		{`step (?P<step>\d+)`, ""},
		{`(?P<rate>[\d.]+)it/s`, ""},
		{`(?P<step>\d+)/(?P<total>\d+) (?P<rate>[\d.]+)`, ""},
		{`(\d+) (?P<step>\d+)`, ""},
		{`step (\d+`, "missing closing )"},
		{`step (\d+)`, ""}, // one plain group: the step
		{`step (\d+) of (\d+)`, "needs one group for the step number"},
		{`(?P<total>\d+)`, "or a (?P<step>...)"},
		{`(?P<steps>\d+)`, `e.g. --step-regex 'it (\d+)'`},
		{`(?P<steps>\d+)`, `unknown group "steps"`},
	}
	for _, tc := range tests {
		p, err := New(tc.regex)
		if tc.want == "" {
			if err != nil || p == nil {
				t.Errorf("%q: %v", tc.regex, err)
			}
			continue
		}
		if err == nil {
			t.Errorf("%q: no error, want %q", tc.regex, tc.want)
			continue
		}
		if !errors.Is(err, ErrBadRegex) || !strings.Contains(err.Error(), tc.want) || !strings.HasPrefix(err.Error(), "step regex ") {
			t.Errorf("%q: error %q, want ErrBadRegex with %q", tc.regex, err, tc.want)
		}
	}
}

func TestFreshAndReset(t *testing.T) {
	p, err := New(`s(?P<step>\d+)`)
	if err != nil {
		t.Fatal(err)
	}
	p.Parse("s5", at(0))
	q := p.Fresh(4)
	if s, ok := q.Parse("s6", at(1)); !ok || s.Delta != 2 {
		t.Errorf("fresh parser carried state: %+v", s)
	}
	if s, ok := q.Parse("step 7", at(2)); ok {
		t.Errorf("fresh parser lost the user regex: %+v", s)
	}
	p.Reset()
	if s, ok := p.Parse("s5", at(2)); !ok || s.Delta != 5 || s.Restart {
		t.Errorf("after reset %+v, %v", s, ok)
	}
}

// TestUserRegexGroups: one plain group is the step; a loss group is read.
func TestUserRegexGroups(t *testing.T) {
	p, err := New(`it (\d+)`)
	if err != nil {
		t.Fatal(err)
	}
	if s, ok := p.Parse("it 40 done", at(0)); !ok || s.Step != 40 || s.Delta != 40 {
		t.Errorf("plain group: %+v, %v; want step 40, all 40 counted", s, ok)
	}
	p, err = New(`step (?P<step>\d+)/(?P<total>\d+) loss (?P<loss>[\d.]+)`)
	if err != nil {
		t.Fatal(err)
	}
	if s, ok := p.Parse("step 3/10 loss 0.25", at(0)); !ok || s.Total != 10 || s.Loss == nil || *s.Loss != 0.25 {
		t.Errorf("loss and total: %+v, %v", s, ok)
	}
}

func TestStripANSI(t *testing.T) {
	tests := []struct{ in, want string }{
		{"plain", "plain"},
		{"\x1b[1;32mgreen\x1b[0m", "green"},
		{"\x1b[?25lhidden cursor\x1b[?25h", "hidden cursor"},
		{"\x1b]0;title\x07text", "text"},
		{"\x1b]8;;http://x\x1b\\link\x1b]8;;\x1b\\", "link"},
		{"a\x1bcb", "ab"},
		{"tab\tcr\rbell\x07", "tab\tcr\rbell"},
		{"cut\x1b[", "cut"},
		{"cut\x1b", "cut"},
		{"█▌", "█▌"},
	}
	for _, tc := range tests {
		if got := stripANSI(tc.in); got != tc.want {
			t.Errorf("stripANSI(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// FuzzParse feeds arbitrary lines (two per input, the second later or
// earlier) to parsers with and without a user regex: nothing panics and
// every Step is sane.
func FuzzParse(f *testing.F) {
	seeds := []string{
		" 45%|████▌     | 450/1000 [00:12<00:15, 36.51it/s]",
		"\r 10%|█ | 100/1000 [00:03<00:27, 33.0it/s]\r 11%|█ | 110/1000 [00:03<00:26, 1e309it/s]",
		"450it [00:12, 36.51it/s]",
		" 45%| | 450/1000 [18:45<22:55, 0.00s/it]",
		"120/1000 [====>.....] - ETA: 5s",
		" 120/1000 ━━━━ 2s 0ms/step",
		"Epoch [3/10], Step [120/1000], Loss: 0.5",
		"step 9223372036854775807",
		"step 120 99999999999999999999999999999999999999 it/s",
		"\x1b[1m\x1b]0;t\x07step\x1b[0m 5",
		"\x1b",
	}
	for i, s := range seeds {
		f.Add(s, seeds[(i+1)%len(seeds)], int64(1500))
	}
	users := []*Parser{}
	for _, re := range []string{"", `(?P<step>\d+)`, `(?P<rate>[^ ]+)`, `(?P<step>-?\d+) (?P<total>\d+) (?P<rate>\S+)`} {
		p, err := New(re)
		if err != nil {
			f.Fatal(err)
		}
		users = append(users, p)
	}
	f.Fuzz(func(t *testing.T, a, b string, dtMs int64) {
		for _, u := range users {
			p := u.Fresh(0)
			var prev Step
			var have bool
			for i, l := range []string{a, b, b, a} {
				now := t0.Add(time.Duration(int64(i)*dtMs) * time.Millisecond)
				s, ok := p.Parse(l, now)
				if !ok {
					if s != (Step{}) {
						t.Fatalf("no observation but %+v", s)
					}
					continue
				}
				for _, v := range []float64{s.Rate, s.Elapsed, s.StepSeconds()} {
					if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
						t.Fatalf("%q: insane %+v (%g)", l, s, v)
					}
				}
				if s.Step < 0 || s.Total < 0 || s.Delta < 0 || (!s.HasStep && (s.Step != 0 || s.Delta != 0)) {
					t.Fatalf("%q: insane %+v", l, s)
				}
				if !s.HasStep && s.Rate == 0 {
					t.Fatalf("%q: observation without a step or a rate: %+v", l, s)
				}
				if s.Delta == 0 && s.Elapsed != 0 && s.HasStep {
					t.Fatalf("%q: elapsed without steps: %+v", l, s)
				}
				if have && prev.HasStep && s.HasStep && s.Step == prev.Step && !s.Restart {
					t.Fatalf("%q: step %d twice", l, s.Step)
				}
				prev, have = s, true
			}
		}
	})
}
