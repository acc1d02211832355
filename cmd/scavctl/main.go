// Command scavctl is Scavenger's command line: it runs training jobs under
// the node daemon and shows their output, steps and state.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
)

func main() {
	os.Exit(run(context.Background(), os.Args[1:]))
}

// run executes one scavctl command line and returns the process exit code.
func run(ctx context.Context, args []string) int {
	a := &app{stdout: cleanWriter{os.Stdout}, stderr: cleanWriter{os.Stderr}} // sanitize.go
	root := newRootCmd(a)
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	if a.log != nil {
		_ = a.log.Sync()
	}
	var ee exitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ee):
		if ee.msg != "" {
			fmt.Fprintln(os.Stderr, "scavctl:", ee.msg)
		}
		return ee.code
	default:
		fmt.Fprintln(os.Stderr, "scavctl:", err)
		return 1
	}
}
