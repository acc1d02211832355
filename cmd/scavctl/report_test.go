package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/scavenger-ml/scavenger/report"
	"github.com/scavenger-ml/scavenger/report/reporttest"
)

func TestReportFormat(t *testing.T) {
	for _, c := range []struct {
		format, output string
		outputSet      bool
		want           string
		err            bool
	}{
		{"", "table", false, "text", false},
		{"", "json", true, "json", false},
		{"", "table", true, "text", false},
		{"html", "table", false, "html", false},
		{"svg", "table", false, "svg", false},
		{"png", "table", false, "png", false},
		{"json", "json", true, "json", false},
		{"html", "json", true, "", true},
		{"pdf", "table", false, "", true},
		{"", "yaml", true, "", true},
	} {
		got, err := reportFormat(c.format, c.output, c.outputSet)
		if got != c.want || (err != nil) != c.err {
			t.Errorf("--format %q -o %q (set %v): %q, %v; want %q, error %v", c.format, c.output, c.outputSet, got, err, c.want, c.err)
		}
	}
}

// TestWriteReport writes the synthetic job's report in each format: text
// and JSON to standard output, HTML into a directory, SVG as one file per
// figure and the whole.
func TestWriteReport(t *testing.T) {
	j, recs, now := reporttest.SyntheticJob()
	rep := report.Make(j, recs, now)
	var stdout, stderr bytes.Buffer
	a := &app{stdout: &stdout, stderr: &stderr}
	if err := a.writeReport(rep, "text", ""); err != nil || !strings.HasPrefix(stdout.String(), "Job "+j.ID) {
		t.Fatalf("text: %v\n%s", err, stdout.String())
	}
	stdout.Reset()
	if err := a.writeReport(rep, "json", "-"); err != nil || !strings.Contains(stdout.String(), `"job": "`+j.ID+`"`) {
		t.Fatalf("json: %v\n%s", err, stdout.String())
	}
	dir := t.TempDir()
	if err := a.writeReport(rep, "html", dir); err != nil {
		t.Fatal(err)
	}
	page, err := os.ReadFile(filepath.Join(dir, j.ID+"-report.html"))
	if err != nil {
		t.Fatal(err)
	}
	reporttest.CheckHTML(t, string(page), 8)
	figs := filepath.Join(dir, "figs") + "/"
	if err := a.writeReport(rep, "svg", figs); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"timeline", "steptime", "throughput", "loss", "noise", "cost", "finish", "pareto", "report"} {
		if _, err := os.Stat(filepath.Join(figs, j.ID+"-"+name+".svg")); err != nil {
			t.Error(err)
		}
	}
}
