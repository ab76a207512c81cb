package fakedaytona

import (
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	apiclient "github.com/daytonaio/daytona/libs/api-client-go"
)

// dto renders a sandbox as the API's Sandbox model.
func (s *Server) dto(sb *sandbox) apiclient.Sandbox {
	d := apiclient.NewSandbox(sb.ID, "fake-org", sb.Name, "daytona", cloneMap(sb.Env), cloneMap(sb.Labels),
		false, sb.NetworkBlockAll, sb.Target, float32(sb.CPU), 0, float32(sb.Memory), float32(sb.Disk), s.ToolboxURL)
	d.SetState(apiclient.SandboxState(sb.State))
	if sb.Snapshot != "" {
		d.SetSnapshot(sb.Snapshot)
	}
	if sb.NetworkAllowList != "" {
		d.SetNetworkAllowList(sb.NetworkAllowList)
	}
	if sb.AutoStopInterval >= 0 {
		d.SetAutoStopInterval(float32(sb.AutoStopInterval))
	}
	if sb.AutoDeleteInterval > -2 {
		d.SetAutoDeleteInterval(float32(sb.AutoDeleteInterval))
	}
	d.SetCreatedAt(sb.CreatedAt.Format(time.RFC3339Nano))
	return *d
}

func (s *Server) createSandbox(w http.ResponseWriter, r *http.Request) {
	var req apiclient.CreateSandbox
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		writeError(w, http.StatusBadRequest, "invalid body: "+err.Error())
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.f.rateLimitCreates > 0 {
		s.f.rateLimitCreates--
		if s.f.retryAfter > 0 {
			w.Header().Set("Retry-After", strconv.Itoa(int(math.Ceil(s.f.retryAfter.Seconds()))))
		}
		writeError(w, http.StatusTooManyRequests, "ThrottlerException: Too Many Requests")
		return
	}
	if s.f.failCreates > 0 {
		s.f.failCreates--
		writeError(w, s.f.failCreateStatus, "injected create failure")
		return
	}
	sb, err := s.newSandboxLocked(req.GetName())
	if err != nil {
		writeError(w, http.StatusConflict, err.Error())
		return
	}
	for k, v := range req.GetLabels() {
		sb.Labels[k] = v
	}
	for k, v := range req.GetEnv() {
		sb.Env[k] = v
	}
	sb.Snapshot = req.GetSnapshot()
	if req.BuildInfo != nil {
		sb.Dockerfile = req.BuildInfo.DockerfileContent
	}
	if req.Cpu != nil {
		sb.CPU = int(*req.Cpu)
	}
	if req.Memory != nil {
		sb.Memory = int(*req.Memory)
	}
	if req.Disk != nil {
		sb.Disk = int(*req.Disk)
	}
	if req.AutoStopInterval != nil {
		sb.AutoStopInterval = int(*req.AutoStopInterval)
	}
	if req.AutoDeleteInterval != nil {
		sb.AutoDeleteInterval = int(*req.AutoDeleteInterval)
	}
	sb.NetworkBlockAll = req.GetNetworkBlockAll()
	sb.NetworkAllowList = req.GetNetworkAllowList()
	if req.Target != nil {
		sb.Target = *req.Target
	}
	if s.f.failStarts > 0 {
		s.f.failStarts--
		sb.polls = -1 // marks "ends in error"
	}
	if d := s.lat.Draw(s.opts.Latency.Create); d > 0 {
		sb.readyAt = time.Now().Add(d)
		if sb.State == "started" {
			sb.State = "creating" // even with StartPolls < 0
		}
	}
	s.creates++
	if s.f.loseCreates > 0 {
		s.f.loseCreates--
		writeError(w, http.StatusBadGateway, "Bad Gateway")
		return
	}
	writeJSON(w, http.StatusOK, s.dto(sb))
}

// advanceLocked moves a new sandbox along its life cycle on each GET.
func (sb *sandbox) advanceLocked() {
	if sb.State != "creating" && sb.State != "starting" {
		return
	}
	switch {
	case sb.polls < 0:
		sb.State = "error"
	case sb.polls == 0 && !time.Now().Before(sb.readyAt):
		sb.State = "started"
	case sb.polls > 0:
		sb.polls--
	}
}

