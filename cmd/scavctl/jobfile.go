package main

import (
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"

	"github.com/spf13/pflag"
	"go.yaml.in/yaml/v3"
)

// A job file (scavctl run -f job.yaml) holds run's flags as keys, without
// the dashes ("batch-size" or "batch_size"), and the command:
//
//	name: cnn
//	workers: 1:2
//	batch-size: 32:128
//	env: {OMP_NUM_THREADS: 1}
//	command: [/usr/bin/python3, examples/cnn.py]
//
// A flag given on the command line wins over its key, and a command after
// -- over the file's.

// jobFileCommand is the key of the command in a job file.
const jobFileCommand = "command"

// applyJobFile sets the flags of fs that the file at path names and the
// command line did not, and returns the file's command. Errors name the
// file, the line and the fix.
func applyJobFile(fs *pflag.FlagSet, path string) ([]string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("-f: %w", err)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(b, &doc); err != nil {
		return nil, fmt.Errorf("-f %s: %w", path, err)
	}
	if len(doc.Content) == 0 {
		return nil, fmt.Errorf("-f %s: the file is empty; give run's flags as keys and the command, e.g. workers: 2 and command: [python3, train.py]", path)
	}
	m := doc.Content[0]
	if m.Kind != yaml.MappingNode {
		return nil, fmt.Errorf("-f %s:%d: want a mapping of run's flags (workers: 2, ...) and command", path, m.Line)
	}
	var command []string
	var errs []error
	if dups := duplicateKeys(m, "_", "-"); len(dups) > 0 {
		for _, d := range dups {
			errs = append(errs, fmt.Errorf("%s:%s", path, d))
		}
		return nil, errors.Join(errs...)
	}
	for i := 0; i+1 < len(m.Content); i += 2 {
		k, v := m.Content[i], m.Content[i+1]
		key := strings.ReplaceAll(k.Value, "_", "-")
		at := fmt.Sprintf("%s:%d: %s", path, k.Line, k.Value)
		if key == jobFileCommand {
			if command, err = commandOf(v); err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", at, err))
			}
			continue
		}
		fl := fs.Lookup(key)
		if fl == nil || key == "file" || key == "help" {
			errs = append(errs, fmt.Errorf("%s: no such key; the keys are run's flags (%s) and %s", at, strings.Join(jobFileKeys(fs), ", "), jobFileCommand))
			continue
		}
		if fl.Changed {
			continue // the command line wins
		}
		values, err := flagValues(key, v)
		if err == nil {
			for _, s := range values {
				if err = fs.Set(key, s); err != nil {
					break
				}
			}
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", at, err))
		}
	}
	return command, errors.Join(errs...)
}

// flagValues are the strings to set flag key to: a scalar's, a list's
// items, or for env a mapping's KEY=VALUE pairs.
func flagValues(key string, v *yaml.Node) ([]string, error) {
	switch v.Kind {
	case yaml.ScalarNode:
		return []string{v.Value}, nil
	case yaml.SequenceNode:
		return scalars(v, "a list of values")
	case yaml.MappingNode:
		if key != "env" {
			return nil, errors.New("want a value or a list, not a mapping (only env is a mapping)")
		}
		var out []string
		for i := 0; i+1 < len(v.Content); i += 2 {
			out = append(out, v.Content[i].Value+"="+v.Content[i+1].Value)
		}
		return out, nil
	}
	return nil, errors.New("want a value or a list")
}

// commandOf is the command of a job file: a list of arguments, or a string
// split into words as a shell would (quotes, backslashes; no expansions).
func commandOf(v *yaml.Node) ([]string, error) {
	switch v.Kind {
	case yaml.SequenceNode:
		return scalars(v, "a list of arguments, e.g. [python3, train.py, --epochs, 3]")
	case yaml.ScalarNode:
		return splitWords(v.Value)
	}
	return nil, errors.New("want a list of arguments, e.g. [python3, train.py], or one line, e.g. python3 train.py --epochs 3")
}

// scalars is the values of a list of scalars; what names the list in the
// error about an item that is not one.
func scalars(list *yaml.Node, what string) ([]string, error) {
	out := make([]string, 0, len(list.Content))
	for _, it := range list.Content {
		if it.Kind != yaml.ScalarNode {
			return nil, fmt.Errorf("line %d: want %s", it.Line, what)
		}
		out = append(out, it.Value)
	}
	return out, nil
}

// splitWords splits s into words as sh does: blanks separate them, quotes
// and backslashes keep what they enclose or escape. It expands nothing.
func splitWords(s string) ([]string, error) {
	var words []string
	var w strings.Builder
	inWord, quote, escaped := false, rune(0), false
	for _, r := range s {
		switch {
		case escaped:
			w.WriteRune(r)
			escaped = false
		case r == '\\' && quote != '\'':
			escaped, inWord = true, true
		case quote != 0 && r == quote:
			quote = 0
		case quote != 0:
			w.WriteRune(r)
		case r == '\'' || r == '"':
			quote, inWord = r, true
		case r == ' ' || r == '\t' || r == '\n':
			if inWord {
				words = append(words, w.String())
				w.Reset()
				inWord = false
			}
		default:
			w.WriteRune(r)
			inWord = true
		}
	}
	switch {
	case quote != 0:
		return nil, fmt.Errorf("unclosed %c in %q", quote, s)
	case escaped:
		return nil, fmt.Errorf("a backslash ends %q", s)
	}
	if inWord {
		words = append(words, w.String())
	}
	return words, nil
}

// jobFileKeys are the flags a job file may set.
func jobFileKeys(fs *pflag.FlagSet) []string {
	var keys []string
	fs.VisitAll(func(f *pflag.Flag) {
		if f.Name != "file" && f.Name != "help" {
			keys = append(keys, f.Name)
		}
	})
	sort.Strings(keys)
	return keys
}

// duplicateKeys names the keys given twice in mapping m and in the
// mappings under it ("LINE: key given twice, first at line N"), each key
// compared with old replaced by new (the job file's a_b is a-b): a YAML
// decoder keeps one of them without a word.
func duplicateKeys(m *yaml.Node, old, new string) []string {
	var out []string
	first := map[string]int{}
	for i := 0; i+1 < len(m.Content); i += 2 {
		k, v := m.Content[i], m.Content[i+1]
		key := strings.ReplaceAll(k.Value, old, new)
		if line, ok := first[key]; ok {
			out = append(out, fmt.Sprintf("%d: %s given twice (first at line %d): give each key once", k.Line, k.Value, line))
		} else {
			first[key] = k.Line
		}
		if v.Kind == yaml.MappingNode {
			out = append(out, duplicateKeys(v, "", "")...)
		}
	}
	return out
}
