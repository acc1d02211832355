package local

import (
	"bufio"
	"reflect"
	"strings"
	"testing"
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
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sc := bufio.NewScanner(strings.NewReader(tt.in))
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
			}
		})
	}
}
