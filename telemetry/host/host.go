// Package host reads a node's CPU, memory and network through gopsutil, and
// what each job's processes use: a job's processes are its roots (the worker
// PIDs the daemon knows, and every process of the job's owner whose
// environment names the job in SCAV_JOB_ID, as every launcher sets it) and
// all their descendants, found through the process tree. The environment is
// the process's to write: a process is taken for a job by it only when its
// real uid is the job owner's (Collector.Owner), so that no user puts their
// processes in another's job.
package host

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/shirou/gopsutil/v4/cpu"
	"github.com/shirou/gopsutil/v4/load"
	"github.com/shirou/gopsutil/v4/mem"
	"github.com/shirou/gopsutil/v4/net"
	"github.com/shirou/gopsutil/v4/process"

	"github.com/scavenger-ml/scavenger/internal/procstat"
	"github.com/scavenger-ml/scavenger/telemetry"
)

// JobEnv is the environment variable that names a worker's job (the worker
// environment contract, §3 of the design).
const JobEnv = "SCAV_JOB_ID"

// Jobs says which jobs to look for: job id -> PIDs known to be its roots
// (none is fine: the job is then found by JobEnv).
type Jobs map[string][]int

// Collector samples the host. It keeps the previous sample's counters to
// turn CPU times into rates; Sample is not safe for concurrent use. The
// host's busy-CPU ratio is gopsutil's cpu.Percent since its previous call,
// which is process-wide: a daemon has one Collector.
type Collector struct {
	// ByEnv finds jobs' roots by JobEnv in processes' environments (default
	// on; only processes this user may read are looked at).
	ByEnv bool
	// Owner, when set, names the uid whose processes a job's environment
	// may claim (ok false: none); unset, any process may.
	Owner func(job string) (uid uint32, ok bool)

	prevProc map[procKey]float64 // CPU seconds by process
	prevAt   time.Time
	// envSeen is the job a process's environment names, kept only when
	// the process is its owner's ("" for none), read once.
	envSeen map[procKey]string
}

// procKey tells a process from a later one that reuses its PID.
type procKey struct {
	pid     int32
	created int64
}

// New returns a collector.
func New() *Collector {
	return &Collector{ByEnv: true, prevProc: map[procKey]float64{}, envSeen: map[procKey]string{}}
}

// Sample reads the host and the processes of jobs, and returns which job
// each attributed PID belongs to. Readings that fail are left at zero and the
// first failure is returned with the rest.
func (c *Collector) Sample(ctx context.Context, jobs Jobs) (telemetry.HostStat, map[int]string, error) {
	now := time.Now()
	var h telemetry.HostStat
	var errs []error
	if n, err := cpu.CountsWithContext(ctx, true); err == nil {
		h.CPUs = n
	} else {
		errs = append(errs, fmt.Errorf("count cpus: %w", err))
	}
	// cpu.Percent with no interval measures since its previous call (the
	// process's start for the first): a collector's first sample has none.
	if pct, err := cpu.PercentWithContext(ctx, 0, false); err == nil && len(pct) == 1 {
		if !c.prevAt.IsZero() {
			r := min(max(pct[0]/100, 0), 1)
			h.CPUUtilization = &r
		}
	} else if err != nil {
		errs = append(errs, fmt.Errorf("read cpu times: %w", err))
	}
	if l, err := load.AvgWithContext(ctx); err == nil {
		h.Load1 = l.Load1
	}
	if m, err := mem.VirtualMemoryWithContext(ctx); err == nil {
		h.MemoryTotalBytes, h.MemoryUsedBytes, h.MemoryAvailableBytes = m.Total, m.Used, m.Available
	} else {
		errs = append(errs, fmt.Errorf("read memory: %w", err))
	}
	if nics, err := net.IOCountersWithContext(ctx, true); err == nil {
		for _, n := range nics {
			if n.Name == "lo" {
				continue
			}
			h.NetReceivedBytes += n.BytesRecv
			h.NetSentBytes += n.BytesSent
			h.Net = append(h.Net, telemetry.NetDevice{Name: n.Name, RxBytes: n.BytesRecv, TxBytes: n.BytesSent})
		}
	} else {
		errs = append(errs, fmt.Errorf("read network counters: %w", err))
	}
	owners, usage, err := c.jobs(ctx, jobs, now)
	if err != nil {
		errs = append(errs, err)
	}
	h.Jobs = usage
	c.prevAt = now
	return h, owners, errors.Join(errs...)
}

// proc is what the process table holds of one process: its stat, and a
// handle for reading its environment and owner, the few times they are
// read.
type proc struct {
	procstat.Stat
	p   *process.Process
	key procKey
}

// jobs builds the process tree, finds each job's processes and reads them.
func (c *Collector) jobs(ctx context.Context, jobs Jobs, now time.Time) (map[int]string, []telemetry.JobUsage, error) {
	if len(jobs) == 0 {
		c.prevProc = map[procKey]float64{}
		return map[int]string{}, nil, nil
	}
	table := map[int32]*proc{}
	children := map[int32][]int32{}
	err := procstat.Each(func(st procstat.Stat) {
		pid := int32(st.PID)
		table[pid] = &proc{Stat: st, p: &process.Process{Pid: pid}, key: procKey{pid, int64(st.Start)}}
		children[int32(st.PPID)] = append(children[int32(st.PPID)], pid)
	})
	if err != nil {
		return nil, nil, err
	}
	owner := c.owners(ctx, jobs, table, children)
	out, byJob := c.usage(owner, table, now)
	return out, totals(byJob), nil
}

