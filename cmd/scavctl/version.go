package main

import (
	"fmt"

	"github.com/scavenger-ml/scavenger/api"

	"github.com/spf13/cobra"
)

func newVersionCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print scavctl's version",
		Args:  cobra.NoArgs,
		Run:   func(*cobra.Command, []string) { fmt.Fprintln(a.stdout, "scavctl", api.Version) },
	}
}
