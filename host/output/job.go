package output

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"time"
)

// JobFile is job.json: the job a run was started with, so that a reader of
// the run directory sees its settings as they were, whatever became of the
// job file since.
const JobFile = "job.json"

// Job is job.json.
type Job struct {
	RunID      string            `json:"run_id"`
	ConfigPath string            `json:"config_path"`    // absolute
	Vars       map[string]string `json:"vars,omitempty"` // the --var values given
	Source     string            `json:"source"`         // the job file's text
	// The run block, defaults applied.
	Steps          int           `json:"steps"`
	BatchSize      int           `json:"batch_size"`
	GroupSize      int           `json:"group_size"`
	Concurrency    int           `json:"concurrency"`
	MaxTurns       int           `json:"max_turns"`
	Seed           int64         `json:"seed"`
	EpisodeTimeout time.Duration `json:"episode_timeout_ns"`
	Env            string        `json:"env"`
	Policy         string        `json:"policy"`
}

// WriteJob replaces job.json atomically.
func (w *Writer) WriteJob(j Job) error {
	data, err := json.MarshalIndent(j, "", "  ")
	if err != nil {
		return fmt.Errorf("encode %s: %w", JobFile, err)
	}
	return writeFileAtomic(filepath.Join(w.dir, JobFile), append(data, '\n'))
}
