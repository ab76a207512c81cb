package fakedaytona

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"mime/multipart"
	"net/http"
	"net/textproto"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	toolbox "github.com/daytonaio/daytona/libs/toolbox-api-client-go"
)

// running returns the root directory and env of a started sandbox, or
// writes the error the proxy would give.
func (s *Server) running(w http.ResponseWriter, r *http.Request) (root string, env map[string]string, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sb := s.sandboxes[r.PathValue("id")]
	if sb == nil {
		writeError(w, http.StatusNotFound, "sandbox not found")
		return "", nil, false
	}
	if sb.State != "started" {
		writeError(w, http.StatusBadRequest, "sandbox is not running (state "+sb.State+")")
		return "", nil, false
	}
	return sb.Root, cloneMap(sb.Env), true
}

// hostPath maps a path inside the sandbox to the host. Relative paths are
// relative to the user's home, as in the daemon.
func hostPath(root, p string) string {
	if !path.IsAbs(p) {
		p = "/home/daytona/" + p
	}
	return filepath.Join(root, filepath.FromSlash(path.Clean(p)))
}

func (s *Server) execute(w http.ResponseWriter, r *http.Request) {
	root, env, ok := s.running(w, r)
	if !ok {
		return
	}
	if s.take(&s.f.rateLimitExecs) {
		writeError(w, http.StatusTooManyRequests, "ThrottlerException: Too Many Requests")
		return
	}
	var req toolbox.ExecuteRequest
	body, _ := io.ReadAll(r.Body)
	if err := json.Unmarshal(body, &req); err != nil || strings.TrimSpace(req.Command) == "" {
		writeError(w, http.StatusBadRequest, "command is required")
		return
	}
	var timeout time.Duration
	if req.Timeout != nil && *req.Timeout > 0 {
		timeout = time.Duration(*req.Timeout) * time.Second
	}
	s.mu.Lock()
	delay := s.f.execDelay
	s.mu.Unlock()
	if delay > 0 {
		if timeout > 0 && delay >= timeout {
			time.Sleep(timeout)
			writeError(w, http.StatusRequestTimeout, fmt.Sprintf("Command execution timed out after %d seconds", *req.Timeout))
			return
		}
		time.Sleep(delay)
		if timeout > 0 {
			timeout -= delay
		}
	}

	var cmd *exec.Cmd
	switch s.opts.ExecMode {
	case ExecArgv:
		argv := splitCommand(req.Command)
		if len(argv) == 0 {
			writeError(w, http.StatusBadRequest, "empty command")
			return
		}
		cmd = exec.Command(argv[0], argv[1:]...)
	default:
		cmd = exec.Command(s.opts.Shell)
		cmd.Stdin = strings.NewReader(req.Command)
	}
	cmd.Dir = root + "/home/daytona"
	if req.Cwd != nil {
		cmd.Dir = hostPath(root, *req.Cwd)
	}
	cmd.Env = os.Environ()
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	for k, v := range req.GetEnvs() {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		writeJSON(w, http.StatusOK, toolbox.ExecuteResponse{ExitCode: toolbox.PtrInt32(-1), Result: err.Error()})
		return
	}
	s.mu.Lock()
	s.trackLocked(root, cmd.Process.Pid, true)
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.trackLocked(root, cmd.Process.Pid, false)
		s.mu.Unlock()
	}()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var expired <-chan time.Time
	if timeout > 0 {
		t := time.NewTimer(timeout)
		defer t.Stop()
		expired = t.C
	}
	select {
	case <-expired:
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-done
		writeError(w, http.StatusRequestTimeout, fmt.Sprintf("Command execution timed out after %d seconds", *req.Timeout))
	case <-done:
		code := int32(-1)
		if cmd.ProcessState != nil {
			code = int32(cmd.ProcessState.ExitCode())
		}
		writeJSON(w, http.StatusOK, toolbox.ExecuteResponse{ExitCode: &code, Result: out.String()})
	}
}

// splitCommand is the old daemon's tokenizer: it splits on spaces outside
// quotes, a quote opens until the same quote closes, and there are no
// escapes. Empty quoted words vanish, as they did there.
func splitCommand(command string) []string {
	var args []string
	var cur strings.Builder
	var quote rune
	for _, r := range command {
		switch {
		case quote == 0 && (r == '\'' || r == '"'):
			quote = r
		case quote != 0 && r == quote:
			quote = 0
		case quote == 0 && r == ' ':
			if cur.Len() > 0 {
				args = append(args, cur.String())
				cur.Reset()
			}
		default:
			cur.WriteRune(r)
		}
	}
	if cur.Len() > 0 {
		args = append(args, cur.String())
	}
	return args
}

