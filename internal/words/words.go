// Package words is how Scavenger says things to people: a count with its
// noun in the right number, a configuration in its one compact notation
// and in a sentence, an approximate duration, and a policy's decision in
// plain English (decision.go). The daemon (its events and job records),
// scavctl and the reports take their words from here, so that each thing
// is said one way everywhere.
//
// The notation of a configuration is K workers x global batch B, "2x128",
// after the machine type when the job has one, "loc.half 2x128"; a batch
// the script chooses itself is "-" ("2x-"), and a configuration spread
// over several nodes says so, "aws 8x1024 (2 nodes)".
package words

import (
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"

	"github.com/scavenger-ml/scavenger/plugins"
)

// Count is n with noun in the right number: "1 worker", "2 workers",
// "0 relaunches" (nouns ending in s, x, ch or sh take "es").
func Count[N ~int | ~int64](n N, noun string) string {
	if n == 1 || n == -1 {
		return fmt.Sprintf("%d %s", n, noun)
	}
	return fmt.Sprintf("%d %s", n, Plural(noun))
}

// Plural is the plural of a regular English noun.
func Plural(noun string) string {
	for _, end := range []string{"s", "x", "ch", "sh"} {
		if strings.HasSuffix(noun, end) {
			return noun + "es"
		}
	}
	return noun + "s"
}

// Notation is the one compact notation of a configuration (see the
// package comment): "2x128", "loc.half 2x128", "2x-".
func Notation(typ string, workers, batch int) string {
	b := "-"
	if batch > 0 {
		b = fmt.Sprint(batch)
	}
	s := fmt.Sprintf("%dx%s", workers, b)
	if typ != "" {
		s = typ + " " + s
	}
	return s
}

// NotationOn is Notation with the nodes when there are more than one:
// "aws 8x1024 (2 nodes)".
func NotationOn(typ string, nodes, workers, batch int) string {
	s := Notation(typ, workers, batch)
	if nodes > 1 {
		s += " (" + Count(nodes, "node") + ")"
	}
	return s
}

// ConfigNotation is cfg in the notation.
func ConfigNotation(cfg plugins.Config) string {
	return NotationOn(cfg.MachineType, cfg.Nodes, cfg.Workers, cfg.GlobalBatch)
}

// Config says cfg in a sentence: "2 workers × batch 128", "1 worker × the
// script's own batch", "2 workers × batch 128 on loc.half (spot)".
func Config(cfg plugins.Config) string {
	s := Count(cfg.Workers, "worker") + " × "
	if cfg.GlobalBatch > 0 {
		s += fmt.Sprintf("batch %d", cfg.GlobalBatch)
	} else {
		s += "the script's own batch"
	}
	if cfg.MachineType != "" {
		s += " on " + cfg.MachineType
		if cfg.Market != "" {
			s += " (" + cfg.Market + ")"
		}
	}
	if cfg.Nodes > 1 {
		s += " over " + Count(cfg.Nodes, "node")
	}
	return s
}

// About is an approximate duration of s seconds: "~40 s", "~3 min",
// "~2.5 h", "~3 days".
func About(s float64) string {
	switch {
	case math.IsNaN(s) || s < 0:
		return "?"
	case s < 90:
		return fmt.Sprintf("~%.0f s", s)
	case s < 90*60:
		return fmt.Sprintf("~%.0f min", s/60)
	case s < 48*3600:
		return "~" + trim(s/3600) + " h"
	}
	return "~" + trim(s/86400) + " days"
}

// trim writes v with one decimal, without a trailing ".0".
func trim(v float64) string {
	return strings.TrimSuffix(fmt.Sprintf("%.1f", v), ".0")
}

// candidateRe is the optimizer's own form of a candidate configuration,
// TYPE:NODES:WORKERS:BATCH ("aws:1:4:512"), as its policies' reasons write it.
var candidateRe = regexp.MustCompile(`\b([A-Za-z][A-Za-z0-9_.-]*):(\d+):(\d+):(\d+)\b`)

// Renotate rewrites the configurations in a policy's reason into the
// notation: "least cost: aws:1:4:512" -> "least cost: aws 4x512".
func Renotate(s string) string {
	return candidateRe.ReplaceAllStringFunc(s, func(m string) string {
		p := candidateRe.FindStringSubmatch(m)
		n, _ := strconv.Atoi(p[2])
		k, _ := strconv.Atoi(p[3])
		b, _ := strconv.Atoi(p[4])
		return NotationOn(p[1], n, k, b)
	})
}

// ParseNotation reads a configuration in the notation, "[TYPE ]KxB", with
// the type required when needType; TYPE:K:B is read too.
func ParseNotation(s string, needType bool) (typ string, workers, batch int, err error) {
	bad := fmt.Errorf("%q is not a configuration in the notation TYPE KxB (e.g. \"aws 4x512\": 4 workers, global batch 512, on aws)", s)
	var kb string
	if t, rest, ok := strings.Cut(strings.TrimSpace(s), " "); ok {
		typ, kb = t, strings.TrimSpace(rest)
	} else if parts := strings.Split(s, ":"); len(parts) == 3 {
		typ, kb = parts[0], parts[1]+"x"+parts[2]
	} else {
		kb = s
	}
	k, b, ok := strings.Cut(kb, "x")
	if !ok || needType && typ == "" {
		return "", 0, 0, bad
	}
	var err1, err2 error
	workers, err1 = strconv.Atoi(k)
	batch, err2 = strconv.Atoi(b)
	if err1 != nil || err2 != nil || workers < 1 || batch < 1 {
		return "", 0, 0, bad
	}
	return typ, workers, batch, nil
}
