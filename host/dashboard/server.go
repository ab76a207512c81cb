// Package dashboard serves a local web page for rlhost runs: curves of
// every per-step figure in metrics.jsonl (several runs overlaid), the
// run's health, its settings, and a rollout viewer that pages through
// trajectories.jsonl and finds text in it. Pages are rendered on the
// server (html/template, charts as SVG) and kept current by a small
// embedded script that listens for changes; nothing is fetched from the
// network.
//
// It only reads run directories (through package rundir); it deliberately
// does not start or steer runs, keep state of its own, or serve any file
// by a name taken from a request.
package dashboard

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/rlhost/rlhost/host/dashboard/rundir"
)

//go:embed assets
var assets embed.FS

// Options configure a Server.
type Options struct {
	Dirs []string // run directories, in the order the page lists them
	// Parents are directories of runs (runs/): a run directory that
	// appears in one later is added as the dashboard finds it.
	Parents []string
	// Live is the run this process is running (rlhost run --ui), whose
	// directory is Dirs[0]; nil for none.
	Live *Live
	// Poll is how often the directories are checked for new lines;
	// 0 means DefaultPoll.
	Poll time.Duration
	// AnyHost accepts requests for any Host name. Without it only
	// loopback names are answered, so a web page elsewhere cannot reach
	// the dashboard through a name it points at 127.0.0.1 (DNS
	// rebinding).
	AnyHost bool
}

// DefaultPoll is how often a Server looks for new lines by default.
const DefaultPoll = 500 * time.Millisecond

// Server serves the dashboard of some run directories.
type Server struct {
	opt   Options
	pages *template.Template
	now   func() time.Time

	mu      sync.Mutex
	dirs    []*rundir.Dir
	known   map[string]bool // cleaned paths of dirs
	clients map[chan struct{}]bool
	errs    map[string]string // the last refresh error of each directory
	errsVer uint64            // bumped when errs changes
}

// New opens the run directories and indexes them.
func New(opt Options) (*Server, error) {
	if opt.Poll <= 0 {
		opt.Poll = DefaultPoll
	}
	pages, err := parsePages()
	if err != nil {
		return nil, err
	}
	s := &Server{opt: opt, pages: pages, now: time.Now, clients: map[chan struct{}]bool{}, errs: map[string]string{}, known: map[string]bool{}}
	for _, p := range opt.Dirs {
		if err := s.add(p); err != nil {
			s.Close()
			return nil, err
		}
	}
	return s, nil
}

// add opens one more run directory.
func (s *Server) add(path string) error {
	d, err := rundir.Open(path)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.dirs = append(s.dirs, d)
	s.known[filepath.Clean(path)] = true
	return nil
}

// dirList is the directories served, in order.
func (s *Server) dirList() []*rundir.Dir {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.dirs)
}

// discover adds the run directories that appeared in Options.Parents.
func (s *Server) discover() {
	for _, parent := range s.opt.Parents {
		ents, err := os.ReadDir(parent)
		if err != nil {
			continue
		}
		for _, e := range ents {
			p := filepath.Join(parent, e.Name())
			s.mu.Lock()
			known := s.known[filepath.Clean(p)]
			s.mu.Unlock()
			if known || !e.IsDir() || !rundir.IsRunDir(p) {
				continue
			}
			if err := s.add(p); err != nil {
				s.mu.Lock()
				if s.errs[p] != err.Error() {
					s.errs[p] = err.Error()
					s.errsVer++
				}
				s.mu.Unlock()
			}
		}
	}
}

// Close releases the directories.
func (s *Server) Close() error {
	var errs []error
	for _, d := range s.dirList() {
		errs = append(errs, d.Close())
	}
	return errors.Join(errs...)
}

// Handler is the dashboard's HTTP handler.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", s.fresh(s.overview))
	mux.HandleFunc("GET /runs/{run}/rollouts", s.fresh(s.rollouts))
	mux.HandleFunc("GET /runs/{run}/episodes/{ep}", s.fresh(s.episode))
	mux.HandleFunc("GET /runs/{run}/settings", s.fresh(s.settings))
	mux.HandleFunc("GET /events", s.events)
	mux.HandleFunc("GET /static/{name}", s.static)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) { s.notFound(w, r, "No such page.") })
	return s.guard(mux)
}

// Serve serves the dashboard on ln until ctx ends, looking for new lines
// every Poll meanwhile.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	srv := &http.Server{Handler: s.Handler(), ReadHeaderTimeout: 10 * time.Second, BaseContext: func(net.Listener) context.Context { return ctx }}
	go s.watch(ctx)
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		defer cancel()
		srv.Shutdown(sctx)
	}()
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("dashboard: %w", err)
	}
	return nil
}

