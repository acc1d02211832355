package api

// Cost is what machines a launcher acquired (cloudvm) cost a job or an
// attempt: instance-seconds used and billed (the provider's granularity
// and minimum applied) and their price.
type Cost struct {
	// InstanceSeconds is the machines' time, summed; BilledSeconds the
	// time billed for it.
	InstanceSeconds float64 `json:"instance_s"`
	BilledSeconds   float64 `json:"billed_s"`
	// USD is the billed time at each machine's price.
	USD float64 `json:"usd"`
	// Instances lists the machines, with their part of the cost.
	Instances []InstanceCost `json:"instances,omitempty"`
}

// InstanceCost is one machine's part of a Cost.
type InstanceCost struct {
	ID     string `json:"id"`
	Type   string `json:"type"`
	Zone   string `json:"zone,omitempty"`
	Market string `json:"market"`
	// USDPerHour is its price; Seconds and BilledSeconds its time in the
	// attempt (the minimum is billed in the attempt it ended in); USD their cost.
	USDPerHour    float64 `json:"usd_per_hour"`
	Seconds       float64 `json:"s"`
	BilledSeconds float64 `json:"billed_s"`
	USD           float64 `json:"usd"`
}

// Add adds the totals of c2 to c.
func (c *Cost) Add(c2 Cost) {
	c.InstanceSeconds += c2.InstanceSeconds
	c.BilledSeconds += c2.BilledSeconds
	c.USD += c2.USD
}
