package builtin

import (
	"fmt"
	"slices"
	"sync"

	"go.uber.org/zap"

	"github.com/scavenger-ml/scavenger/plugins"
)

// Factory makes a built-in launcher; logger is the caller's, to be named by
// the launcher.
type Factory func(logger *zap.Logger) (plugins.Launcher, error)

// Registry lists launchers by name; they run in process, without gRPC.
// The packages of the launchers do not register themselves: Catalog fills a
// registry with the built-in ones. It is safe for concurrent use.
type Registry struct {
	mu        sync.RWMutex
	factories map[string]Factory
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry { return &Registry{factories: map[string]Factory{}} }

// Register adds a launcher under name; a name may be registered once.
func (c *Registry) Register(name string, f Factory) error {
	if name == "" || f == nil {
		return fmt.Errorf("register launcher %q: empty name or nil factory", name)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, dup := c.factories[name]; dup {
		return fmt.Errorf("register launcher %q: already registered", name)
	}
	c.factories[name] = f
	return nil
}

// Names returns the registered names, sorted.
func (c *Registry) Names() []string {
	c.mu.RLock()
	defer c.mu.RUnlock()
	names := make([]string, 0, len(c.factories))
	for n := range c.factories {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// New makes the launcher registered under name; an unregistered name is
// plugins.ErrUnknownLauncher.
func (c *Registry) New(name string, logger *zap.Logger) (plugins.Launcher, error) {
	c.mu.RLock()
	f, ok := c.factories[name]
	c.mu.RUnlock()
	if !ok {
		return nil, fmt.Errorf("launcher %q (built in: %v): %w", name, c.Names(), plugins.ErrUnknownLauncher)
	}
	l, err := f(logger)
	if err != nil {
		return nil, fmt.Errorf("new launcher %q: %w", name, err)
	}
	return l, nil
}
