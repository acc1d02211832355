package main

import (
	"os"
	"strconv"
	"testing"
	"time"
)

// TestWatchdogInterval: half the timeout systemd asks of this process, none
// for another's or when unset, an error for a malformed one; the variables
// leave the environment either way (they are not the workers').
func TestWatchdogInterval(t *testing.T) {
	pid := os.Getpid()
	for _, tc := range []struct {
		name, usec, pid string
		want            time.Duration
		err             bool
	}{
		{name: "unset"},
		{name: "half the timeout", usec: "10000000", want: 5 * time.Second},
		{name: "for this process", usec: "2000000", pid: strconv.Itoa(pid), want: time.Second},
		{name: "for another process", usec: "2000000", pid: strconv.Itoa(pid + 1)},
		{name: "zero", usec: "0", err: true},
		{name: "garbage", usec: "10s", err: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("WATCHDOG_USEC", tc.usec)
			t.Setenv("WATCHDOG_PID", tc.pid)
			got, err := watchdogInterval()
			if (err != nil) != tc.err || got != tc.want {
				t.Fatalf("watchdogInterval() = %v, %v; want %v, error %v", got, err, tc.want, tc.err)
			}
			for _, k := range []string{"WATCHDOG_USEC", "WATCHDOG_PID"} {
				if v, ok := os.LookupEnv(k); ok {
					t.Errorf("%s=%q is still in the environment", k, v)
				}
			}
		})
	}
}
