// Command benchflood runs two users' jobs side by side on a root scavd while
// one of them floods it (issue 20's "done when"): it makes two unprivileged
// users (useradd; removed at the end), alice and mallory, starts the scavd
// it is given as root, and
//
//  1. alice runs a job that steps every 50 ms and prints each step;
//  2. alice's API latency is measured unloaded (her own calls, through her
//     own connection: the kernel names her);
//  3. mallory floods: 20,000 follow streams and 20,000 slow request bodies
//     on the API socket, a job that opens thousands of telemetry
//     connections and writes on them as fast as it can, and jobs that print
//     as fast as they can;
//  4. meanwhile alice's API latency is measured again, and she runs a job,
//     reads her job's logs and moves it;
//  5. mallory's flood ends; scavd's memory is read again after a while.
//
// It prints markdown tables: alice's latency unloaded, during and after the
// flood, what became of mallory's attempts, whether alice's run, logs, move
// and step records were unaffected, and scavd's resident memory before,
// at the peak and after. Run as root:
//
//	go run ./tools/benchflood --scavd bin/scavd --scavctl bin/scavctl --python /usr/bin/python3
//
// It runs itself again, as alice and as mallory, for the parts they do
// (benchflood probe, benchflood flood).
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/scavenger-ml/scavenger/api"
)

func main() {
	var err error
	switch {
	case len(os.Args) > 1 && os.Args[1] == "probe":
		err = probe(os.Args[2:])
	case len(os.Args) > 1 && os.Args[1] == "flood":
		err = flood(os.Args[2:])
	default:
		err = run()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "benchflood:", err)
		os.Exit(1)
	}
}

// latency is what a probe measured.
type latency struct {
	N, Errors int
	P50, P99  float64 // ms
}

// probe calls the API n times as whoever runs it and prints the latencies.
func probe(args []string) error {
	f := flag.NewFlagSet("probe", flag.ExitOnError)
	sock := f.String("api", "", "the API socket")
	n := f.Int("n", 300, "calls")
	_ = f.Parse(args)
	var ds []time.Duration
	errs := 0
	c, err := api.Dial(context.Background(), *sock, 10*time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	for range *n {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		t := time.Now()
		_, err := c.Jobs(ctx)
		cancel()
		if err != nil {
			errs++
			continue
		}
		ds = append(ds, time.Since(t))
		time.Sleep(20 * time.Millisecond)
	}
	slices.Sort(ds)
	l := latency{N: *n, Errors: errs}
	if len(ds) > 0 {
		ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
		l.P50, l.P99 = ms(ds[len(ds)/2]), ms(ds[min(len(ds)-1, len(ds)*99/100)])
	}
	return json.NewEncoder(os.Stdout).Encode(l)
}

// flooded is what a flood's attempts met.
type flooded struct {
	Streams, Bodies outcome
}

// outcome counts attempts by what the daemon answered.
type outcome struct {
	Attempts, Served, Refused, Cut, Failed int64
	Message                                string // a refusal's words
}

// flood opens streams and slow bodies on the API as whoever runs it, holds
// what the daemon serves until the end, and prints what became of them.
func flood(args []string) error {
	f := flag.NewFlagSet("flood", flag.ExitOnError)
	sock := f.String("api", "", "the API socket")
	streams := f.Int("streams", 20000, "follow streams to open")
	bodies := f.Int("bodies", 20000, "slow request bodies to send")
	hold := f.Duration("hold", 30*time.Second, "how long to hold what was served, from the start")
	_ = f.Parse(args)
	end := time.Now().Add(*hold)
	var held sync.Mutex
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	attempt := func(o *outcome, mu *sync.Mutex, req string, slow bool) {
		atomic.AddInt64(&o.Attempts, 1)
		c, err := net.Dial("unix", *sock)
		if err != nil {
			atomic.AddInt64(&o.Failed, 1)
			return
		}
		_ = c.SetDeadline(time.Now().Add(30 * time.Second))
		if _, err := io.WriteString(c, req); err != nil {
			atomic.AddInt64(&o.Failed, 1)
			c.Close()
			return
		}
		if slow { // hold the connection, the body unfinished, while the flood lasts
			held.Lock()
			conns = append(conns, c)
			held.Unlock()
			go func() {
				resp, err := http.ReadResponse(bufio.NewReader(c), nil)
				switch {
				case err != nil:
				case resp.StatusCode == http.StatusTooManyRequests:
					b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
					if strings.Contains(string(b), "did not arrive") {
						atomic.AddInt64(&o.Cut, 1)
					} else {
						atomic.AddInt64(&o.Refused, 1)
						note(mu, o, b)
					}
				default:
					atomic.AddInt64(&o.Served, 1)
				}
			}()
			return
		}
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		switch {
		case err != nil:
			atomic.AddInt64(&o.Failed, 1)
			c.Close()
		case resp.StatusCode == http.StatusOK:
			atomic.AddInt64(&o.Served, 1)
			held.Lock()
			conns = append(conns, c)
			held.Unlock()
		default:
			b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
			atomic.AddInt64(&o.Refused, 1)
			note(mu, o, b)
			c.Close()
		}
	}
	var res flooded
	var mu sync.Mutex
	work := make(chan func(), 1024)
	var wg sync.WaitGroup
	for range 256 {
		wg.Go(func() {
			for fn := range work {
				fn()
			}
		})
	}
	follow := "GET " + api.PathStream + "?what=" + api.StreamLive + " HTTP/1.1\r\nHost: scavd\r\n\r\n"
	slow := "POST " + api.PathCall + api.VerbJobs + " HTTP/1.1\r\nHost: scavd\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{"
	for i := range max(*streams, *bodies) {
		if i < *streams {
			work <- func() { attempt(&res.Streams, &mu, follow, false) }
		}
		if i < *bodies {
			work <- func() { attempt(&res.Bodies, &mu, slow, true) }
		}
	}
	close(work)
	wg.Wait()
	time.Sleep(time.Until(end))
	held.Lock()
	defer held.Unlock()
	return json.NewEncoder(os.Stdout).Encode(res)
}

// note keeps the first refusal's words.
func note(mu *sync.Mutex, o *outcome, body []byte) {
	mu.Lock()
	defer mu.Unlock()
	if o.Message == "" {
		var rep api.Reply
		if json.Unmarshal(body, &rep) == nil {
			o.Message = rep.Error
		}
	}
}
