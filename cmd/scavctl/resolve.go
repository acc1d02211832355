package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/scavenger-ml/scavenger/api"
)

// A job is named on the command line by its id, by a prefix of its id that
// no other job of the caller's shares, or by its name (the newest job of
// that name, said so when there are several).

// resolve finds the job ref names among the caller's (root: every user's),
// in one call: the daemon's job index names it.
func (a *app) resolve(ctx context.Context, c *api.Client, ref string) (api.Job, error) {
	r, err := c.Resolve(ctx, ref, os.Geteuid() == 0)
	if err != nil {
		return api.Job{}, err
	}
	if r.Note != "" {
		fmt.Fprintf(a.stderr, "scavctl: %s\n", r.Note)
	}
	return r.Job, nil
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

// completeJobsLimit bounds the jobs a completion offers: the newest.
const completeJobsLimit = 1000

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
		p, err := c.List(ctx, api.JobsRequest{Limit: completeJobsLimit})
		seen := map[string]bool{}
		for _, j := range p.Jobs {
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
