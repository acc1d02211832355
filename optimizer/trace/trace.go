// Package trace reads the measured training traces of shared/traces (Pollux,
// AdaptDL and Sia measurements): placements-<type>.csv, scalability-<type>.csv
// and validation-<B>.csv. Columns are found by header name, so their order
// may vary. Every problem is reported as a *ParseError naming the file, line
// and column; the reader never panics on bad input.
package trace

import (
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
)

// StepRow is one throughput measurement: the mean time of an optimizer step
// at a placement and a per-replica (local) batch size.
type StepRow struct {
	// Placement is the digit string of a placements file ("" for
	// scalability rows): one digit per node, the GPUs used on it.
	Placement string
	// Nodes is the number of nodes used.
	Nodes int
	// Replicas is the number of data-parallel workers (GPUs).
	Replicas int
	// LocalBatch is the per-replica batch size.
	LocalBatch float64
	// StepTime is the seconds of one optimizer step.
	StepTime float64
	// SyncTime is the seconds of that step spent in gradient all-reduce.
	SyncTime float64
}

// Packed reports whether the row uses whole nodes of gpusPerNode GPUs, or a
// single node.
func (r StepRow) Packed(gpusPerNode int) bool {
	if r.Nodes == 1 {
		return r.Replicas <= gpusPerNode
	}
	return r.Replicas == r.Nodes*gpusPerNode
}

// ValidationRow is one epoch of a full training run at a fixed total batch.
type ValidationRow struct {
	// Progress is cumulative progress in scale-invariant iterations.
	Progress float64
	// Iteration is the cumulative number of optimizer steps.
	Iteration float64
	// Metric is the validation metric after the epoch.
	Metric float64
	// GradSqr estimates |G|^2 at that point of training.
	GradSqr float64
	// GradVar estimates tr(Sigma) at the smallest batch size.
	GradVar float64
}