// owners finds the job of every process in table: the processes jobs names
// (and, with ByEnv, those whose environment names an active job) are the
// roots, and every descendant of a root belongs to the root's job; a nested
// root (a worker whose parent is another job's process) keeps its own.
func (c *Collector) owners(ctx context.Context, jobs Jobs, table map[int32]*proc, children map[int32][]int32) map[int32]string {
	owner := map[int32]string{}
	var roots []int32
	claim := func(pid int32, job string) {
		if _, ok := table[pid]; ok {
			if _, taken := owner[pid]; !taken {
				owner[pid] = job
				roots = append(roots, pid)
			}
		}
	}
	ids := make([]string, 0, len(jobs))
	for id := range jobs {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		for _, pid := range jobs[id] {
			claim(int32(pid), id)
		}
	}
	if c.ByEnv {
		seen := make(map[procKey]string, len(table))
		for pid, pr := range table {
			job, ok := c.envSeen[pr.key]
			if !ok {
				job = envJob(ctx, pr.p)
				if _, active := jobs[job]; job != "" && !active {
					continue // decided once its job runs here
				}
				if job != "" && !c.owns(ctx, pr.p, job) {
					job = "" // a process's environment and owner stay: read once
				}
			}
			seen[pr.key] = job
			if _, active := jobs[job]; active && job != "" {
				claim(pid, job)
			}
		}
		c.envSeen = seen
	}
	slices.Sort(roots)
	for _, r := range roots {
		stack := []int32{r}
		for len(stack) > 0 {
			pid := stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			for _, ch := range children[pid] {
				if _, taken := owner[ch]; !taken {
					owner[ch] = owner[r]
					stack = append(stack, ch)
				}
			}
		}
	}
	return owner
}

// usage is the CPU time and memory of every owned process, by job, from
// the table's stats, and the job of each process.
func (c *Collector) usage(owner map[int32]string, table map[int32]*proc, now time.Time) (map[int]string, map[string]*telemetry.JobUsage) {
	byJob := map[string]*telemetry.JobUsage{}
	out := make(map[int]string, len(owner))
	nextPrev := make(map[procKey]float64, len(owner))
	dt := now.Sub(c.prevAt).Seconds()
	for pid, job := range owner {
		pr := table[pid]
		u := telemetry.ProcessUsage{PID: int(pid), PPID: pr.PPID, CPUSeconds: pr.CPUSeconds, Name: pr.Name, RSSBytes: pr.RSSBytes}
		if prev, ok := c.prevProc[pr.key]; ok && dt > 0 {
			u.CPUCores = ptr(max(u.CPUSeconds-prev, 0) / dt)
		}
		nextPrev[pr.key] = u.CPUSeconds
		out[int(pid)] = job
		ju := byJob[job]
		if ju == nil {
			ju = &telemetry.JobUsage{Job: job}
			byJob[job] = ju
		}
		ju.Processes = append(ju.Processes, u)
	}
	c.prevProc = nextPrev
	return out, byJob
}

// totals adds up each job's processes, jobs and processes in order.
func totals(byJob map[string]*telemetry.JobUsage) []telemetry.JobUsage {
	usage := make([]telemetry.JobUsage, 0, len(byJob))
	for _, ju := range byJob {
		sort.Slice(ju.Processes, func(a, b int) bool { return ju.Processes[a].PID < ju.Processes[b].PID })
		known := true
		var cores float64
		for _, p := range ju.Processes {
			ju.CPUSeconds += p.CPUSeconds
			ju.RSSBytes += p.RSSBytes
			if p.CPUCores == nil {
				known = false
			} else {
				cores += *p.CPUCores
			}
		}
		if known {
			ju.CPUCores = ptr(cores)
		}
		usage = append(usage, *ju)
	}
	sort.Slice(usage, func(a, b int) bool { return usage[a].Job < usage[b].Job })
	return usage
}

// owns reports whether p's real uid is job's owner's (always, without Owner).
func (c *Collector) owns(ctx context.Context, p *process.Process, job string) bool {
	if c.Owner == nil {
		return true
	}
	uid, ok := c.Owner(job)
	if !ok {
		return false
	}
	ids, err := p.UidsWithContext(ctx)
	return err == nil && len(ids) > 0 && ids[0] == uid
}

// envJob is the job a process's environment names, or "" (also when the
// environment cannot be read: another user's process, or one that exited).
func envJob(ctx context.Context, p *process.Process) string {
	env, err := p.EnvironWithContext(ctx)
	if err != nil {
		return ""
	}
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, JobEnv+"="); ok && telemetry.ValidJobID(v) {
			return v
		}
	}
	return ""
}

func ptr[T any](v T) *T { return &v }
