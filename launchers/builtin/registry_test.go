package builtin

import (
	"context"
	"errors"
	"reflect"
	"testing"

	"go.uber.org/zap"

	"github.com/scavenger-ml/scavenger/plugins"
)

type fakeLauncher struct{ name string }

func (f fakeLauncher) Name() string { return f.name }
func (f fakeLauncher) Capabilities(context.Context) (plugins.Capabilities, error) {
	return plugins.Capabilities{}, nil
}
func (f fakeLauncher) Start(context.Context, plugins.AttemptSpec) (plugins.Handle, error) {
	return nil, plugins.ErrUnsupported
}

func TestRegistry(t *testing.T) {
	c := NewRegistry()
	mk := func(name string) Factory {
		return func(*zap.Logger) (plugins.Launcher, error) { return fakeLauncher{name}, nil }
	}
	if err := c.Register("local", mk("local")); err != nil {
		t.Fatal(err)
	}
	if err := c.Register("broken", func(*zap.Logger) (plugins.Launcher, error) { return nil, errors.New("boom") }); err != nil {
		t.Fatal(err)
	}
	if err := c.Register("local", mk("local")); err == nil {
		t.Errorf("second Register of local succeeded")
	}
	if err := c.Register("", mk("x")); err == nil {
		t.Errorf("Register of an empty name succeeded")
	}
	if got, want := c.Names(), []string{"broken", "local"}; !reflect.DeepEqual(got, want) {
		t.Errorf("Names = %q, want %q", got, want)
	}
	l, err := c.New("local", zap.NewNop())
	if err != nil || l.Name() != "local" {
		t.Errorf("New(local) = %v, %v", l, err)
	}
	if _, err := c.New("slurm", zap.NewNop()); !errors.Is(err, plugins.ErrUnknownLauncher) {
		t.Errorf("New(slurm) = %v, want ErrUnknownLauncher", err)
	}
	if _, err := c.New("broken", zap.NewNop()); err == nil || errors.Is(err, plugins.ErrUnknownLauncher) {
		t.Errorf("New(broken) = %v, want the factory's error", err)
	}
}
