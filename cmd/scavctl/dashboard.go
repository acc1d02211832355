package main

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/scavenger-ml/scavenger/api"
)

func newDashboardCmd(a *app) *cobra.Command {
	var noBrowser bool
	cmd := &cobra.Command{
		Use:   "dashboard",
		Short: "Open the web dashboard: your jobs, their decisions, time and cost, live",
		Long: `dashboard asks the running scavd for a one-time login link to its web
dashboard, prints it and, on a desktop (with xdg-open), opens it in the
browser. The link logs you in once, within a minute, as the user who asked
(scavd knows you by its API socket's peer credentials); the browser then
holds a session cookie (HttpOnly, SameSite=Strict) for 8 hours.

The dashboard shows your jobs (root: everyone's), live: each job's state,
configuration, speed and the time and cost left; one job's charts of speed,
step time, loss and noise scale with its relaunches marked, its attempts
with the decision that started each and the step time predicted against
measured, the candidates' time-cost front, its bill and its output, with
stop and move buttons; and the node's CPUs, memory, GPUs and your jobs'
processes. The figures are those of scavctl report and scavctl top.

The link's address is on scavd's machine (dashboard_listen, loopback by
default): from another machine, forward the port (ssh -L PORT:127.0.0.1:PORT
HOST). With --api https://HOST:PORT the dashboard is at https://HOST:PORT/ui/,
where you log in with your API token. dashboard needs a running scavd (one
that scavctl run started counts, while it runs); it starts none.`,
		Example: "  scavctl dashboard\n  scavctl dashboard --no-browser",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.withDaemon(cmd.Context(), func(ctx context.Context, c *api.Client) error {
				if u, err := url.Parse(c.URL()); err == nil && (u.Scheme == "https" || u.Scheme == "http") {
					fmt.Fprintf(a.stdout, "The dashboard is at %s/ui/: log in there with your API token.\n", strings.TrimSuffix(c.URL(), "/"))
					return nil
				}
				link, err := c.Dashboard(ctx)
				if err != nil {
					return fmt.Errorf("dashboard: %w", err)
				}
				fmt.Fprintf(a.stdout, "Open %s\n(it logs you in once, until %s)\n", link.URL, link.Expires.Local().Format(time.TimeOnly))
				if !noBrowser {
					openBrowser(link.URL)
				}
				return nil
			})
		},
	}
	cmd.Flags().BoolVar(&noBrowser, "no-browser", false, "print the link only, even on a desktop")
	return cmd
}

// openBrowser opens u with xdg-open on a desktop session; elsewhere (no
// display, no xdg-open) the printed link is all.
func openBrowser(u string) {
	if os.Getenv("DISPLAY") == "" && os.Getenv("WAYLAND_DISPLAY") == "" {
		return
	}
	path, err := exec.LookPath("xdg-open")
	if err != nil {
		return
	}
	cmd := exec.Command(path, u)
	if cmd.Start() == nil {
		_ = cmd.Process.Release() // scavctl exits next: init reaps it
	}
}
