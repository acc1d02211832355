package ec2emu

import (
	"encoding/xml"
	"net/http"
	"time"
)

// xmlns is the namespace of the EC2 API version the SDK speaks.
const xmlns = "http://ec2.amazonaws.com/doc/2016-11-15/"

// The answers, in the shapes of the EC2 API reference.

type tag struct {
	Key   string `xml:"key"`
	Value string `xml:"value"`
}

type state struct {
	Code int    `xml:"code"`
	Name string `xml:"name"`
}

// stateCodes are EC2's codes of the instance states.
var stateCodes = map[string]int{"pending": 0, "running": 16, "shutting-down": 32, "terminated": 48}

type placement struct {
	AvailabilityZone string `xml:"availabilityZone"`
}

type instanceXML struct {
	InstanceID        string    `xml:"instanceId"`
	ImageID           string    `xml:"imageId"`
	State             state     `xml:"instanceState"`
	PrivateIPAddress  string    `xml:"privateIpAddress,omitempty"`
	InstanceType      string    `xml:"instanceType"`
	LaunchTime        string    `xml:"launchTime"`
	Placement         placement `xml:"placement"`
	InstanceLifecycle string    `xml:"instanceLifecycle,omitempty"`
	ClientToken       string    `xml:"clientToken,omitempty"`
	Tags              []tag     `xml:"tagSet>item"`
}

type reservationXML struct {
	ReservationID string        `xml:"reservationId"`
	OwnerID       string        `xml:"ownerId"`
	Instances     []instanceXML `xml:"instancesSet>item"`
}

type runInstancesResponse struct {
	XMLName   xml.Name `xml:"RunInstancesResponse"`
	Xmlns     string   `xml:"xmlns,attr"`
	RequestID string   `xml:"requestId"`
	reservationXML
}

type describeInstancesResponse struct {
	XMLName      xml.Name         `xml:"DescribeInstancesResponse"`
	Xmlns        string           `xml:"xmlns,attr"`
	RequestID    string           `xml:"requestId"`
	Reservations []reservationXML `xml:"reservationSet>item"`
}

type stateChange struct {
	InstanceID    string `xml:"instanceId"`
	CurrentState  state  `xml:"currentState"`
	PreviousState state  `xml:"previousState"`
}

type terminateInstancesResponse struct {
	XMLName   xml.Name      `xml:"TerminateInstancesResponse"`
	Xmlns     string        `xml:"xmlns,attr"`
	RequestID string        `xml:"requestId"`
	Changes   []stateChange `xml:"instancesSet>item"`
}

type spotPriceXML struct {
	InstanceType       string `xml:"instanceType"`
	ProductDescription string `xml:"productDescription"`
	SpotPrice          string `xml:"spotPrice"`
	Timestamp          string `xml:"timestamp"`
	AvailabilityZone   string `xml:"availabilityZone"`
}

type describeSpotPriceHistoryResponse struct {
	XMLName   xml.Name       `xml:"DescribeSpotPriceHistoryResponse"`
	Xmlns     string         `xml:"xmlns,attr"`
	RequestID string         `xml:"requestId"`
	Prices    []spotPriceXML `xml:"spotPriceHistorySet>item"`
	NextToken string         `xml:"nextToken"`
}

// errorResponse is EC2's error document.
type errorResponse struct {
	XMLName xml.Name `xml:"Response"`
	Errors  []struct {
		Code    string `xml:"Code"`
		Message string `xml:"Message"`
	} `xml:"Errors>Error"`
	RequestID string `xml:"RequestID"`
}

func isoTime(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000Z") }

func writeXML(w http.ResponseWriter, v any) {
	b, err := xml.Marshal(v)
	if err != nil {
		writeError(w, http.StatusInternalServerError, "InternalError", err.Error())
		return
	}
	w.Header().Set("Content-Type", "text/xml;charset=UTF-8")
	_, _ = w.Write(append([]byte(xml.Header), b...))
}

func writeError(w http.ResponseWriter, status int, code, msg string) {
	var e errorResponse
	e.Errors = append(e.Errors, struct {
		Code    string `xml:"Code"`
		Message string `xml:"Message"`
	}{code, msg})
	e.RequestID = newID("req-")
	b, _ := xml.Marshal(e)
	w.Header().Set("Content-Type", "text/xml;charset=UTF-8")
	w.WriteHeader(status)
	_, _ = w.Write(append([]byte(xml.Header), b...))
}
