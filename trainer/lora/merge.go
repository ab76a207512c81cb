package lora

import (
	"fmt"
	"slices"

	"github.com/rlhost/rlhost/trainer/model"
	"github.com/rlhost/rlhost/trainer/safetensors"
)

// Merge adds the adapter into the base model's weights in place,
// W += scale·B·A for every adapted projection, as PEFT's merge_and_unload
// does; afterwards m alone computes what m with a attached computed.
func Merge(m *model.Model, a *model.Adapter) error {
	if a.Device() != m.Device() {
		return fmt.Errorf("lora: merge: adapter and model live on different devices")
	}
	if a.ModelCfg.NumLayers != m.Cfg.NumLayers {
		return fmt.Errorf("lora: merge: adapter has %d layers, model %d", a.ModelCfg.NumLayers, m.Cfg.NumLayers)
	}
	be, r := m.Device(), a.Cfg.Rank
	scale := float32(a.Cfg.Scale())
	for l := range m.Cfg.NumLayers {
		for _, mod := range a.Cfg.Targets {
			lo := a.Layer(l, mod)
			name := fmt.Sprintf("model.layers.%d.%s.weight", l, mod.Path())
			w, ok := m.Param(name)
			if !ok || len(w.Shape) != 2 || w.Shape[0] != lo.Out || w.Shape[1] != lo.In {
				return fmt.Errorf("lora: merge: model has no %s of shape [%d %d]", name, lo.Out, lo.In)
			}
			sb := be.Alloc(lo.Out * r)
			be.Copy(sb, lo.B.W)
			be.Scale(sb, scale)
			be.MatMul(w.W, sb, lo.A.W, lo.Out, lo.In, r, false, false, true)
		}
	}
	return be.Sync()
}

// SaveMerged writes m with a merged in to dir in Hugging Face layout
// (model.Model.Save's files), leaving m itself unchanged: each adapted
// weight's delta scale·B·A is computed on the device, one weight at a
// time, and added to the host copy being written.
func SaveMerged(m *model.Model, a *model.Adapter, dir string, dt safetensors.DType) error {
	if a.Device() != m.Device() {
		return fmt.Errorf("lora: save merged: adapter and model live on different devices")
	}
	be, r := m.Device(), a.Cfg.Rank
	scale := float32(a.Cfg.Scale())
	deltas := map[string]*model.LoRA{}
	for l := range m.Cfg.NumLayers {
		for _, mod := range a.Cfg.Targets {
			deltas[fmt.Sprintf("model.layers.%d.%s.weight", l, mod.Path())] = a.Layer(l, mod)
		}
	}
	var tmp []float32
	return m.SaveEdited(dir, dt, func(p *model.Param, data []float32) error {
		lo, ok := deltas[p.Name]
		if !ok {
			return nil
		}
		if len(p.Shape) != 2 || p.Shape[0] != lo.Out || p.Shape[1] != lo.In {
			return fmt.Errorf("lora: %s has shape %v, adapter implies [%d %d]", p.Name, p.Shape, lo.Out, lo.In)
		}
		sb, d := be.Alloc(lo.Out*r), be.Alloc(lo.Out*lo.In)
		be.Copy(sb, lo.B.W)
		be.Scale(sb, scale)
		be.MatMul(d, sb, lo.A.W, lo.Out, lo.In, r, false, false, false)
		tmp = slices.Grow(tmp[:0], len(data))[:len(data)]
		be.Download(tmp, d)
		for i, v := range tmp {
			data[i] += v
		}
		return be.Err()
	})
}