// refresh brings every directory up to date.
func (s *Server) refresh() {
	for _, d := range s.dirList() {
		_, err := d.Refresh()
		s.mu.Lock()
		old, had := s.errs[d.Path()]
		switch {
		case err != nil && old != err.Error():
			s.errs[d.Path()] = err.Error()
			s.errsVer++
		case err == nil && had:
			delete(s.errs, d.Path())
			s.errsVer++
		}
		s.mu.Unlock()
	}
}

// version changes whenever anything a page shows does: a directory, a
// refresh error, or the live counts.
func (s *Server) version() uint64 {
	dirs := s.dirList()
	v := uint64(len(dirs))
	for _, d := range dirs {
		v += d.Version()
	}
	if s.opt.Live != nil {
		v += s.opt.Live.Version()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return v + s.errsVer
}

// fresh has every page show the files as they are when it is asked for,
// not as the last poll found them.
func (s *Server) fresh(next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		s.refresh()
		next(w, r)
	}
}

// watch refreshes the directories and tells the pages open when
// something changed, whoever's refresh found it (a page's request
// refreshes too).
func (s *Server) watch(ctx context.Context) {
	t := time.NewTicker(s.opt.Poll)
	defer t.Stop()
	seen := s.version()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		s.discover()
		s.refresh()
		if v := s.version(); v != seen {
			seen = v
			s.notify()
		}
	}
}

func (s *Server) notify() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for c := range s.clients {
		select {
		case c <- struct{}{}:
		default: // a change is already pending for it
		}
	}
}

// events streams a message each time a run changed (server-sent events);
// the page fetches itself again on each.
func (s *Server) events(w http.ResponseWriter, r *http.Request) {
	fl, ok := w.(http.Flusher)
	if !ok {
		http.Error(w, "streaming unsupported", http.StatusInternalServerError)
		return
	}
	c := make(chan struct{}, 1)
	s.mu.Lock()
	s.clients[c] = true
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.clients, c)
		s.mu.Unlock()
	}()
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	fmt.Fprint(w, "retry: 2000\n\n")
	fl.Flush()
	keep := time.NewTicker(15 * time.Second)
	defer keep.Stop()
	for n := 1; ; n++ {
		select {
		case <-r.Context().Done():
			return
		case <-keep.C:
			fmt.Fprint(w, ": keep-alive\n\n")
		case <-c:
			fmt.Fprintf(w, "data: %d\n\n", n)
		}
		fl.Flush()
	}
}

// guard answers GET and HEAD only, checks the Host name, and forbids the
// page to load anything from elsewhere or run inline script: even markup
// that escaped escaping would stay inert.
func (s *Server) guard(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cross-Origin-Resource-Policy", "same-origin")
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			h.Set("Allow", "GET, HEAD")
			http.Error(w, "the dashboard is read-only", http.StatusMethodNotAllowed)
			return
		}
		if !s.opt.AnyHost && !LoopbackHost(r.Host) {
			http.Error(w, "this dashboard answers to loopback names only (localhost, 127.0.0.1, [::1])", http.StatusForbidden)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// LoopbackHost reports whether a Host header names this machine's
// loopback interface.
func LoopbackHost(host string) bool {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// static serves the page's embedded script and style sheet.
func (s *Server) static(w http.ResponseWriter, r *http.Request) {
	types := map[string]string{"app.js": "text/javascript; charset=utf-8", "app.css": "text/css; charset=utf-8"}
	name := r.PathValue("name")
	ct, ok := types[name]
	if !ok {
		s.notFound(w, r, "No such file.")
		return
	}
	data, err := assets.ReadFile("assets/" + name)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", ct)
	w.Header().Set("Cache-Control", "no-cache")
	w.Write(data)
}

// FindRunDirs sorts the paths a user gave: a path that holds a run is a
// run directory; any other directory is a parent, which stands for the
// runs one level down (runs/), now and later. No path at all means
// ./runs.
func FindRunDirs(paths []string) (dirs, parents []string, err error) {
	if len(paths) == 0 {
		paths = []string{"runs"}
		if _, err := os.Stat("runs"); err != nil {
			return nil, nil, errors.New("no run directory given, and there is no ./runs; pass RUN_DIR (the output directory of rlhost run)")
		}
	}
	for _, p := range paths {
		st, err := os.Stat(p)
		if err != nil {
			return nil, nil, fmt.Errorf("run directory %s: %w", p, errors.Unwrap(err))
		}
		if !st.IsDir() {
			return nil, nil, fmt.Errorf("%s is not a directory; pass a run's output directory", p)
		}
		if rundir.IsRunDir(p) {
			dirs = append(dirs, p)
			continue
		}
		ents, err := os.ReadDir(p)
		if err != nil {
			return nil, nil, fmt.Errorf("run directory %s: %w", p, err)
		}
		parents = append(parents, p)
		for _, e := range ents {
			if sub := filepath.Join(p, e.Name()); e.IsDir() && rundir.IsRunDir(sub) {
				dirs = append(dirs, sub)
			}
		}
	}
	return dirs, parents, nil
}
