package main

import "testing"

func TestClean(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"plain text\twith tab\n", "plain text\twith tab\n"},
		{"a\rb", `a\rb`},
		{"\x1b]0;pwned\x07title", `\x1b]0;pwned\x07title`},
		{"\x1b[2J\x1b[H", `\x1b[2J\x1b[H`},
		{"\x1b[1;31mred\x1b[0m", "\x1b[1;31mred\x1b[0m"},
		{"\u009b31m", `\u009b31m`},
		{"bad \x9b byte", `bad \x9b byte`},
		{"ünïcødé ✓", "ünïcødé ✓"},
		{"\x7f\x00", `\x7f\x00`},
	} {
		if got := cleanString(c.in); got != c.want {
			t.Errorf("clean(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}
