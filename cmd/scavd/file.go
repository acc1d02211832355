package main

import (
	"errors"
	"fmt"
	"os"
	"reflect"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// decodeFile decodes the yaml file at path over s. It records the line of
// each key it sets in lines and returns every problem, each at its line:
// syntax, unknown keys, keys given twice, values of the wrong type.
func decodeFile(path string, s *settings, lines map[string]int) []error {
	b, err := os.ReadFile(path)
	if err != nil {
		return []error{fmt.Errorf("read config: %w", err)}
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(b, &doc); err != nil {
		return []error{syntaxError(path, err)}
	}
	if len(doc.Content) == 0 {
		return nil // an empty file: all defaults
	}
	root := doc.Content[0]
	if root.Kind != yaml.MappingNode {
		return []error{fmt.Errorf("%s:%d: want a mapping of keys to values", path, root.Line)}
	}
	return decodeKeys(path, "", root, reflect.ValueOf(s).Elem(), lines)
}

// syntaxError names the file (and line) of a yaml syntax error. yaml.v3
// types only its decoding errors (TypeError); a syntax error is text:
// "yaml: line N: what", or "yaml: what" when it has no line.
func syntaxError(path string, err error) error {
	what := strings.TrimPrefix(err.Error(), "yaml: ")
	if rest, ok := strings.CutPrefix(what, "line "); ok {
		if n, detail, ok := strings.Cut(rest, ": "); ok {
			if _, err := strconv.Atoi(n); err == nil {
				return fmt.Errorf("%s:%s: %s", path, n, detail)
			}
		}
	}
	return fmt.Errorf("%s: %s", path, what)
}

// decodeKeys decodes the mapping m over the struct v key by key, so that
// every problem is named by its dotted key and the line of its node: a key
// v has no field for, a key given twice, a value of the wrong type. It
// records the line of each known key in lines.
func decodeKeys(path, prefix string, m *yaml.Node, v reflect.Value, lines map[string]int) []error {
	fields := map[string]reflect.Value{}
	for i := 0; i < v.NumField(); i++ {
		if tag := strings.Split(v.Type().Field(i).Tag.Get("yaml"), ",")[0]; tag != "" && tag != "-" {
			fields[tag] = v.Field(i)
		}
	}
	var errs []error
	for i := 0; i+1 < len(m.Content); i += 2 {
		k, val := m.Content[i], m.Content[i+1]
		key := prefix + k.Value
		f, ok := fields[k.Value]
		if !ok {
			errs = append(errs, fmt.Errorf("%s:%d: unknown key %q", path, k.Line, key))
			continue
		}
		if first, dup := lines[key]; dup {
			errs = append(errs, fmt.Errorf("%s:%d: %s: mapping key %q already defined at line %d", path, k.Line, key, k.Value, first))
			continue
		}
		lines[key] = k.Line
		if f.Kind() == reflect.Struct && f.Type() != durationType && val.Kind == yaml.MappingNode {
			errs = append(errs, decodeKeys(path, key+".", val, f, lines)...)
			continue
		}
		errs = append(errs, decodeValue(path, key, val, f)...)
	}
	return errs
}

// decodeValue decodes val, the value of key, into out. What yaml cannot
// decode (its TypeError) is reported at the line of its node: the value's,
// or in a list each wrong element's.
func decodeValue(path, key string, val *yaml.Node, out reflect.Value) []error {
	err := val.Decode(out.Addr().Interface())
	var te *yaml.TypeError
	switch {
	case err == nil:
		return nil
	case !errors.As(err, &te):
		return []error{fmt.Errorf("%s:%d: %s: %w", path, val.Line, key, err)}
	case val.Kind == yaml.SequenceNode && out.Kind() == reflect.Slice:
		var errs []error
		for _, el := range val.Content {
			errs = append(errs, decodeValue(path, key, el, reflect.New(out.Type().Elem()).Elem())...)
		}
		if len(errs) > 0 {
			return errs
		}
	}
	errs := make([]error, 0, len(te.Errors))
	for _, e := range te.Errors {
		// Each of yaml's says the line it is about, val's here.
		e = strings.TrimPrefix(e, fmt.Sprintf("line %d: ", val.Line))
		errs = append(errs, fmt.Errorf("%s:%d: %s: %s", path, val.Line, key, e))
	}
	return errs
}
