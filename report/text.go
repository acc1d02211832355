package report

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/scavenger-ml/scavenger/telemetry"
)

// This file holds the text helpers of top's tables: columns and the
// compact forms of quantities (all ASCII, for any terminal).

// topCol is a column of one of top's tables.
type topCol struct {
	name  string
	width int
	left  bool
}

// tableLine lays cells out in cols, clipped and padded, trailing blanks cut.
func tableLine(cols []topCol, cells ...string) string {
	var b strings.Builder
	for i, c := range cols {
		if i > 0 {
			b.WriteByte(' ')
		}
		v := clip(cells[i], c.width)
		pad := strings.Repeat(" ", c.width-len([]rune(v)))
		if c.left {
			b.WriteString(v + pad)
		} else {
			b.WriteString(pad + v)
		}
	}
	return strings.TrimRight(b.String(), " ")
}

func colNames(cols []topCol) []string {
	names := make([]string, len(cols))
	for i, c := range cols {
		names[i] = c.name
	}
	return names
}

// gpuJobs names the jobs of processes, each once, in order, and counts the
// processes no job claims ("-": no process).
func gpuJobs(procs []telemetry.GPUProcess) string {
	if len(procs) == 0 {
		return "-"
	}
	var jobs []string
	seen := map[string]bool{}
	other := 0
	for _, p := range procs {
		switch {
		case p.Job == "":
			other++
		case !seen[p.Job]:
			seen[p.Job] = true
			jobs = append(jobs, p.Job)
		}
	}
	if other > 0 {
		jobs = append(jobs, fmt.Sprintf("+%d pid", other))
	}
	return strings.Join(jobs, ",")
}

// shortGPUName drops the vendor words of a GPU's name, then its last words
// while it is longer than n ("NVIDIA H100 80GB HBM3" -> "H100 80GB").
func shortGPUName(name string, n int) string {
	words := strings.Fields(name)
	for len(words) > 1 {
		switch strings.ToLower(words[0]) {
		case "nvidia", "tesla", "geforce", "quadro":
			words = words[1:]
			continue
		}
		break
	}
	for len(words) > 1 && len(strings.Join(words, " ")) > n {
		words = words[:len(words)-1]
	}
	if len(words) == 0 {
		return "-"
	}
	return clip(strings.Join(words, " "), n)
}

// bytesShort formats a byte count (or rate) in at most 5 characters, in
// binary units: 512, 1.5K, 71G, 2.0T.
func bytesShort(v float64) string {
	if !(v >= 0) || math.IsInf(v, 0) {
		return "-"
	}
	if v < 1024 {
		return fmt.Sprintf("%.0f", v)
	}
	for _, u := range []string{"K", "M", "G", "T", "P"} {
		v /= 1024
		if v < 9.95 {
			return fmt.Sprintf("%.1f%s", v, u)
		}
		if v < 1023.5 || u == "P" {
			return fmt.Sprintf("%.0f%s", v, u)
		}
	}
	return "-"
}

func memPair(used, total *uint64) string {
	if used == nil && total == nil {
		return "-"
	}
	u, t := "-", "-"
	if used != nil {
		u = bytesShort(float64(*used))
	}
	if total != nil {
		t = bytesShort(float64(*total))
	}
	return u + "/" + t
}

func watts(v *float64) string {
	if v == nil {
		return "-"
	}
	return fmt.Sprintf("%.0fW", *v)
}

func celsius(v *float64) string {
	if v == nil {
		return "-"
	}
	return fmt.Sprintf("%.0fC", *v)
}

func loadText(v float64) string {
	if v < 10 {
		return fmt.Sprintf("%.2f", v)
	}
	if v < 1000 {
		return fmt.Sprintf("%.1f", v)
	}
	return fmt.Sprintf("%.0f", v)
}

// coresText formats a job's CPU cores: 0.25, 3.1, 12.
func coresText(v *float64) string {
	switch {
	case v == nil:
		return "-"
	case *v < 10:
		return fmt.Sprintf("%.2f", *v)
	case *v < 100:
		return fmt.Sprintf("%.1f", *v)
	}
	return fmt.Sprintf("%.0f", *v)
}

// AgeText formats an age in at most 3 characters: 4s, 12m, 3h, 9d.
func AgeText(d time.Duration) string {
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh", int(d.Hours()))
	}
	return fmt.Sprintf("%dd", int(d.Hours())/24)
}

