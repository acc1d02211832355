package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/term"

	"github.com/scavenger-ml/scavenger/optimizer/plot"
	"github.com/scavenger-ml/scavenger/report"
)

// writeReport writes rep in format to out: a file, a directory, or "-"
// (standard output); empty is standard output for text and json and
// JOB-report.EXT otherwise.
func (a *app) writeReport(rep report.JobReport, format, out string) error {
	switch format {
	case "text", "json":
		w, done, err := a.openOut(out, "")
		if err != nil {
			return err
		}
		if format == "json" {
			enc := jsonIndent(w)
			err = enc.Encode(rep)
		} else {
			err = rep.Print(w)
		}
		return done(err)
	}
	fig, err := plot.NewFigure(rep.Figures())
	if err != nil {
		return err
	}
	panels := fig.Panels
	name := rep.Job + "-report." + format
	if st, err := os.Stat(out); out != "" && out != "-" && (strings.HasSuffix(out, "/") || err == nil && st.IsDir()) {
		if err := os.MkdirAll(out, 0o755); err != nil {
			return fmt.Errorf("create report directory %s: %w", out, err)
		}
		if format != "html" {
			for _, p := range panels {
				path := filepath.Join(out, rep.Job+"-"+p.Name+"."+format)
				if err := writeFile(path, func(w io.Writer) error { return plot.WritePanel(w, p, format) }); err != nil {
					return err
				}
				fmt.Fprintln(a.stderr, "scavctl: wrote", path)
			}
		}
		out = filepath.Join(out, name)
	} else if out == "" {
		out = name
	}
	w, done, err := a.openOut(out, format)
	if err != nil {
		return err
	}
	if format == "html" {
		err = rep.HTML(w, panels)
	} else if len(panels) == 0 {
		err = fmt.Errorf("report of %s: %w", rep.Job, plot.ErrNoData)
	} else {
		err = plot.WriteFigure(w, fig, format)
	}
	if err = done(err); err == nil && out != "-" {
		fmt.Fprintln(a.stderr, "scavctl: wrote", out)
	}
	return err
}

// jsonIndent is the encoder scavctl's JSON output uses.
func jsonIndent(w io.Writer) *json.Encoder {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc
}

// isTerminal reports whether w is a terminal.
func isTerminal(w io.Writer) bool {
	f, ok := fileOf(w)
	return ok && term.IsTerminal(int(f.Fd()))
}

// openOut opens path for writing ("" or "-": standard output; a binary
// format refuses a terminal). done closes it and returns the first error.
func (a *app) openOut(path, format string) (io.Writer, func(error) error, error) {
	if path == "" || path == "-" {
		if format == "png" && isTerminal(a.stdout) {
			return nil, nil, fmt.Errorf("not writing a PNG to a terminal: give --out FILE")
		}
		out := a.stdout
		if format == "png" {
			out = rawOf(out) // binary: written as it is
		}
		return out, func(err error) error { return err }, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, nil, fmt.Errorf("create report %s: %w", path, err)
	}
	return f, func(err error) error {
		if cerr := f.Close(); err == nil && cerr != nil {
			err = fmt.Errorf("write report %s: %w", path, cerr)
		}
		return err
	}, nil
}

// writeFile creates path and writes it with fill.
func writeFile(path string, fill func(io.Writer) error) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("create %s: %w", path, err)
	}
	err = fill(f)
	if cerr := f.Close(); err == nil && cerr != nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}
