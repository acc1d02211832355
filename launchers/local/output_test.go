package local

import (
	"bufio"
	"io"
	"os"
	"reflect"
	"strings"
	"testing"
	"testing/iotest"
	"unicode/utf8"
)

func TestSplitLines(t *testing.T) {
	tests := []struct {
		name string
		in   string
		max  int
		want []string
	}{
		{"plain", "a\nbb\n", 8, []string{"a", "bb"}},
		{"no final newline", "a\nbb", 8, []string{"a", "bb"}},
		{"crlf", "a\r\nb\r\n", 8, []string{"a", "b"}},
		{"empty lines", "\n\nx\n", 8, []string{"", "", "x"}},
		{"split long", "abcdefghij\nk\n", 4, []string{"abcd", "efgh", "ij", "k"}},
		{"exact multiple, no empty piece", "abcdefgh\nx\n", 4, []string{"abcd", "efgh", "x"}},
		{"exactly max", "abcd\n", 4, []string{"abcd"}},
		{"rune boundary", "aaé\n", 3, []string{"aa", "é"}},

		{"lone cr ends a line", "a\rb\n", 8, []string{"a", "b"}},
		{"tqdm redraws", "\r  0%|   | 0/9\r 11%|▌  | 1/9\r 22%|█  | 2/9\n", 64,
			[]string{"  0%|   | 0/9", " 11%|▌  | 1/9", " 22%|█  | 2/9"}},
		{"keras redraws, no final newline", "1/3 [=>.]\r2/3 [==>]\r3/3 [===]", 64,
			[]string{"1/3 [=>.]", "2/3 [==>]", "3/3 [===]"}},
		{"trailing cr at EOF", "abc\r", 8, []string{"abc"}},
		{"lone cr only", "\r", 8, nil},
		{"empty lone-cr lines skipped", "\r\r\ra\r\r", 8, []string{"a"}},
		{"cr then crlf", "a\r\r\nb\n", 8, []string{"a", "", "b"}},
		{"newline then cr", "a\n\rb\n", 8, []string{"a", "b"}},
		{"cr at max", "abcd\ref\n", 4, []string{"abcd", "ef"}},
		{"crlf at max", "abcd\r\nef\n", 4, []string{"abcd", "ef"}},
		{"cr just past max", "abcde\rf\n", 4, []string{"abcd", "e", "f"}},
		{"long line with crs", "abcdefghij\rk\r", 4, []string{"abcd", "efgh", "ij", "k"}},
		{"rune boundary before cr", "aaé\rb", 3, []string{"aa", "é", "b"}},
		{"crlf empty lines kept", "a\r\n\r\nb", 8, []string{"a", "", "b"}},
		{"crlf alone", "\r\n", 8, []string{""}},
		{"skipped cr before the last line", "00\r\r\r0", 33, []string{"00", "0"}},
		{"ansi progress", "\x1b[A\r 45%|████▌     | 450/1000\x1b[K\r", 64,
			[]string{"\x1b[A", " 45%|████▌     | 450/1000\x1b[K"}},
	}
	readers := []struct {
		name string
		wrap func(io.Reader) io.Reader
	}{
		{"whole", func(r io.Reader) io.Reader { return r }},
		{"byte at a time", iotest.OneByteReader},
		{"halves", iotest.HalfReader},
	}
	for _, tt := range tests {
		for _, rd := range readers {
			t.Run(tt.name+"/"+rd.name, func(t *testing.T) {
				sc := bufio.NewScanner(rd.wrap(strings.NewReader(tt.in)))
				sc.Buffer(make([]byte, 0, 2), tt.max+1)
				sc.Split(splitLines(tt.max))
				var got []string
				for sc.Scan() {
					got = append(got, sc.Text())
				}
				if err := sc.Err(); err != nil {
					t.Fatal(err)
				}
				if !reflect.DeepEqual(got, tt.want) {
					t.Errorf("got %q, want %q", got, tt.want)
				}
				for _, g := range got {
					if !utf8.ValidString(g) {
						t.Errorf("piece %q is not valid UTF-8", g)
					}
					if len(g) > tt.max {
						t.Errorf("piece %q is longer than %d", g, tt.max)
					}
				}
			})
		}
	}
}

// scanAll splits in with splitLines(max) reading through wrap.
func scanAll(in string, max int, wrap func(io.Reader) io.Reader) ([]string, error) {
	sc := bufio.NewScanner(wrap(strings.NewReader(in)))
	sc.Buffer(make([]byte, 0, 2), max+1)
	sc.Split(splitLines(max))
	var got []string
	for sc.Scan() {
		got = append(got, sc.Text())
	}
	return got, sc.Err()
}

// FuzzSplitLines checks that how the input arrives does not change the lines,
// that no piece is too long, and that only line ends are dropped.
func FuzzSplitLines(f *testing.F) {
	for _, s := range []string{"a\nb", "a\r\nb\rc\r", "\r\r\n\n\r", "abcdefgh\r\nij", "aaé\rb", "\r 45%|████▌| 450/1000\r", "00\r\r\r0", "a\r\nb\r"} {
		f.Add(s, 4)
	}
	f.Fuzz(func(t *testing.T, in string, max int) {
		if max < 1 || max > 64 {
			max = 1 + (max%64+64)%64
		}
		whole, err := scanAll(in, max, func(r io.Reader) io.Reader { return r })
		if err != nil {
			t.Fatal(err)
		}
		bytewise, err := scanAll(in, max, iotest.OneByteReader)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(whole, bytewise) {
			t.Fatalf("whole %q, byte at a time %q", whole, bytewise)
		}
		strip := strings.NewReplacer("\r", "", "\n", "")
		if got, want := strings.Join(whole, ""), strip.Replace(in); got != want {
			t.Fatalf("content %q, want %q", got, want)
		}
		for _, g := range whole {
			if len(g) > max {
				t.Fatalf("piece %q longer than %d", g, max)
			}
		}
	})
}

func TestReadLinesProgressBar(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	go func() {
		defer w.Close()
		for _, s := range []string{"start\n", "\r  0%|   | 0/3", "\r 33%|█  | 1/3", "\r 67%|██ | 2/3", "\r100%|███| 3/3", "\n", "done\r\n"} {
			if _, err := w.WriteString(s); err != nil {
				return
			}
		}
	}()
	var got []string
	if err := readLines(r, DefaultMaxLineBytes, func(l string) { got = append(got, l) }); err != nil {
		t.Fatal(err)
	}
	want := []string{"start", "  0%|   | 0/3", " 33%|█  | 1/3", " 67%|██ | 2/3", "100%|███| 3/3", "done"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %q, want %q", got, want)
	}
}