// clip cuts s to n characters, marking the cut with "+" (top writes ASCII
// only, for any terminal at the end of an SSH session).
func clip(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	if n <= 1 {
		return string([]rune(s)[:n])
	}
	return string([]rune(s)[:n-1]) + "+"
}

func configText(k, b int) string {
	if b <= 0 {
		return fmt.Sprintf("%dx-", k)
	}
	return fmt.Sprintf("%dx%d", k, b)
}

func stepText(s int64) string {
	if s <= 0 {
		return "-"
	}
	return fmt.Sprint(s)
}

// siText formats a non-negative quantity in at most 6 characters: 950, 12.3k, 4.5M.
func siText(v float64) string {
	switch {
	case !(v > 0) || math.IsInf(v, 0):
		return "-"
	case v < 10:
		return fmt.Sprintf("%.1f", v)
	case v < 10e3:
		return fmt.Sprintf("%.0f", v)
	case v < 1e6:
		return fmt.Sprintf("%.1fk", v/1e3)
	case v < 1e9:
		return fmt.Sprintf("%.1fM", v/1e6)
	}
	return fmt.Sprintf("%.1fG", v/1e9)
}

// msText formats a step time in at most 7 characters: 71.7ms, 712ms, 1.23s, 42s.
func msText(s float64) string {
	switch {
	case !(s > 0) || math.IsInf(s, 0):
		return "-"
	case s < 0.1:
		return fmt.Sprintf("%.1fms", s*1e3)
	case s < 1:
		return fmt.Sprintf("%.0fms", s*1e3)
	case s < 10:
		return fmt.Sprintf("%.2fs", s)
	}
	return durText(s)
}

// leftText is the time left: "~" and the point, or with interval its 90 %
// interval when known ("4m-7m"); past the forecast, its lower end (">5s").
func leftText(r TopRow, interval bool) string {
	switch {
	case !r.Active || !r.Predicted:
		return "-"
	case math.IsInf(r.LeftHiS, 1):
		return ">" + shortDur(r.LeftLoS)
	case interval && r.LeftHiS > 0:
		return shortDur(r.LeftLoS) + "-" + shortDur(r.LeftHiS)
	}
	return "~" + durText(r.LeftS)
}

// shortDur is seconds in one unit: 42s, 5m, 3h, 2d.
func shortDur(s float64) string {
	switch {
	case s < 60:
		return fmt.Sprintf("%.0fs", s)
	case s < 3600:
		return fmt.Sprintf("%.0fm", s/60)
	case s < 48*3600:
		return fmt.Sprintf("%.0fh", s/3600)
	}
	return fmt.Sprintf("%.0fd", s/86400)
}

// durText formats seconds compactly: 42s, 3m05s, 2h10m, 3d04h.
func durText(s float64) string {
	d := time.Duration(s * float64(time.Second)).Round(time.Second)
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm%02ds", int(d.Minutes()), int(d.Seconds())%60)
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
	}
	return fmt.Sprintf("%dd%02dh", int(d.Hours())/24, int(d.Hours())%24)
}

// costCell is costText, or with interval the 90 % interval of the cost
// at the finish when known ("$1.2-1.9").
func costCell(r TopRow, interval bool) string {
	if interval && r.Active && r.Predicted && r.CostHiUSD > 0 && !math.IsInf(r.CostHiUSD, 1) {
		return fmt.Sprintf("$%s-%s", usdShort(r.CostLoUSD), usdShort(r.CostHiUSD))
	}
	return costText(r)
}

// costText is what the job cost, or will at its finish ("~" and the point).
func costText(r TopRow) string {
	if !(r.CostUSD > 0) {
		return "-"
	}
	var v string
	switch {
	case r.CostUSD < 100:
		v = fmt.Sprintf("$%.2f", r.CostUSD)
	case r.CostUSD < 100e3:
		v = fmt.Sprintf("$%.0f", r.CostUSD)
	default:
		v = fmt.Sprintf("$%.0fk", r.CostUSD/1e3)
	}
	if r.Active && r.Predicted {
		return "~" + v
	}
	return v
}

// usdShort is dollars in three significant digits.
func usdShort(v float64) string {
	if v >= 1000 {
		return fmt.Sprintf("%.0fk", v/1000)
	}
	return strconv.FormatFloat(v, 'g', 3, 64)
}

// ratioPct formats a ratio in [0, 1] as a whole percentage ("-": unknown).
func ratioPct(v *float64) string {
	if v == nil {
		return "-"
	}
	return fmt.Sprintf("%.0f%%", *v*100)
}
