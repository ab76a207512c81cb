package serve

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"mime"
	"net/http"
	"os"
	"slices"
	"sync"

	"github.com/rlhost/rlhost/trainer/lora"
	"github.com/rlhost/rlhost/trainer/model"
)

// The server's LoRA adapters, behind vLLM's runtime adapter API so that
// one client serves both (vllm/entrypoints/serve/lora): POST
// /v1/load_lora_adapter {"lora_name", "lora_path", "load_inplace"} and POST
// /v1/unload_lora_adapter {"lora_name"}, answering 200 with a plain-text
// "Success: ..." or vLLM's {"error": {message, type, param, code}} with
// the status as an integer code. A request names an adapter in "model".
//
// The model carries one adapter at a time. Requests that name the adapter
// in use run together; one that names another waits until they are done,
// and the swap happens with no generation in flight.

// AdapterHost is what the server needs of LoRA: reading a PEFT directory
// and attaching an adapter to the cache it generates with. LoRA (below)
// is the one for trainer/lora's PEFT adapters.
type AdapterHost interface {
	// LoadAdapter reads the PEFT adapter in dir. An error wrapping
	// fs.ErrNotExist means there is none there.
	LoadAdapter(dir string) (any, error)
	// UseAdapter makes c generate with adapter (a value LoadAdapter
	// returned), or with the base weights alone when adapter is nil. It
	// is called while no generation runs.
	UseAdapter(c *model.Cache, adapter any) error
}

// LoRA serves PEFT adapters (trainer/lora) for m: each is read onto m's
// device and applied on top of the base weights, which stay untouched.
func LoRA(m *model.Model) AdapterHost { return loraHost{m} }

type loraHost struct{ m *model.Model }

func (h loraHost) LoadAdapter(dir string) (any, error) {
	if _, err := os.Stat(dir); err != nil {
		return nil, err
	}
	return lora.Load(h.m.Device(), h.m.Cfg, dir)
}

func (h loraHost) UseAdapter(c *model.Cache, a any) error {
	ad, _ := a.(*model.Adapter)
	if ad == nil {
		ad = h.m.Adapter() // the model's own, if it has one
	}
	return c.SetAdapter(ad)
}

// adapterSet is the server's loaded adapters and which one the model
// carries.
type adapterSet struct {
	host AdapterHost

	mu     sync.Mutex
	cond   *sync.Cond
	loaded map[string]loadedAdapter
	active string // "" is the base model
	stale  bool   // active was replaced in place: attach it again
	users  int    // requests running with active
}

type loadedAdapter struct {
	path    string
	adapter any
}

func newAdapterSet(host AdapterHost) *adapterSet {
	a := &adapterSet{host: host, loaded: map[string]loadedAdapter{}}
	a.cond = sync.NewCond(&a.mu)
	return a
}

func (a *adapterSet) has(name string) bool {
	if a == nil {
		return false
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	_, ok := a.loaded[name]
	return ok
}

// acquire makes the model carry adapter name ("" the base model) for one
// request, waiting for requests that use another one. The caller runs
// release when its generation is over.
func (s *Server) acquire(ctx context.Context, name string) (release func(), err error) {
	a := s.adapters
	if a == nil {
		return func() {}, nil
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	for (a.active != name || a.stale) && a.users > 0 {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		a.cond.Wait()
	}
	if a.active != name || a.stale {
		var adapter any
		if name != "" {
			l, ok := a.loaded[name]
			if !ok {
				return nil, fmt.Errorf("the lora adapter '%s' was unloaded", name)
			}
			adapter = l.adapter
		}
		if err := s.Update(ctx, func() error { return a.host.UseAdapter(s.eng.cache, adapter) }); err != nil {
			return nil, err
		}
		a.active, a.stale = name, false
	}
	a.users++
	return func() {
		a.mu.Lock()
		a.users--
		a.mu.Unlock()
		a.cond.Broadcast()
	}, nil
}

// vLLM's ErrorResponse.
func writeVLLMError(w http.ResponseWriter, status int, typ, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"error": map[string]any{"message": msg, "type": typ, "param": nil, "code": status}})
}

