// Package preflight checks, before the first episode of a run, that the
// services the job depends on answer: the policy's server (GET /models,
// which also confirms the model name) and the sandbox backend (one cheap
// authenticated call). A failure is one line that names the block, its
// file:line and the cause, with the URL the service's own client reports.
//
// It starts nothing and retries nothing itself: it is given the job's
// started plugins and built policy, and each client applies the retries its
// block configures, so a flaky service is not mistaken for a dead one.
package preflight

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"sync"

	"github.com/hashicorp/hcl/v2"

	"github.com/rlhost/rlhost/core/labels"
	"github.com/rlhost/rlhost/host/config"
	"github.com/rlhost/rlhost/host/pluginmgr"
	"github.com/rlhost/rlhost/host/policy"
)

// probeLabel is a label no sandbox carries: listing by it costs the backend
// one authenticated call and returns nothing.
const probeLabel = labels.Preflight

// Check checks the run's policy and the sandbox backend of the run's env.
// pol and backend may be nil (nothing to check: a replay policy, an env
// that needs no sandbox). The checks run concurrently; the returned error
// has one line per failed service. Retries of the policy check are
// reported to notices as they happen, one line each ("rlhost: ..."), so a
// service that takes its retries to fail is not silent; nil means quiet.
func Check(ctx context.Context, f *config.File, pol policy.Policy, backend *pluginmgr.Instance, notices io.Writer) error {
	var (
		mu   sync.Mutex
		errs []error
		wg   sync.WaitGroup
	)
	fail := func(err error) {
		mu.Lock()
		defer mu.Unlock()
		errs = append(errs, err)
	}
	if c, ok := pol.(policy.Checker); ok {
		label, where := "policy", hcl.Range{}
		if pb := f.Policy(); pb != nil {
			label, where = fmt.Sprintf("policy %q", pb.Name), pb.DefRange
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			notify := func(msg string) {
				if notices != nil {
					mu.Lock()
					defer mu.Unlock()
					fmt.Fprintf(notices, "rlhost: %s (%s): %s\n", label, at(where), msg)
				}
			}
			if err := c.Check(ctx, notify); err != nil {
				fail(fmt.Errorf("%s (%s): %w", label, at(where), err))
			}
		}()
	}
	if backend != nil {
		label, where := "sandbox", hcl.Range{}
		if e := f.Env(); e != nil {
			if sb := f.Sandbox(e.Sandbox); sb != nil {
				label, where = fmt.Sprintf("sandbox %q", sb.Name), sb.DefRange
			}
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := checkBackend(ctx, backend); err != nil {
				fail(fmt.Errorf("%s (%s): backend %s: %w", label, at(where), backend.Info().Name, err))
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

func checkBackend(ctx context.Context, in *pluginmgr.Instance) error {
	c, err := in.Backend(ctx)
	if err != nil {
		return err
	}
	if _, err := c.List(ctx, map[string]string{probeLabel: "probe"}); err != nil {
		return in.Crashed(err)
	}
	return nil
}

// at renders a block's position as file:line, the file relative to the
// working directory when that is shorter, as the user typed it.
func at(r hcl.Range) string {
	if r.Filename == "" {
		return "unknown position"
	}
	name := r.Filename
	if rel, err := filepath.Rel(".", name); err == nil && len(rel) < len(name) {
		name = rel
	}
	return fmt.Sprintf("%s:%d", name, r.Start.Line)
}
