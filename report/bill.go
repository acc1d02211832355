package report

// AttemptCosts are what each attempt of r's timeline cost so far: its
// machines' bill (a launcher that acquires them), or the node at the price
// from the attempt's start to the next one's (the relaunch between them
// counts to the attempt it ended), the last one to the job's end (now,
// while it runs); none without a price. They add up to CostUSD.
func (r JobReport) AttemptCosts() []float64 {
	out := make([]float64, len(r.Timeline))
	if r.Billed != nil {
		for i, a := range r.Billed.Attempts {
			if i < len(out) {
				out[i] = a.USD
			}
		}
		return out
	}
	if r.PriceUSDPerHour <= 0 {
		return out
	}
	for i, a := range r.Timeline {
		from := a.Started.Sub(r.start).Seconds()
		if i == 0 {
			from = 0
		}
		to := r.TotalS
		if i+1 < len(r.Timeline) {
			to = r.Timeline[i+1].Started.Sub(r.start).Seconds()
		}
		out[i] = max(0, to-from) / 3600 * r.PriceUSDPerHour
	}
	return out
}
