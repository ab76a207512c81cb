package eval

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/rlhost/rlhost/core"
	"github.com/rlhost/rlhost/core/sdk/envplugin"
	"github.com/rlhost/rlhost/host/config"
)

func decode(t *testing.T, block string) (*Settings, string) {
	t.Helper()
	src := `
env "e" {}
sandbox "s" { backend = "local" }
policy "p" { provider = "embedded" }
run {
  group_size = 4
  seed       = 3
}
` + block
	f, diags := config.Parse("/jobs/job.hcl", []byte(src), nil)
	if diags.HasErrors() {
		t.Fatalf("config: %v", diags)
	}
	s, diags := Decode(f)
	var msgs []string
	for _, d := range diags {
		msgs = append(msgs, d.Subject.String()+": "+d.Detail)
	}
	return s, strings.Join(msgs, "\n")
}

func TestDecodeEvalBlock(t *testing.T) {
	s, errs := decode(t, "")
	if errs != "" || s.HoldsOut() || s.Every != 0 || s.Samples != 4 || s.K != 4 || s.Seed != 3 {
		t.Errorf("defaults: %+v %s", s, errs)
	}
	s, errs = decode(t, "eval {\n  holdout = [\"b\"]\n  every = 5\n  samples = 8\n  k = 2\n}")
	if errs != "" || !slices.Equal(s.Holdout, []string{"b"}) || s.Every != 5 || s.Samples != 8 || s.K != 2 {
		t.Errorf("settings: %+v %s", s, errs)
	}
	for _, tc := range []struct{ block, want string }{
		{"eval {\n  holdout_fraction = 1.5\n}", "job.hcl:10,22-25: holdout_fraction 1.5 must be in [0, 1)"},
		{"eval {\n  holdout = [\"a\"]\n  holdout_fraction = 0.5\n}", "job.hcl:11,22-25: set holdout (task ids) or holdout_fraction, not both"},
		{"eval {\n  samples = 2\n  k = 3\n}", "job.hcl:11,7-8: k 3 must be in [1, samples = 2]"},
		{"eval {\n  every = 10\n}", "job.hcl:10,11-13: evaluating during training needs held-out tasks"},
		{"eval {\n  evry = 10\n}", `job.hcl:10,3-7: An argument named "evry" is not expected here. Did you mean "every"?`},
	} {
		_, errs := decode(t, tc.block)
		if !strings.Contains(errs, tc.want) {
			t.Errorf("%q: got %q, want %q", tc.block, errs, tc.want)
		}
	}
}

func ids(tasks []core.Task) []string { return TaskIDs(tasks) }

func TestSplit(t *testing.T) {
	all := []core.Task{{ID: "a"}, {ID: "b"}, {ID: "c"}, {ID: "d"}, {ID: "e"}, {ID: "f"}}
	s := &Settings{Holdout: []string{"e", "b"}}
	train, held, err := s.Split(all)
	if err != nil || !slices.Equal(ids(train), []string{"a", "c", "d", "f"}) || !slices.Equal(ids(held), []string{"b", "e"}) {
		t.Errorf("by id: train %v held %v err %v", ids(train), ids(held), err)
	}
	// A fraction picks the same tasks for the same seed, and others for
	// another seed.
	pick := func(seed int64) []string {
		_, held, err := (&Settings{HoldoutFraction: 0.34, Seed: seed}).Split(all)
		if err != nil {
			t.Fatal(err)
		}
		return ids(held)
	}
	first := pick(1)
	if len(first) != 2 || !slices.Equal(first, pick(1)) {
		t.Errorf("fraction 0.34 of 6 held out %v, then %v: want the same 2", first, pick(1))
	}
	differs := false
	for seed := int64(2); seed < 10; seed++ {
		differs = differs || !slices.Equal(pick(seed), first)
	}
	if !differs {
		t.Error("every seed holds out the same tasks")
	}
	if _, _, err := (&Settings{Holdout: []string{"a", "zz"}}).Split(all); err == nil || !strings.Contains(err.Error(), `"zz"`) {
		t.Errorf("an unknown id: %v", err)
	}
	if _, _, err := (&Settings{Holdout: ids(all)}).Split(all); err == nil {
		t.Error("holding out every task was accepted")
	}
	if got, err := s.Select(all, "heldout"); err != nil || len(got) != 2 {
		t.Errorf("select heldout: %v %v", ids(got), err)
	}
	if _, err := (&Settings{}).Select(all, "heldout"); err == nil {
		t.Error("heldout without held-out tasks was accepted")
	}
}

// A training run's env never offers a held-out task.
func TestTrainingEnv(t *testing.T) {
	env := TrainingEnv{Env: listEnv{"a", "b", "c"}, Settings: &Settings{Holdout: []string{"b"}}}
	got, err := env.Tasks(context.Background())
	if err != nil || !slices.Equal(ids(got), []string{"a", "c"}) {
		t.Errorf("training tasks %v %v", ids(got), err)
	}
	held, err := HeldOut(context.Background(), listEnv{"a", "b", "c"}, env.Settings)
	if err != nil || !slices.Equal(ids(held), []string{"b"}) {
		t.Errorf("held out %v %v", ids(held), err)
	}
}

type listEnv []string

func (l listEnv) Tasks(context.Context) ([]core.Task, error) {
	var out []core.Task
	for _, id := range l {
		out = append(out, core.Task{ID: id})
	}
	return out, nil
}

func (listEnv) NewEpisode(context.Context, envplugin.Episode) (envplugin.Session, envplugin.Observation, error) {
	return nil, envplugin.Observation{}, nil
}
