package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/scavenger-ml/scavenger/daemon"
)

func newVersionCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print scavctl's version",
		Args:  cobra.NoArgs,
		Run:   func(*cobra.Command, []string) { fmt.Fprintln(a.stdout, "scavctl", daemon.Version) },
	}
}
