package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"

	"github.com/scavenger-ml/scavenger/api"
	"github.com/scavenger-ml/scavenger/tools/internal/dashtool"
)

// scavd is a scavd process of the bench on its state directory.
type scavd struct {
	cmd   *exec.Cmd
	state string
	info  api.Info
	// ready is how long it took from exec to answering the API.
	ready time.Duration
	// exited has the process's end.
	exited chan error
}

// startScavd starts bin on state and waits until its API answers; extra
// are more flags (the measured build's: an older one may not know them).
func startScavd(bin, state string, extra ...string) (*scavd, error) {
	if err := os.MkdirAll(state, 0o700); err != nil {
		return nil, err
	}
	_ = os.Remove(filepath.Join(state, "scavd.json")) // the last daemon's discovery file
	d := &scavd{state: state}
	d.cmd = exec.Command(bin, append([]string{"--state-dir", state, "--listen", "127.0.0.1:0", "--log-level", "warn"}, extra...)...)
	d.cmd.Stderr = os.Stderr
	began := time.Now()
	if err := d.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	exited := make(chan error, 1)
	go func() { exited <- d.cmd.Wait() }()
	d.exited = exited
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(5 * time.Millisecond) {
		select {
		case err := <-exited:
			return nil, fmt.Errorf("%s on %s exited before it answered: %v", bin, state, err)
		default:
		}
		if info, err := api.ReadDiscovery(state); err == nil && info.PID == d.cmd.Process.Pid {
			var err error
			if info.API != "" { // an older build serves no API socket: its discovery file is all
				var c *api.Client
				if c, err = api.Dial(context.Background(), info.API, time.Second); err == nil {
					_, err = c.Ping(context.Background())
					c.Close()
				}
			}
			if err == nil {
				d.info, d.ready = info, time.Since(began)
				return d, nil
			}
		}
		if time.Now().After(deadline) {
			d.stop()
			return nil, fmt.Errorf("%s on %s did not come up", bin, state)
		}
	}
}

// stop ends the daemon with SIGTERM and waits for it.
func (d *scavd) stop() {
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	<-d.exited
}

// store connects to the daemon's NATS server as the daemon does (its nkey)
// and opens JetStream.
func (d *scavd) store() (*nats.Conn, jetstream.JetStream, error) {
	seed, err := os.ReadFile(filepath.Join(d.state, "nats.nk"))
	if err != nil {
		return nil, nil, err
	}
	kp, err := nkeys.FromSeed(bytes.TrimSpace(seed))
	if err != nil {
		return nil, nil, err
	}
	pub, err := kp.PublicKey()
	if err != nil {
		return nil, nil, err
	}
	nc, err := nats.Connect(d.info.NATS, nats.Nkey(pub, kp.Sign), nats.Name("benchscale"))
	if err != nil {
		return nil, nil, fmt.Errorf("connect to %s: %w", d.info.NATS, err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	return nc, js, nil
}

// memory is a process's resident memory, KiB.
type memory struct {
	RSS, Anon, File, HWM int64
}

// mem reads the resident memory of pid (zero when it cannot).
func mem(pid int) memory {
	s, _ := dashtool.Status(pid)
	return memory{RSS: s["VmRSS"], Anon: s["RssAnon"], File: s["RssFile"], HWM: s["VmHWM"]}
}

// dirKiB is the disk use of dir, KiB (du -sk).
func dirKiB(dir string) int64 {
	out, err := exec.Command("du", "-sk", dir).Output()
	if err != nil {
		return -1
	}
	f := strings.Fields(string(out))
	if len(f) == 0 {
		return -1
	}
	v, _ := strconv.ParseInt(f[0], 10, 64)
	return v
}
