package main

import (
	"errors"
	"fmt"
	"math"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"go.yaml.in/yaml/v3"
)

// loader reads scavd's settings: defaults, then the config file, then the
// flags given on the command line. It is kept for SIGHUP, which loads again.
type loader struct {
	// path is the config file; empty: none.
	path string
	// optional: a missing file at path is no file (the default path).
	optional bool
	// flags are the values of the flags set on the command line, by name.
	flags map[string][]string
}

// newLoader records which flags of f the user set and where the config file
// is: config when explicit (it must exist; "" is none), else
// DefaultConfigFile when it exists.
func newLoader(f *pflag.FlagSet, config string, explicit bool) loader {
	l := loader{path: config, flags: map[string][]string{}}
	if !explicit {
		l.path, l.optional = DefaultConfigFile, true
	}
	f.Visit(func(fl *pflag.Flag) {
		if _, ok := keyOfFlag[fl.Name]; !ok {
			return // --config, --check-config: not settings
		}
		if sv, ok := fl.Value.(pflag.SliceValue); ok {
			l.flags[fl.Name] = sv.GetSlice()
		} else {
			l.flags[fl.Name] = []string{fl.Value.String()}
		}
	})
	return l
}

// file is the config file this load reads, if any.
func (l loader) file() string {
	if l.optional {
		if _, err := os.Stat(l.path); err != nil {
			return ""
		}
	}
	return l.path
}

// source says where a setting's value came from.
type source string

const (
	fromDefault source = "default"
	fromFile    source = "file"
	fromFlag    source = "flag"
)

// loaded is a load's result: the settings and where each key's value came
// from (with its line, for the file).
type loaded struct {
	settings
	// path is the file read; empty: none.
	path string
	from map[string]source
	line map[string]int
}

// load reads the settings afresh and validates them. The error lists every
// problem found, each naming its key and, for the file, its line.
func (l loader) load() (loaded, error) {
	res := loaded{from: map[string]source{}, line: map[string]int{}}
	fs := pflag.NewFlagSet("scavd", pflag.ContinueOnError)
	bindFlags(fs, &res.settings)
	var errs []error
	res.path = l.file()
	if res.path != "" {
		errs = append(errs, decodeFile(res.path, &res.settings, res.line)...)
		for k := range res.line {
			res.from[k] = fromFile
		}
	}
	names := make([]string, 0, len(l.flags))
	for name := range l.flags {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		v, fl := l.flags[name], fs.Lookup(name)
		var err error
		if sv, ok := fl.Value.(pflag.SliceValue); ok {
			err = sv.Replace(v)
		} else {
			err = fl.Value.Set(v[0])
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("--%s: %w", name, err))
		}
		res.from[keyOfFlag[name]] = fromFlag
	}
	for _, fe := range res.validate() {
		errs = append(errs, res.locate(fe))
	}
	return res, errors.Join(inLineOrder(res.path, errs)...)
}

// inLineOrder puts the problems found in the config file at path first, in
// the order of their lines, and the others (flags) after them as they came.
func inLineOrder(path string, errs []error) []error {
	line := func(err error) int {
		rest, ok := strings.CutPrefix(err.Error(), path+":")
		if !ok || path == "" {
			return math.MaxInt
		}
		n, _, _ := strings.Cut(rest, ":")
		if v, err := strconv.Atoi(n); err == nil {
			return v
		}
		return 0 // the file as a whole
	}
	sort.SliceStable(errs, func(i, j int) bool { return line(errs[i]) < line(errs[j]) })
	return errs
}

// fieldError is a problem with one key's value.
type fieldError struct {
	key string
	err error
}

// locate names where a bad value came from: the file and line, or the flag.
func (r loaded) locate(fe fieldError) error {
	switch r.from[fe.key] {
	case fromFile:
		return fmt.Errorf("%s:%d: %s: %w", r.path, r.line[fe.key], fe.key, fe.err)
	case fromFlag:
		return fmt.Errorf("--%s: %w", flagOfKey(fe.key), fe.err)
	}
	return fmt.Errorf("%s: %w", fe.key, fe.err)
}

// yamlText writes the effective settings as a config file, each key with a
// comment saying where its value came from; derived values are filled in.
func (r loaded) yamlText() (string, error) {
	doc := &yaml.Node{Kind: yaml.MappingNode}
	nested := map[string]*yaml.Node{}
	for _, kv := range r.keys() {
		parent, name := doc, kv.key
		if i := strings.LastIndex(kv.key, "."); i >= 0 {
			prefix := kv.key[:i]
			if nested[prefix] == nil {
				nested[prefix] = &yaml.Node{Kind: yaml.MappingNode}
				doc.Content = append(doc.Content, &yaml.Node{Kind: yaml.ScalarNode, Value: prefix}, nested[prefix])
			}
			parent, name = nested[prefix], kv.key[i+1:]
		}
		value := kv.value
		if d, ok := value.(time.Duration); ok {
			value = d.String()
		}
		comment := string(fromDefault)
		switch r.from[kv.key] {
		case fromFile:
			comment = fmt.Sprintf("%s:%d", r.path, r.line[kv.key])
		case fromFlag:
			comment = "--" + flagOfKey(kv.key)
		}
		switch {
		case kv.key == "socket" && r.Socket == "":
			value, comment = r.socketPath(), "derived from state_dir"
		case kv.key == "node" && r.Node == "":
			h, _ := os.Hostname()
			value, comment = h, "the host name"
		}
		v := &yaml.Node{}
		if err := v.Encode(value); err != nil {
			return "", fmt.Errorf("encode %s: %w", kv.key, err)
		}
		v.LineComment = comment
		parent.Content = append(parent.Content, &yaml.Node{Kind: yaml.ScalarNode, Value: name}, v)
	}
	b, err := yaml.Marshal(doc)
	if err != nil {
		return "", fmt.Errorf("encode settings: %w", err)
	}
	return string(b), nil
}
