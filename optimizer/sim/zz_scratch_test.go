package sim
import ("os";"testing";"context";"github.com/scavenger-ml/scavenger/optimizer/objective")
func TestScratch(t *testing.T){
 app := os.Getenv("APP"); pol := os.Getenv("POL"); obj := os.Getenv("OBJ")
 rep, err := Run(context.Background(), Options{FS: os.DirFS(tracesDir(t)), App: app, Objective: objective.Objective{Kind: objective.Kind(obj)}, Policy: pol})
 if err != nil { t.Fatal(err) }
 for _, h := range rep.History { t.Logf("%s N%d K%d B%d start %.0f steps %.0f", h.Type, h.Nodes, h.Workers, h.Batch, h.StartS, h.Steps) }
 t.Logf("jct %.0f cost %.2f pred %.0f %.2f decision_s %.0f reason %s", rep.JCTS, rep.CostUSD, rep.PredictedJCTS, rep.PredictedCostUSD, rep.DecisionS, rep.Reason)
 t.Logf("oracle %+v ste %+v", rep.Oracle, rep.StepTimeError)
}
