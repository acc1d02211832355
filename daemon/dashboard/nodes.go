package dashboard

import (
	"context"
	"net/http"
	"sort"
	"sync"
	"time"

	"github.com/scavenger-ml/scavenger/report"
	"github.com/scavenger-ml/scavenger/telemetry"
)

// nodeView is the node page: each node that sampled, as top shows it, with
// the processes of each job (the viewer's: the API leaves out others').
type nodeView struct {
	Nodes []nodeRow
}

// nodeRow is one node.
type nodeRow struct {
	Name  string
	Cells report.NodeCells
	GPUs  []gpuRow
	Jobs  []jobUsageRow
	Error string
}

// gpuRow is one GPU of a node.
type gpuRow struct {
	Index int
	report.GPUCells
}

// jobUsageRow is what one job's processes use on a node, and each process.
type jobUsageRow struct {
	Job, CPU, RSS string
	Procs         []procRow
}

// procRow is one process, as top shows it.
type procRow struct {
	PID, PPID      int
	Name, CPU, RSS string
}

// buildNodeView is the node page from top's nodes at now.
func buildNodeView(nodes []report.TopNode, now time.Time) nodeView {
	var v nodeView
	for _, n := range nodes {
		row := nodeRow{Name: n.Name, Cells: n.Cells(now), Error: n.Error}
		for _, g := range n.GPUs {
			row.GPUs = append(row.GPUs, gpuRow{Index: g.Index, GPUCells: report.GPUText(g, 24)})
		}
		if n.Host != nil {
			for _, j := range n.Host.Jobs {
				u := jobUsageRow{Job: j.Job}
				u.CPU, u.RSS = report.UsageText(j.CPUCores, j.RSSBytes)
				procs := append([]telemetry.ProcessUsage(nil), j.Processes...)
				sort.Slice(procs, func(a, b int) bool { return procs[a].PID < procs[b].PID })
				for _, p := range procs {
					pr := procRow{PID: p.PID, PPID: p.PPID, Name: orDash(p.Name)}
					pr.CPU, pr.RSS = report.UsageText(p.CPUCores, p.RSSBytes)
					u.Procs = append(u.Procs, pr)
				}
				row.Jobs = append(row.Jobs, u)
			}
			sort.Slice(row.Jobs, func(a, b int) bool { return row.Jobs[a].Job < row.Jobs[b].Job })
		}
		v.Nodes = append(v.Nodes, row)
	}
	return v
}

// nodeTracker is a viewer's newest node samples, filled by the API as them.
type nodeTracker struct {
	mu sync.Mutex
	t  *report.NodeTracker
	signal
}

func (nt *nodeTracker) add(s telemetry.NodeSample) error {
	nt.mu.Lock()
	nt.t.Add(s)
	nt.mu.Unlock()
	nt.fire()
	return nil
}

func (nt *nodeTracker) view(now time.Time) nodeView {
	nt.mu.Lock()
	defer nt.mu.Unlock()
	return buildNodeView(report.BuildNodes(nt.t, now), now)
}

// nodeView reads the newest node samples as the viewer, for wait at most.
func (s *Server) nodeView(ctx context.Context, v viewer, wait time.Duration) nodeView {
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	nt := &nodeTracker{t: report.NewNodeTracker()}
	_ = s.o.As(v.owner).LatestNodeSamples(ctx, false, nt.add)
	return nt.view(time.Now())
}

// nodeEvents streams the node page: the newest samples, then each new one.
func (s *Server) nodeEvents(w http.ResponseWriter, r *http.Request, v viewer) {
	ev, ok := s.startEvents(w, v)
	if !ok {
		return
	}
	defer ev.done()
	nt := &nodeTracker{t: report.NewNodeTracker()}
	var wg sync.WaitGroup
	defer wg.Wait()
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel() // before the wait
	wg.Add(1)
	go func() {
		defer wg.Done()
		_ = s.o.As(v.owner).LatestNodeSamples(ctx, true, nt.add)
	}()
	ev.loop(ctx, nt.wait, time.Second, time.Second, func() (update, error) {
		html, err := s.pages.fragment("node", "node-body", nt.view(time.Now()))
		return update{HTML: map[string]string{"node-body": html}}, err
	})
}
