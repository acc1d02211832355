package daemon

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/scavenger-ml/scavenger/api"
	"github.com/scavenger-ml/scavenger/internal/testuser"
	"github.com/scavenger-ml/scavenger/plugins"
)

// TestMetricsNameNoJobOnASharedDaemon: issue 20's /metrics leak. On a root
// daemon that serves every user, an unprivileged user who reads /metrics
// learns no job's id, name, loss or steps; the API's bounds are there.
func TestMetricsNameNoJobOnASharedDaemon(t *testing.T) {
	mallory := testuser.Add(t, "m")
	d, c := startDaemonWith(t, "scavd-metrics-", Config{Listen: "127.0.0.1:0", NodeSampleEvery: 200 * time.Millisecond,
		GPUSource: "none", MetricsListen: "127.0.0.1:0"})
	j, err := c.Run(t.Context(), api.RunRequest{Name: "secretname", Command: []string{"/bin/sh", "-c", "sleep 30"}, Dir: t.TempDir(),
		Config: plugins.Config{Workers: 1}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = c.Stop(t.Context(), j.ID, time.Second) })
	time.Sleep(time.Second) // a node sample with the job's processes
	var body string
	mallory.Do(t, func() {
		conn, err := net.Dial("tcp", d.MetricsAddr())
		if err != nil {
			t.Error(err)
			return
		}
		defer conn.Close()
		_, _ = io.WriteString(conn, "GET /metrics HTTP/1.0\r\n\r\n")
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Error(err)
			return
		}
		b, _ := io.ReadAll(resp.Body)
		body = string(b)
	})
	for _, leak := range []string{j.ID, "secretname", "job_id="} {
		if strings.Contains(body, leak) {
			t.Errorf("/metrics of a root daemon tells mallory %q", leak)
		}
	}
	for _, want := range []string{"scavenger_api_connections", `scavenger_api_refused_total{node=`, "scavenger_node_cpus"} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}
