package main

import (
	"errors"
	"fmt"
	"os"
	"reflect"
	"regexp"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// decodeFile decodes the yaml file at path over s. It records the line of
// each key it sets in lines and returns every problem: syntax, unknown keys
// (with their line), values of the wrong type.
func decodeFile(path string, s *settings, lines map[string]int) []error {
	b, err := os.ReadFile(path)
	if err != nil {
		return []error{fmt.Errorf("read config: %w", err)}
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(b, &doc); err != nil {
		return []error{fmt.Errorf("%s:%s", path, lineRE.ReplaceAllString(" "+strings.TrimPrefix(err.Error(), "yaml: "), "$1:"))}
	}
	if len(doc.Content) == 0 {
		return nil // an empty file: all defaults
	}
	root := doc.Content[0]
	if root.Kind != yaml.MappingNode {
		return []error{fmt.Errorf("%s:%d: want a mapping of keys to values", path, root.Line)}
	}
	errs := checkKeys(path, "", root, reflect.TypeOf(*s), lines)
	if err := root.Decode(s); err != nil {
		var te *yaml.TypeError
		if !errors.As(err, &te) {
			return append(errs, fmt.Errorf("%s: %w", path, err))
		}
		keyAt := map[string]string{}
		for k, n := range lines {
			keyAt[strconv.Itoa(n)] = k
		}
		for _, e := range te.Errors {
			// "line 5: cannot unmarshal ..." -> "<path>:5: step_retention: cannot unmarshal ..."
			if m := lineRE.FindStringSubmatch(e); m != nil && keyAt[m[1]] != "" {
				e = m[1] + ": " + keyAt[m[1]] + ":" + e[len(m[0]):]
			} else {
				e = lineRE.ReplaceAllString(e, "$1:")
			}
			errs = append(errs, fmt.Errorf("%s:%s", path, e))
		}
	}
	return errs
}

var lineRE = regexp.MustCompile(`^ ?line (\d+):`)

// checkKeys reports the keys of the mapping m that t has no field for, by
// their dotted name and line, and records the line of each known key.
func checkKeys(path, prefix string, m *yaml.Node, t reflect.Type, lines map[string]int) []error {
	fields := map[string]reflect.Type{}
	for i := 0; i < t.NumField(); i++ {
		if tag := strings.Split(t.Field(i).Tag.Get("yaml"), ",")[0]; tag != "" && tag != "-" {
			fields[tag] = t.Field(i).Type
		}
	}
	var errs []error
	for i := 0; i+1 < len(m.Content); i += 2 {
		k, v := m.Content[i], m.Content[i+1]
		key := prefix + k.Value
		ft, ok := fields[k.Value]
		if !ok {
			errs = append(errs, fmt.Errorf("%s:%d: unknown key %q", path, k.Line, key))
			continue
		}
		if _, dup := lines[key]; dup {
			errs = append(errs, fmt.Errorf("%s:%d: key %q given twice", path, k.Line, key))
		}
		lines[key] = k.Line
		if ft.Kind() == reflect.Struct && ft != durationType && v.Kind == yaml.MappingNode {
			errs = append(errs, checkKeys(path, key+".", v, ft, lines)...)
		}
	}
	return errs
}