func (s *Server) uploadFile(w http.ResponseWriter, r *http.Request) {
	root, _, ok := s.running(w, r)
	if !ok {
		return
	}
	p := r.URL.Query().Get("path")
	if p == "" {
		writeError(w, http.StatusBadRequest, "path is required")
		return
	}
	f, _, err := r.FormFile("file")
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	defer f.Close()
	dst := hostPath(root, p)
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	out, err := os.Create(dst)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	if _, err := io.Copy(out, f); err != nil {
		out.Close()
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	if err := out.Close(); err != nil {
		writeError(w, http.StatusInternalServerError, err.Error())
		return
	}
	w.WriteHeader(http.StatusOK)
}

// bulkDownload answers multipart/form-data with one "file" part per path,
// or an "error" part for a path that is missing or a directory.
func (s *Server) bulkDownload(w http.ResponseWriter, r *http.Request) {
	root, _, ok := s.running(w, r)
	if !ok {
		return
	}
	var req toolbox.FilesDownloadRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil || len(req.Paths) == 0 {
		writeError(w, http.StatusBadRequest, `request body must be {"paths": [ ... ]} and non-empty`)
		return
	}
	const boundary = "FAKE-DAYTONA-FILE-BOUNDARY"
	w.Header().Set("Content-Type", "multipart/form-data; boundary="+boundary)
	w.WriteHeader(http.StatusOK)
	mw := multipart.NewWriter(w)
	mw.SetBoundary(boundary)
	defer mw.Close()
	for _, p := range req.Paths {
		hdr := textproto.MIMEHeader{}
		data, err := readRegular(hostPath(root, p))
		if err != nil {
			hdr.Set("Content-Type", "text/plain; charset=utf-8")
			hdr.Set("Content-Disposition", fmt.Sprintf(`form-data; name="error"; filename=%q`, p))
			part, _ := mw.CreatePart(hdr)
			io.WriteString(part, "file not found or invalid: "+p)
			continue
		}
		hdr.Set("Content-Type", "application/octet-stream")
		hdr.Set("Content-Disposition", fmt.Sprintf(`form-data; name="file"; filename=%q`, p))
		part, _ := mw.CreatePart(hdr)
		part.Write(data)
	}
}

func readRegular(p string) ([]byte, error) {
	st, err := os.Stat(p)
	if err != nil {
		return nil, err
	}
	if st.IsDir() {
		return nil, errors.New("is a directory")
	}
	return os.ReadFile(p)
}

func (s *Server) download(w http.ResponseWriter, r *http.Request) {
	root, _, ok := s.running(w, r)
	if !ok {
		return
	}
	data, err := readRegular(hostPath(root, r.URL.Query().Get("path")))
	if err != nil {
		writeError(w, http.StatusNotFound, err.Error())
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Write(data)
}

func fileInfoOf(name string, st fs.FileInfo) toolbox.FileInfo {
	owner, group := "0", "0"
	if sys, ok := st.Sys().(*syscall.Stat_t); ok {
		owner, group = strconv.FormatUint(uint64(sys.Uid), 10), strconv.FormatUint(uint64(sys.Gid), 10)
	}
	return *toolbox.NewFileInfo(group, st.IsDir(), st.ModTime().Format(time.RFC3339Nano), st.Mode().String(),
		name, owner, fmt.Sprintf("%04o", st.Mode().Perm()), int32(st.Size()))
}

func statusFor(err error) int {
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return http.StatusNotFound
	case errors.Is(err, fs.ErrPermission):
		return http.StatusForbidden
	}
	return http.StatusBadRequest
}

func (s *Server) fileInfo(w http.ResponseWriter, r *http.Request) {
	root, _, ok := s.running(w, r)
	if !ok {
		return
	}
	p := r.URL.Query().Get("path")
	if p == "" {
		writeError(w, http.StatusBadRequest, "path is required")
		return
	}
	st, err := os.Stat(hostPath(root, p))
	if err != nil {
		writeError(w, statusFor(err), err.Error())
		return
	}
	writeJSON(w, http.StatusOK, fileInfoOf(st.Name(), st))
}

func (s *Server) listFiles(w http.ResponseWriter, r *http.Request) {
	root, _, ok := s.running(w, r)
	if !ok {
		return
	}
	p := r.URL.Query().Get("path")
	if p == "" {
		p = "."
	}
	entries, err := os.ReadDir(hostPath(root, p))
	if err != nil {
		writeError(w, statusFor(err), err.Error())
		return
	}
	out := make([]toolbox.FileInfo, 0, len(entries))
	for _, e := range entries {
		st, err := e.Info()
		if err != nil {
			continue
		}
		out = append(out, fileInfoOf(e.Name(), st))
	}
	writeJSON(w, http.StatusOK, out)
}

func parseMode(m string, def os.FileMode) (os.FileMode, error) {
	if m == "" {
		return def, nil
	}
	v, err := strconv.ParseUint(m, 8, 32)
	if err != nil {
		return 0, fmt.Errorf("invalid mode %q", m)
	}
	return os.FileMode(v).Perm(), nil
}

func (s *Server) createFolder(w http.ResponseWriter, r *http.Request) {
	root, _, ok := s.running(w, r)
	if !ok {
		return
	}
	q := r.URL.Query()
	mode, err := parseMode(q.Get("mode"), 0o755)
	if err != nil || q.Get("path") == "" {
		writeError(w, http.StatusBadRequest, "path and a valid octal mode are required")
		return
	}
	if err := os.MkdirAll(hostPath(root, q.Get("path")), mode); err != nil {
		writeError(w, statusFor(err), err.Error())
		return
	}
	w.WriteHeader(http.StatusCreated)
}

func (s *Server) setPermissions(w http.ResponseWriter, r *http.Request) {
	root, _, ok := s.running(w, r)
	if !ok {
		return
	}
	q := r.URL.Query()
	if q.Get("mode") != "" {
		mode, err := parseMode(q.Get("mode"), 0)
		if err != nil {
			writeError(w, http.StatusBadRequest, err.Error())
			return
		}
		if err := os.Chmod(hostPath(root, q.Get("path")), mode); err != nil {
			writeError(w, statusFor(err), err.Error())
			return
		}
	}
	w.WriteHeader(http.StatusOK)
}

func (s *Server) deleteFile(w http.ResponseWriter, r *http.Request) {
	root, _, ok := s.running(w, r)
	if !ok {
		return
	}
	q := r.URL.Query()
	p := hostPath(root, q.Get("path"))
	var err error
	if q.Get("recursive") == "true" {
		err = os.RemoveAll(p)
	} else {
		err = os.Remove(p)
	}
	if err != nil {
		writeError(w, statusFor(err), err.Error())
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
