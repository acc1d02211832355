package api

import (
	"strings"
	"testing"
	"time"
)

func TestPickAJobByIDPrefixOrName(t *testing.T) {
	at := func(m int) time.Time { return time.Date(2026, 12, 1, 9, m, 0, 0, time.UTC) }
	jobs := []JobSummary{
		{ID: "train-aaa111", Name: "train", Created: at(1)},
		{ID: "train-aab222", Name: "train", Created: at(3)},
		{ID: "eval-ccc333", Name: "eval", Created: at(2)},
		{ID: "x-ddd444", Name: "train-aab", Created: at(4)},
	}
	for _, c := range []struct {
		ref, want, note, err string
	}{
		{"eval-ccc333", "eval-ccc333", "", ""},
		{"eval", "eval-ccc333", "", ""},
		{"ev", "eval-ccc333", "", ""},
		{"train", "train-aab222", "2 jobs are named train; train-aab222 is the newest", ""},
		{"train-aa", "", "", "2 jobs' ids start with it"},
		{"train-aab", "x-ddd444", "", ""}, // a name beats an id prefix
		{"nope", "", "", "no job of yours has that id, id prefix or name"},
	} {
		j, note, err := Pick(jobs, c.ref)
		if j.ID != c.want || !strings.Contains(note, c.note) || (c.err == "") != (err == nil) || err != nil && !strings.Contains(err.Error(), c.err) {
			t.Errorf("Pick(%q) = %s, %q, %v; want %s, %q, %q", c.ref, j.ID, note, err, c.want, c.note, c.err)
		}
	}
}
