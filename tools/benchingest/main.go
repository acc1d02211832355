// Command benchingest measures one scavd's telemetry ingest: records per
// second accepted from concurrent writers on its unix socket, and the daemon's
// resident memory idle and under that load. It starts the scavd binary it is
// given with a temporary state directory and stops it at the end.
//
//	go run ./tools/benchingest --scavd bin/scavd [--writers 8] [--duration 10s]
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/scavenger-ml/scavenger/api"
	"github.com/scavenger-ml/scavenger/daemon/ingest"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "benchingest:", err)
		os.Exit(1)
	}
}

func run() error {
	scavd := flag.String("scavd", "bin/scavd", "scavd binary to measure")
	writers := flag.Int("writers", 8, "concurrent writers, one connection each")
	duration := flag.Duration("duration", 10*time.Second, "how long the writers write")
	flag.Parse()

	state, err := os.MkdirTemp("", "benchingest-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(state)
	cmd := exec.Command(*scavd, "--state-dir", state, "--listen", "127.0.0.1:0", "--log-level", "warn")
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", *scavd, err)
	}
	defer func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
	}()
	ctx := context.Background()
	info, err := discover(state)
	if err != nil {
		return err
	}
	c, err := api.Dial(ctx, info.API, 5*time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	time.Sleep(2 * time.Second)
	idle, _ := rss(cmd.Process.Pid, "VmRSS")
	key, err := ingest.LoadKey(filepath.Join(state, "telemetry.key"))
	if err != nil {
		return err
	}
	hello := fmt.Sprintf(`{"v":1,"kind":"hello","job":"bench-ingest","attempt":1,"rank":0,"world":1,"step":0,"t":1,"token":%q}`+"\n", key.Token("bench-ingest", 1))
	m, err := measure(ctx, c, info.Socket, hello, cmd.Process.Pid, *writers, *duration)
	if err != nil {
		return err
	}
	hwm, _ := rss(cmd.Process.Pid, "VmHWM")
	var dropped int64
	for _, n := range m.final.Ingest.Dropped {
		dropped += n
	}
	fmt.Printf("| measure | value |\n|---|---|\n")
	fmt.Printf("| writers (one unix-socket connection each) | %d |\n", *writers)
	fmt.Printf("| measured window | %s |\n", m.elapsed.Truncate(time.Millisecond))
	fmt.Printf("| records accepted in the window | %d |\n", m.accepted)
	fmt.Printf("| **ingest throughput** | **%.0f records/s** |\n", float64(m.accepted)/m.elapsed.Seconds())
	fmt.Printf("| records written / accepted / dropped in all | %d / %d / %d |\n", m.written, m.final.Ingest.Accepted, dropped)
	fmt.Printf("| scavd RSS idle | %.1f MiB |\n", float64(idle)/1024)
	fmt.Printf("| scavd RSS under load (peak sampled, VmHWM) | %.1f MiB, %.1f MiB |\n", float64(m.peak)/1024, float64(hwm)/1024)
	if m.final.Ingest.Accepted != m.written {
		return fmt.Errorf("accepted %d of %d records written", m.final.Ingest.Accepted, m.written)
	}
	return nil
}

// discover waits for the daemon on state to write its discovery file.
func discover(state string) (api.Info, error) {
	deadline := time.Now().Add(20 * time.Second)
	for {
		info, err := api.ReadDiscovery(state)
		if err == nil {
			return info, nil
		}
		if time.Now().After(deadline) {
			return info, fmt.Errorf("scavd did not come up: %w", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// load is what one measurement found.
type load struct {
	elapsed  time.Duration
	accepted int64     // in the measured window
	written  int64     // by the writers in all
	peak     int64     // the daemon's RSS, KiB, sampled
	final    api.Stats // once the daemon is done with what it was handed
}

// measure runs writers connections to socket for duration, each bound to
// the attempt by hello, then replaying
// one pre-built block of records as fast as the socket takes it, while it
// samples the memory of the daemon pid.
func measure(ctx context.Context, c *api.Client, socket, hello string, pid, writers int, duration time.Duration) (load, error) {
	var m load
	var written, peak atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := 0; w < writers; w++ {
		conn, err := net.Dial("unix", socket)
		if err != nil {
			close(stop)
			wg.Wait()
			return m, fmt.Errorf("dial %s: %w", socket, err)
		}
		block, n := records(w, writers)
		if _, err := conn.Write([]byte(hello)); err != nil { // binds the connection to the attempt
			conn.Close()
			close(stop)
			wg.Wait()
			return m, fmt.Errorf("write hello: %w", err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer conn.Close()
			for {
				select {
				case <-stop:
					return
				default:
				}
				if _, err := conn.Write(block); err != nil {
					return
				}
				written.Add(int64(n))
			}
		}()
	}
	wg.Add(1)
	go func() { // samples the daemon's memory while the load runs
		defer wg.Done()
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				if v, err := rss(pid, "VmRSS"); err == nil && v > peak.Load() {
					peak.Store(v)
				}
			}
		}
	}()
	s0, err0 := c.Stats(ctx)
	start := time.Now()
	time.Sleep(duration)
	s1, err1 := c.Stats(ctx)
	m.elapsed = time.Since(start)
	close(stop)
	wg.Wait()
	if err := errors.Join(err0, err1); err != nil {
		return m, err
	}
	m.accepted, m.written, m.peak = s1.Ingest.Accepted-s0.Ingest.Accepted, written.Load(), peak.Load()
	// Let the daemon finish what the writers handed it, then count drops.
	for prev := int64(-1); ; prev = m.final.Ingest.Accepted {
		time.Sleep(300 * time.Millisecond)
		var err error
		if m.final, err = c.Stats(ctx); err != nil {
			return m, err
		}
		if m.final.Ingest.Accepted == prev {
			return m, nil
		}
	}
}

// records builds a block of valid step records for one writer: rank w of
// world, 1000 steps, with the fields the torch client sends.
func records(w, world int) ([]byte, int) {
	var b bytes.Buffer
	const n = 1000
	now := float64(time.Now().UnixNano()) / 1e9
	for s := 1; s <= n; s++ {
		fmt.Fprintf(&b, `{"v":1,"job":"bench-ingest","attempt":1,"rank":%d,"world":%d,"step":%d,"t":%.6f,"dt":0.0251,"samples":32,"local_batch":32,"global_batch":%d,"micro":1,"compute_s":0.0212,"sync_s":0.0039,"loss":2.3051,"local_sqr":0.8711,"avg_sqr":0.3145}`+"\n",
			w, world, s, now+float64(s)*0.025, 32*world)
	}
	return b.Bytes(), n
}

// rss reads a memory field (kB) of /proc/<pid>/status.
func rss(pid int, field string) (int64, error) {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "status"))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, field+":") {
			f := strings.Fields(line)
			if len(f) >= 2 {
				return strconv.ParseInt(f[1], 10, 64)
			}
		}
	}
	return 0, errors.New("no " + field)
}
