package lora

import (
	"fmt"

	"github.com/rlhost/rlhost/trainer/model"
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
