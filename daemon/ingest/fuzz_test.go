package ingest

import (
	"bytes"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/scavenger-ml/scavenger/telemetry"
)

// collector is an in-memory Publisher for exercising the socket reader alone.
type collector struct {
	mu   sync.Mutex
	msgs map[string][][]byte
}

func (c *collector) Publish(subject string, data []byte) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.msgs[subject] = append(c.msgs[subject], bytes.Clone(data))
	return nil
}

// FuzzIngestReader feeds arbitrary bytes to the socket reader. It must not
// panic, every published message must hold only valid records of the job its
// subject names, and every line must be either accepted or counted as dropped.
func FuzzIngestReader(f *testing.F) {
	f.Add([]byte(helloLine("j") + "\n" + stepLine("j", 0, 1, 1) + "\n" + stepLine("j", 0, 1, 2) + "\n"))
	f.Add([]byte(helloLine("a") + "\n" + stepLine("a", 0, 1, 1) + "\n" + stepLine("b", 0, 1, 1) + "\n" + helloLine("b") + "\n" + stepLine("b", 0, 1, 2) + "\n"))
	f.Add([]byte(stepLine("a", 0, 1, 1) + "\n" + stepLine("b", 0, 1, 1) + "\nnot json\n"))
	f.Add([]byte(`{"v":1,"pad":"` + strings.Repeat("z", 70<<10) + "\"}\n" + stepLine("j", 0, 1, 1)))
	f.Add([]byte("\n\n\r\n\x00"))
	f.Add([]byte(`{"v":2}` + "\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		col := &collector{msgs: map[string][][]byte{}}
		in := newServer(col, zap.NewNop())
		in.serve(bytes.NewReader(data), &peer{})
		var published int64
		for subj, msgs := range col.msgs {
			for _, m := range msgs {
				recs, bad := telemetry.DecodeBatch(m)
				if bad != 0 {
					t.Fatalf("published %d invalid lines on %s", bad, subj)
				}
				for _, r := range recs {
					if telemetry.StepSubject(r.Job) != subj {
						t.Fatalf("record of job %s published on %s", r.Job, subj)
					}
				}
				published += int64(len(recs))
			}
		}
		if s := in.Stats(); s.Accepted != published {
			t.Fatalf("accepted %d, published %d", s.Accepted, published)
		}
	})
}

func stepLine(job string, rank, world int, step int64) string {
	return fmt.Sprintf(`{"v":1,"job":%q,"attempt":1,"rank":%d,"world":%d,"step":%d,"t":%f,"dt":0.01,"samples":8,"local_sqr":2,"avg_sqr":1}`,
		job, rank, world, step, float64(time.Now().UnixNano())/1e9)
}

func helloLine(job string) string {
	return fmt.Sprintf(`{"v":1,"kind":"hello","job":%q,"attempt":1,"rank":0,"world":1,"step":0,"t":1,"token":"t"}`, job)
}
