package trace

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"sort"
	"strconv"
	"strings"
)

// Validation is one full training run of an application at a total batch.
type Validation struct {
	// Batch is the total (global) batch size B of the run.
	Batch int
	// Rows are the epochs of the run, in order.
	Rows []ValidationRow
}

// Final returns the progress reached by the last row.
func (v Validation) Final() float64 { return v.Rows[len(v.Rows)-1].Progress }

// App holds every trace of one application.
type App struct {
	// Name is the application (the directory's base name).
	Name string
	// Placements are the rows of placements-<type>.csv by machine type.
	Placements map[string][]StepRow
	// Scalability are the rows of scalability-<type>.csv by machine type.
	Scalability map[string][]StepRow
	// Validations are the runs of validation-<B>.csv, by increasing batch.
	Validations []Validation
}

// Types returns the machine types with any throughput rows, sorted.
func (a *App) Types() []string {
	seen := map[string]bool{}
	for t := range a.Placements {
		seen[t] = true
	}
	for t := range a.Scalability {
		seen[t] = true
	}
	out := make([]string, 0, len(seen))
	for t := range seen {
		out = append(out, t)
	}
	sort.Strings(out)
	return out
}

// TargetProgress is the progress at which a job of this application is done:
// the smallest final progress among its validation runs.
func (a *App) TargetProgress() float64 {
	best := 0.0
	for i, v := range a.Validations {
		if f := v.Final(); i == 0 || f < best {
			best = f
		}
	}
	return best
}

// LoadApp reads the traces of one application from dir inside fsys. When
// types is empty every machine type found is loaded; otherwise exactly those
// types are loaded and a missing file is an error. Either of a type's two
// throughput files may be absent, not both.
func LoadApp(fsys fs.FS, dir string, types []string) (*App, error) {
	entries, err := fs.ReadDir(fsys, dir)
	if err != nil {
		return nil, fmt.Errorf("load traces %s: %w", dir, err)
	}
	app := &App{
		Name:        path.Base(dir),
		Placements:  map[string][]StepRow{},
		Scalability: map[string][]StepRow{},
	}
	want := map[string]bool{}
	for _, t := range types {
		want[t] = true
	}
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || !strings.HasSuffix(name, ".csv") {
			continue
		}
		stem := strings.TrimSuffix(name, ".csv")
		file := path.Join(dir, name)
		switch {
		case strings.HasPrefix(stem, "placements-"):
			t := strings.TrimPrefix(stem, "placements-")
			if len(want) > 0 && !want[t] {
				continue
			}
			rows, err := readFile(fsys, file, ReadPlacements)
			if err != nil {
				return nil, err
			}
			app.Placements[t] = rows
		case strings.HasPrefix(stem, "scalability-"):
			t := strings.TrimPrefix(stem, "scalability-")
			if len(want) > 0 && !want[t] {
				continue
			}
			rows, err := readFile(fsys, file, ReadScalability)
			if err != nil {
				return nil, err
			}
			app.Scalability[t] = rows
		case strings.HasPrefix(stem, "validation-"):
			b, err := strconv.Atoi(strings.TrimPrefix(stem, "validation-"))
			if err != nil || b <= 0 {
				return nil, &ParseError{File: file, Err: fmt.Errorf("%w: batch size in file name %q", ErrBadValue, name)}
			}
			rows, err := readFile(fsys, file, ReadValidation)
			if err != nil {
				return nil, err
			}
			app.Validations = append(app.Validations, Validation{Batch: b, Rows: rows})
		}
	}
	if len(app.Validations) == 0 {
		return nil, fmt.Errorf("load traces %s: %w: no validation-<B>.csv", dir, ErrNoTraces)
	}
	sort.Slice(app.Validations, func(i, j int) bool { return app.Validations[i].Batch < app.Validations[j].Batch })
	for _, t := range types {
		if len(app.Placements[t]) == 0 && len(app.Scalability[t]) == 0 {
			return nil, fmt.Errorf("load traces %s type %s: %w: no placements-%s.csv or scalability-%s.csv", dir, t, ErrNoTraces, t, t)
		}
	}
	if len(app.Types()) == 0 {
		return nil, fmt.Errorf("load traces %s: %w: no placements or scalability files", dir, ErrNoTraces)
	}
	return app, nil
}

func readFile[T any](fsys fs.FS, file string, read func(io.Reader, string) ([]T, error)) ([]T, error) {
	f, err := fsys.Open(file)
	if err != nil {
		return nil, fmt.Errorf("open trace %s: %w", file, err)
	}
	defer f.Close()
	rows, err := read(f, file)
	if err != nil {
		var pe *ParseError
		if errors.As(err, &pe) {
			return nil, err
		}
		return nil, fmt.Errorf("read trace %s: %w", file, err)
	}
	return rows, nil
}