// ReadPlacements reads a placements-<type>.csv file. file names the source in
// errors.
func ReadPlacements(r io.Reader, file string) ([]StepRow, error) {
	var rows []StepRow
	err := readCSV(r, file, []string{"placement", "local_bsz", "step_time", "sync_time"}, func(p *rowParser) error {
		pl, col := p.str("placement")
		nodes, reps := len(pl), 0
		if nodes == 0 {
			return p.errAt(col, "placement", fmt.Errorf("%w: empty placement", ErrBadValue))
		}
		for _, c := range pl {
			if c < '1' || c > '9' {
				return p.errAt(col, "placement", fmt.Errorf("%w: placement %q: digits 1-9 expected", ErrBadValue, pl))
			}
			reps += int(c - '0')
		}
		row := StepRow{Placement: pl, Nodes: nodes, Replicas: reps}
		if err := p.stepFields(&row); err != nil {
			return err
		}
		rows = append(rows, row)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return rows, nil
}

// ReadScalability reads a scalability-<type>.csv file.
func ReadScalability(r io.Reader, file string) ([]StepRow, error) {
	var rows []StepRow
	err := readCSV(r, file, []string{"num_nodes", "num_replicas", "local_bsz", "step_time", "sync_time"}, func(p *rowParser) error {
		nodes, err := p.posInt("num_nodes")
		if err != nil {
			return err
		}
		reps, err := p.posInt("num_replicas")
		if err != nil {
			return err
		}
		if reps < nodes {
			return p.errAt(p.col["num_replicas"], "num_replicas",
				fmt.Errorf("%w: %d replicas on %d nodes", ErrInconsistent, reps, nodes))
		}
		row := StepRow{Nodes: nodes, Replicas: reps}
		if err := p.stepFields(&row); err != nil {
			return err
		}
		rows = append(rows, row)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return rows, nil
}

// ReadValidation reads a validation-<B>.csv file. Progress and iteration must
// increase strictly from row to row.
func ReadValidation(r io.Reader, file string) ([]ValidationRow, error) {
	var rows []ValidationRow
	err := readCSV(r, file, []string{"progress", "iteration", "metric", "grad_sqr", "grad_var"}, func(p *rowParser) error {
		var v ValidationRow
		var err error
		if v.Progress, err = p.posFloat("progress"); err != nil {
			return err
		}
		if v.Iteration, err = p.posFloat("iteration"); err != nil {
			return err
		}
		if v.Metric, err = p.float("metric"); err != nil {
			return err
		}
		if v.GradSqr, err = p.nonNegFloat("grad_sqr"); err != nil {
			return err
		}
		if v.GradVar, err = p.nonNegFloat("grad_var"); err != nil {
			return err
		}
		if n := len(rows); n > 0 {
			prev := rows[n-1]
			if v.Progress <= prev.Progress {
				return p.errAt(p.col["progress"], "progress",
					fmt.Errorf("%w: progress %g does not increase (previous %g)", ErrInconsistent, v.Progress, prev.Progress))
			}
			if v.Iteration <= prev.Iteration {
				return p.errAt(p.col["iteration"], "iteration",
					fmt.Errorf("%w: iteration %g does not increase (previous %g)", ErrInconsistent, v.Iteration, prev.Iteration))
			}
		}
		rows = append(rows, v)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return rows, nil
}

type rowParser struct {
	file   string
	line   int
	rec    []string
	col    map[string]int // 0-based field index by name
	reader *csv.Reader
}

func (p *rowParser) errAt(idx int, field string, err error) error {
	return &ParseError{File: p.file, Line: p.line, Column: idx + 1, Field: field, Err: err}
}

func (p *rowParser) str(name string) (string, int) {
	i := p.col[name]
	return strings.TrimSpace(p.rec[i]), i
}

func (p *rowParser) float(name string) (float64, error) {
	s, i := p.str(name)
	v, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return 0, p.errAt(i, name, fmt.Errorf("%w: %q is not a number", ErrBadValue, s))
	}
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return 0, p.errAt(i, name, fmt.Errorf("%w: %q is not finite", ErrBadValue, s))
	}
	return v, nil
}

func (p *rowParser) posFloat(name string) (float64, error) {
	v, err := p.float(name)
	if err != nil {
		return 0, err
	}
	if v <= 0 {
		return 0, p.errAt(p.col[name], name, fmt.Errorf("%w: %g must be positive", ErrBadValue, v))
	}
	return v, nil
}

func (p *rowParser) nonNegFloat(name string) (float64, error) {
	v, err := p.float(name)
	if err != nil {
		return 0, err
	}
	if v < 0 {
		return 0, p.errAt(p.col[name], name, fmt.Errorf("%w: %g must not be negative", ErrBadValue, v))
	}
	return v, nil
}

func (p *rowParser) posInt(name string) (int, error) {
	s, i := p.str(name)
	v, err := strconv.Atoi(s)
	if err != nil {
		return 0, p.errAt(i, name, fmt.Errorf("%w: %q is not an integer", ErrBadValue, s))
	}
	if v <= 0 || v > 1<<20 {
		return 0, p.errAt(i, name, fmt.Errorf("%w: %d out of range [1, %d]", ErrBadValue, v, 1<<20))
	}
	return v, nil
}

// stepFields fills the shared throughput columns of row.
func (p *rowParser) stepFields(row *StepRow) error {
	var err error
	if row.LocalBatch, err = p.posFloat("local_bsz"); err != nil {
		return err
	}
	if row.StepTime, err = p.posFloat("step_time"); err != nil {
		return err
	}
	if row.SyncTime, err = p.nonNegFloat("sync_time"); err != nil {
		return err
	}
	return nil
}

// readCSV reads a headed CSV file and calls fn for every data row.
func readCSV(r io.Reader, file string, required []string, fn func(*rowParser) error) error {
	cr := csv.NewReader(r)
	cr.ReuseRecord = false
	header, err := cr.Read()
	if errors.Is(err, io.EOF) {
		return &ParseError{File: file, Line: 1, Err: fmt.Errorf("%w: no header", ErrEmpty)}
	}
	if err != nil {
		return csvErr(file, err)
	}
	col := make(map[string]int, len(header))
	for i, h := range header {
		h = strings.TrimSpace(strings.TrimPrefix(h, "\ufeff"))
		if _, dup := col[h]; dup {
			return &ParseError{File: file, Line: 1, Column: i + 1, Field: h, Err: fmt.Errorf("%w: %q", ErrDuplicateColumn, h)}
		}
		col[h] = i
	}
	for _, name := range required {
		if _, ok := col[name]; !ok {
			return &ParseError{File: file, Line: 1, Field: name, Err: fmt.Errorf("%w: %q (have %s)", ErrMissingColumn, name, strings.Join(header, ","))}
		}
	}
	p := &rowParser{file: file, col: col, reader: cr}
	n := 0
	for {
		rec, err := cr.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return csvErr(file, err)
		}
		line, _ := cr.FieldPos(0)
		p.line, p.rec = line, rec
		if err := fn(p); err != nil {
			return err
		}
		n++
	}
	if n == 0 {
		return &ParseError{File: file, Line: 2, Err: fmt.Errorf("%w: header but no rows", ErrEmpty)}
	}
	return nil
}

// csvErr converts an encoding/csv error to a ParseError.
func csvErr(file string, err error) error {
	var pe *csv.ParseError
	if errors.As(err, &pe) {
		col := pe.Column
		if errors.Is(pe.Err, csv.ErrFieldCount) {
			col = 0
		}
		return &ParseError{File: file, Line: pe.Line, Column: col, Err: fmt.Errorf("%w: %w", ErrBadValue, pe.Err)}
	}
	return &ParseError{File: file, Err: err}
}
