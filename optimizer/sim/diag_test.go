package sim

import (
	"context"
	"fmt"
	"os"
	"testing"

	"github.com/scavenger-ml/scavenger/optimizer/objective"
)

func TestDiag(t *testing.T) {
	app := os.Getenv("DIAG_APP")
	if app == "" {
		t.Skip()
	}
	rep, err := Run(context.Background(), Options{FS: os.DirFS(tracesDir(t)), App: app, Objective: objective.Objective{Kind: objective.Kind(os.Getenv("DIAG_OBJ"))}, Policy: os.Getenv("DIAG_POL")})
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range rep.History {
		fmt.Printf("%+v\n", h)
	}
	fmt.Println(rep.JCTS, rep.CostUSD, rep.Reason, rep.DecisionS, rep.PredictedJCTS)
}
