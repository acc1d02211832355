package readme

import (
	"reflect"
	"testing"
)

func TestBlocksAndCommands(t *testing.T) {
	md := []byte("# T\n\n## A session\n\n```console\n$ scavctl run -d \\\n    --name bg -- true  # a comment\nbg-7c01d2\n$ scavctl attach bg\n```\n\n" +
		"## Running your script\n\n- item:\n\n  ```sh\n  /usr/bin/python3 -m venv .venv   # a venv\n  .venv/bin/pip install ./python\n  ```\n\n```python\nimport scavenger\njob = scavenger.run([\"x\"])\n```\n")
	bs := Blocks(md)
	if len(bs) != 3 || bs[0].Section != "A session" || bs[1].Section != "Running your script" || bs[2].Lang != "python" {
		t.Fatalf("blocks %+v", bs)
	}
	want := []Command{{Line: "scavctl run -d --name bg -- true", Shown: "bg-7c01d2\n"}, {Line: "scavctl attach bg"}}
	if got := bs[0].Commands(); !reflect.DeepEqual(got, want) {
		t.Errorf("console commands %q, want %q", got, want)
	}
	if got := bs[1].Commands(); len(got) != 2 || got[0].Line != "/usr/bin/python3 -m venv .venv" || got[1].Line != ".venv/bin/pip install ./python" {
		t.Errorf("sh commands of a list item %q", got)
	}
	if !bs[0].Runnable() || !bs[1].Runnable() || bs[2].Runnable() || !bs[2].PythonAPI() {
		t.Errorf("runnable %v %v %v, python API %v", bs[0].Runnable(), bs[1].Runnable(), bs[2].Runnable(), bs[2].PythonAPI())
	}
}
