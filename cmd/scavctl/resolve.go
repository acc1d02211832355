package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/scavenger-ml/scavenger/api"
	"github.com/scavenger-ml/scavenger/telemetry"
)

// A job is named on the command line by its id, by a prefix of its id that
// no other job of the caller's shares, or by its name (the newest job of
// that name, said so when there are several).

// resolve finds the job ref names among the caller's (root: every user's).
func (a *app) resolve(ctx context.Context, c *api.Client, ref string) (api.Job, error) {
	if telemetry.ValidJobID(ref) {
		if j, err := c.Job(ctx, ref); err == nil {
			return j, nil
		} else if !errors.Is(err, api.ErrNoJob) && !strings.Contains(err.Error(), api.ErrNoJob.Error()) {
			return api.Job{}, err
		}
	}
	jobs, err := c.Jobs(ctx)
	if err == nil && os.Geteuid() == 0 {
		jobs, err = c.AllJobs(ctx)
	}
	if err != nil {
		return api.Job{}, err
	}
	j, note, err := pick(jobs, ref)
	if note != "" {
		fmt.Fprintf(a.stderr, "scavctl: %s\n", note)
	}
	return j, err
}

// pick finds ref among jobs: an id, a unique id prefix, or a name (the
// newest of that name). note says which of several was taken.
func pick(jobs []api.Job, ref string) (api.Job, string, error) {
	var prefixed, named []api.Job
	for _, j := range jobs {
		switch {
		case j.ID == ref:
			return j, "", nil
		case strings.HasPrefix(j.ID, ref):
			prefixed = append(prefixed, j)
		}
		if j.Name == ref {
			named = append(named, j)
		}
	}
	if len(named) > 0 {
		sort.SliceStable(named, func(a, b int) bool { return named[a].Created.After(named[b].Created) })
		note := ""
		if len(named) > 1 {
			note = fmt.Sprintf("%d jobs are named %s; %s is the newest (give an id for another: %s)", len(named), ref, named[0].ID, ids(named[1:]))
		}
		return named[0], note, nil
	}
	switch len(prefixed) {
	case 1:
		return prefixed[0], "", nil
	case 0:
		return api.Job{}, "", fmt.Errorf("job %s: %w: no job of yours has that id, id prefix or name (see scavctl jobs)", ref, api.ErrNoJob)
	}
	return api.Job{}, "", fmt.Errorf("job %s: %d jobs' ids start with it (%s): give more of the id", ref, len(prefixed), ids(prefixed))
}

func ids(jobs []api.Job) string {
	out := make([]string, len(jobs))
	for i, j := range jobs {
		out[i] = j.ID
	}
	return strings.Join(out, ", ")
}

// withJob runs f on the job args[0] names, through a running daemon (or,
// with standalone, one started in process for the command).
func (a *app) withJob(cmd *cobra.Command, ref string, standalone bool, f func(context.Context, *api.Client, api.Job) error) error {
	run := a.withDaemon
	if standalone {
		run = a.withClient
	}
	return run(cmd.Context(), func(ctx context.Context, c *api.Client) error {
		j, err := a.resolve(ctx, c, ref)
		if err != nil {
			return err
		}
		return f(ctx, c, j)
	})
}

// withJobOutput is withJob (standalone) for a command that prints what it
// reads as -o says: f is told whether to print JSON.
func (a *app) withJobOutput(cmd *cobra.Command, ref string, f func(context.Context, *api.Client, api.Job, bool) error) error {
	asJSON, err := a.json()
	if err != nil {
		return err
	}
	return a.withJob(cmd, ref, true, func(ctx context.Context, c *api.Client, j api.Job) error { return f(ctx, c, j, asJSON) })
}

// completeJobs completes a job argument with the ids and names of the
// caller's jobs, from a running daemon (none is started for it).
func (a *app) completeJobs(cmd *cobra.Command, args []string, prefix string) ([]string, cobra.ShellCompDirective) {
	if len(args) > 0 {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	ctx, cancel := context.WithTimeout(cmd.Context(), 2*time.Second)
	defer cancel()
	var out []string
	_ = a.withDaemon(ctx, func(ctx context.Context, c *api.Client) error {
		jobs, err := c.Jobs(ctx)
		seen := map[string]bool{}
		for _, j := range jobs {
			for _, s := range []string{j.ID, j.Name} {
				if s != "" && !seen[s] && strings.HasPrefix(s, prefix) {
					seen[s] = true
					out = append(out, s+"\t"+string(j.State))
				}
			}
		}
		return err
	})
	return out, cobra.ShellCompDirectiveNoFileComp
}