// adapterBody decodes an adapter route's JSON body as vLLM does: the
// content type must be JSON, and a body that does not fit is a 400.
func adapterBody(w http.ResponseWriter, r *http.Request, dst any) bool {
	mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if mt != "application/json" {
		writeVLLMError(w, http.StatusBadRequest, "Bad Request", "Unsupported Media Type: Only 'application/json' is allowed")
		return false
	}
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 1<<20))
	if err == nil {
		err = json.Unmarshal(b, dst)
	}
	if err != nil {
		writeVLLMError(w, http.StatusBadRequest, "Bad Request", fmt.Sprintf("validation error: %v", err))
		return false
	}
	return true
}

func (s *Server) loadAdapter(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Name        *string `json:"lora_name"`
		Path        *string `json:"lora_path"`
		LoadInplace bool    `json:"load_inplace"`
	}
	if !adapterBody(w, r, &req) {
		return
	}
	if req.Name == nil || req.Path == nil {
		writeVLLMError(w, http.StatusBadRequest, "Bad Request", "validation error: lora_name and lora_path: Field required")
		return
	}
	name, path := *req.Name, *req.Path
	if name == "" || path == "" {
		writeVLLMError(w, http.StatusBadRequest, "InvalidUserInput", "Both 'lora_name' and 'lora_path' must be provided.")
		return
	}
	if name == s.opts.ModelName {
		writeVLLMError(w, http.StatusBadRequest, "InvalidUserInput", fmt.Sprintf("'%s' is the base model's name.", name))
		return
	}
	a := s.adapters
	if a.has(name) && !req.LoadInplace {
		writeVLLMError(w, http.StatusBadRequest, "InvalidUserInput",
			fmt.Sprintf("The lora adapter '%s' has already been loaded. If you want to load the adapter in place, set 'load_inplace' to True.", name))
		return
	}
	adapter, err := a.host.LoadAdapter(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		writeVLLMError(w, http.StatusNotFound, "NotFoundError", fmt.Sprintf("Loading lora %s failed: No adapter found for %s", name, path))
		return
	case err != nil:
		writeVLLMError(w, http.StatusInternalServerError, "InternalServerError", fmt.Sprintf("Loading lora %s from %s failed: %v", name, path, err))
		return
	}
	a.mu.Lock()
	a.loaded[name] = loadedAdapter{path: path, adapter: adapter}
	if a.active == name {
		a.stale = true
	}
	a.mu.Unlock()
	s.log.Info("loaded LoRA adapter", "name", name, "path", path)
	w.WriteHeader(http.StatusOK)
	fmt.Fprintf(w, "Success: LoRA adapter '%s' added successfully.", name)
}

func (s *Server) unloadAdapter(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Name *string `json:"lora_name"`
	}
	if !adapterBody(w, r, &req) {
		return
	}
	if req.Name == nil {
		writeVLLMError(w, http.StatusBadRequest, "Bad Request", "validation error: lora_name: Field required")
		return
	}
	name := *req.Name
	if name == "" {
		writeVLLMError(w, http.StatusBadRequest, "InvalidUserInput", "'lora_name' needs to be provided to unload a LoRA adapter.")
		return
	}
	a := s.adapters
	a.mu.Lock()
	if _, ok := a.loaded[name]; !ok {
		a.mu.Unlock()
		writeVLLMError(w, http.StatusNotFound, "NotFoundError", fmt.Sprintf("The lora adapter '%s' cannot be found.", name))
		return
	}
	// Requests already running with it finish with it; the model drops it
	// when the next request needs another.
	delete(a.loaded, name)
	a.mu.Unlock()
	s.log.Info("unloaded LoRA adapter", "name", name)
	w.WriteHeader(http.StatusOK)
	fmt.Fprintf(w, "Success: LoRA adapter '%s' removed successfully.", name)
}

// adapterCards are /v1/models entries for the loaded adapters, as vLLM
// lists them: root is the adapter's path, parent the base model.
func (s *Server) adapterCards() []map[string]any {
	a := s.adapters
	if a == nil {
		return nil
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	var names []string
	for n := range a.loaded {
		names = append(names, n)
	}
	slices.Sort(names)
	var out []map[string]any
	for _, n := range names {
		out = append(out, map[string]any{"id": n, "object": "model", "created": 0, "owned_by": "rlhost",
			"root": a.loaded[n].path, "parent": s.opts.ModelName})
	}
	return out
}

// modelName is the model a response names: the adapter asked for, or
// the base model.
func (p *params) modelName(base string) string {
	if p.adapter != "" {
		return p.adapter
	}
	return base
}
