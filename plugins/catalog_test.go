package plugins

import (
	"context"
	"errors"
	"reflect"
	"testing"

	"go.uber.org/zap"
)

type fakeLauncher struct{ name string }

func (f fakeLauncher) Name() string { return f.name }
func (f fakeLauncher) Capabilities(context.Context) (Capabilities, error) {
	return Capabilities{}, nil
}
func (f fakeLauncher) Start(context.Context, AttemptSpec) (Handle, error) {
	return nil, ErrUnsupported
}

func TestCatalog(t *testing.T) {
	c := NewCatalog()
	mk := func(name string) Factory {
		return func(*zap.Logger) (Launcher, error) { return fakeLauncher{name}, nil }
	}
	if err := c.Register("local", mk("local")); err != nil {
		t.Fatal(err)
	}
	if err := c.Register("broken", func(*zap.Logger) (Launcher, error) { return nil, errors.New("boom") }); err != nil {
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
	if _, err := c.New("slurm", zap.NewNop()); !errors.Is(err, ErrUnknownLauncher) {
		t.Errorf("New(slurm) = %v, want ErrUnknownLauncher", err)
	}
	if _, err := c.New("broken", zap.NewNop()); err == nil || errors.Is(err, ErrUnknownLauncher) {
		t.Errorf("New(broken) = %v, want the factory's error", err)
	}
}