func (s *Server) getSandbox(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sb := s.findLocked(r.PathValue("id"))
	if sb == nil {
		writeError(w, http.StatusNotFound, fmt.Sprintf("Sandbox with ID or name %s not found", r.PathValue("id")))
		return
	}
	sb.advanceLocked()
	writeJSON(w, http.StatusOK, s.dto(sb))
}

func (s *Server) deleteSandbox(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sb := s.findLocked(r.PathValue("id"))
	if sb == nil {
		writeError(w, http.StatusNotFound, fmt.Sprintf("Sandbox with ID or name %s not found", r.PathValue("id")))
		return
	}
	if s.f.failDeletes > 0 {
		s.f.failDeletes--
		writeError(w, s.f.failDeleteStatus, "injected delete failure")
		return
	}
	sb.State = "destroying"
	d := s.dto(sb)
	delete(s.sandboxes, sb.ID)
	s.killLocked(sb.Root)
	os.RemoveAll(sb.Root)
	writeJSON(w, http.StatusOK, d)
}

func (s *Server) startSandbox(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sb := s.findLocked(r.PathValue("id"))
	if sb == nil {
		writeError(w, http.StatusNotFound, "sandbox not found")
		return
	}
	if sb.State == "stopped" {
		sb.State, sb.polls = "starting", 0
	}
	writeJSON(w, http.StatusOK, s.dto(sb))
}

func (s *Server) stopSandbox(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sb := s.findLocked(r.PathValue("id"))
	if sb == nil {
		writeError(w, http.StatusNotFound, "sandbox not found")
		return
	}
	sb.State = "stopped"
	s.killLocked(sb.Root)
	writeJSON(w, http.StatusOK, s.dto(sb))
}

// matchLabels filters by the JSON object in the labels query parameter, as
// the API does: every given label must be present with the same value.
func matchLabels(q string, labels map[string]string) (bool, error) {
	if q == "" {
		return true, nil
	}
	var want map[string]string
	if err := json.Unmarshal([]byte(q), &want); err != nil {
		return false, err
	}
	for k, v := range want {
		if got, ok := labels[k]; !ok || got != v {
			return false, nil
		}
	}
	return true, nil
}

func (s *Server) filtered(r *http.Request) ([]apiclient.Sandbox, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*sandbox
	for _, sb := range s.sandboxes {
		ok, err := matchLabels(r.URL.Query().Get("labels"), sb.Labels)
		if err != nil {
			return nil, err
		}
		if ok {
			out = append(out, sb)
		}
	}
	desc := r.URL.Query().Get("order") != "asc"
	sort.Slice(out, func(i, j int) bool {
		if desc {
			return out[i].ID > out[j].ID
		}
		return out[i].ID < out[j].ID
	})
	items := make([]apiclient.Sandbox, len(out))
	for i, sb := range out {
		items[i] = s.dto(sb)
	}
	return items, nil
}

func (s *Server) listSandboxes(w http.ResponseWriter, r *http.Request) {
	items, err := s.filtered(r)
	if err != nil {
		writeError(w, http.StatusBadRequest, "invalid labels: "+err.Error())
		return
	}
	writeJSON(w, http.StatusOK, items)
}

func (s *Server) listSandboxesPaginated(w http.ResponseWriter, r *http.Request) {
	items, err := s.filtered(r)
	if err != nil {
		writeError(w, http.StatusBadRequest, "invalid labels: "+err.Error())
		return
	}
	page, limit := queryInt(r, "page", 1), queryInt(r, "limit", 100)
	if page < 1 || limit < 1 || limit > 200 {
		writeError(w, http.StatusBadRequest, "page must be >= 1 and limit in 1..200")
		return
	}
	total := len(items)
	pages := (total + limit - 1) / limit
	lo := min((page-1)*limit, total)
	hi := min(lo+limit, total)
	writeJSON(w, http.StatusOK, apiclient.NewPaginatedSandboxes(items[lo:hi], float32(total), float32(page), float32(pages)))
}

// queryInt reads an integer query parameter; the generated client sends
// numbers as float32 values, so "2" and "2.0" both occur.
func queryInt(r *http.Request, name string, def int) int {
	v := strings.TrimSpace(r.URL.Query().Get(name))
	if v == "" {
		return def
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil {
		return -1
	}
	return int(f)
}
