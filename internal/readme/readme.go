// Package readme reads README.md's fenced code blocks and the commands in
// them, for what runs the README as written: TestReadmeRunsAsWritten and
// tools/walkthrough, which records a new user's walk through it
// (docs/walkthrough.md).
package readme

import (
	"bufio"
	"bytes"
	"strings"
)

// Block is a fenced code block of README.md.
type Block struct {
	Section string // the "## " heading it is under
	Lang    string // its info string: sh, console, python, ...
	Text    string // its lines, the indentation of a list item removed
}

// Blocks returns the fenced code blocks of a markdown text, in order.
func Blocks(data []byte) []Block {
	var blocks []Block
	var cur *Block
	var lines []string
	section, indent := "", ""
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		line := sc.Text()
		trimmed := strings.TrimLeft(line, " ")
		switch {
		case cur == nil && strings.HasPrefix(line, "## "):
			section = strings.TrimPrefix(line, "## ")
		case cur == nil && strings.HasPrefix(trimmed, "```"):
			cur, indent, lines = &Block{Section: section, Lang: strings.TrimPrefix(trimmed, "```")}, line[:len(line)-len(trimmed)], nil
		case cur != nil && strings.HasPrefix(trimmed, "```"):
			cur.Text = strings.Join(lines, "\n") + "\n"
			blocks = append(blocks, *cur)
			cur = nil
		case cur != nil:
			lines = append(lines, strings.TrimPrefix(line, indent))
		}
	}
	return blocks
}

// Command is one command of a block and the output README shows for it.
type Command struct {
	Line, Shown string
}

// Commands splits a block into its commands: in a console block the lines
// after "$ " (with the lines up to the next one as what they print), in an
// sh block every line; a trailing backslash continues a line, and a "  # "
// comment is dropped.
func (b Block) Commands() []Command {
	var cmds []Command
	cont := false
	for _, line := range strings.Split(strings.TrimSuffix(b.Text, "\n"), "\n") {
		if b.Lang == "console" && !cont {
			cmd, ok := strings.CutPrefix(line, "$ ")
			if !ok {
				if len(cmds) > 0 {
					cmds[len(cmds)-1].Shown += line + "\n"
				}
				continue
			}
			line = cmd
		}
		if i := strings.Index(line, "  # "); i >= 0 {
			line = line[:i]
		}
		line = strings.TrimSpace(line)
		switch {
		case cont:
			cmds[len(cmds)-1].Line += " " + strings.TrimSpace(strings.TrimSuffix(line, "\\"))
		case line != "":
			cmds = append(cmds, Command{Line: strings.TrimSpace(strings.TrimSuffix(line, "\\"))})
		}
		cont = strings.HasSuffix(line, "\\")
	}
	return cmds
}

// Runnable reports whether a new user runs b as it stands: the install of
// the python client, the console sessions, and the commands of the
// optimizer and "moving" sections (the others are code to adapt, or need a
// cluster, root or systemd: they have tests of their own).
func (b Block) Runnable() bool {
	switch {
	case b.Lang == "sh" && strings.Contains(b.Text, "pip install ./python"):
		return true
	case b.Lang == "console":
		return true
	}
	return b.Lang == "sh" && (b.Section == "The optimizer, on measured GPU traces" || b.Section == "Letting Scavenger move the job")
}

// PythonAPI reports whether b is the python API's example (it runs with
// the python client installed and a scavd in the background).
func (b Block) PythonAPI() bool {
	return b.Lang == "python" && strings.Contains(b.Text, "scavenger.run(")
}
