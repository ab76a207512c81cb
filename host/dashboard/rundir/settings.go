package rundir

import (
	"encoding/json"
	"errors"
	"io/fs"
	"path"
	"slices"
	"strings"
)

// Directories and files of a training run the settings come from; they
// mirror the training package's layout, read here without importing the
// trainer.
const (
	checkpointsDir   = "checkpoints"
	finalDir         = "final"
	trainerStateFile = "trainer_state.json"
	modelConfigFile  = "config.json"
)

// SettingsFile is one file of settings as found in the directory.
type SettingsFile struct {
	Name string          // relative to the run directory
	JSON json.RawMessage // indented
}

// Settings gathers what the directory says about how its newest run was
// configured: job.json (the job file and its variables), the trainer's
// settings from the newest checkpoint, and the model's configuration.
// Files that are absent are left out.
func (d *Dir) Settings() ([]SettingsFile, error) {
	var out []SettingsFile
	var errs []error
	add := func(name string, pick func(json.RawMessage) json.RawMessage) {
		data, err := d.readSmall(name)
		if errors.Is(err, fs.ErrNotExist) {
			return
		}
		if err != nil {
			errs = append(errs, err)
			return
		}
		raw := json.RawMessage(data)
		if pick != nil {
			raw = pick(raw)
		}
		var v any
		if err := json.Unmarshal(raw, &v); err != nil {
			errs = append(errs, err)
			return
		}
		pretty, _ := json.MarshalIndent(v, "", "  ")
		out = append(out, SettingsFile{Name: name, JSON: pretty})
	}
	if ck := d.newestCheckpoint(); ck != "" {
		add(path.Join(checkpointsDir, ck, trainerStateFile), func(raw json.RawMessage) json.RawMessage {
			var st struct {
				Config json.RawMessage `json:"config"`
			}
			if json.Unmarshal(raw, &st) == nil && len(st.Config) > 0 {
				return st.Config
			}
			return raw
		})
		if _, err := d.root.Stat(path.Join(finalDir, modelConfigFile)); err != nil {
			add(path.Join(checkpointsDir, ck, "model", modelConfigFile), nil)
		}
	}
	add(path.Join(finalDir, modelConfigFile), nil)
	return out, errors.Join(errs...)
}

// newestCheckpoint names the newest step-* directory under checkpoints/.
func (d *Dir) newestCheckpoint() string {
	f, err := d.root.Open(checkpointsDir)
	if err != nil {
		return ""
	}
	defer f.Close()
	ents, err := f.ReadDir(-1)
	if err != nil {
		return ""
	}
	var names []string
	for _, e := range ents {
		if e.IsDir() && strings.HasPrefix(e.Name(), "step-") {
			names = append(names, e.Name())
		}
	}
	if len(names) == 0 {
		return ""
	}
	slices.Sort(names) // step-000040: zero-padded, so the newest sorts last
	return names[len(names)-1]
}
