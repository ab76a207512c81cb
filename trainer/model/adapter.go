package model

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"

	"github.com/rlhost/rlhost/trainer/compute"
	"github.com/rlhost/rlhost/trainer/hfconfig"
)

// Module is one of the seven linear projections of a decoder layer that a
// LoRA adapter may target.
type Module int

// The projections, in the order a layer runs them.
const (
	QProj Module = iota
	KProj
	VProj
	OProj
	GateProj
	UpProj
	DownProj
	numModules
)

// Modules lists every projection in layer order.
func Modules() []Module { return []Module{QProj, KProj, VProj, OProj, GateProj, UpProj, DownProj} }

// String is the Hugging Face module name ("q_proj").
func (m Module) String() string {
	switch m {
	case QProj:
		return "q_proj"
	case KProj:
		return "k_proj"
	case VProj:
		return "v_proj"
	case OProj:
		return "o_proj"
	case GateProj:
		return "gate_proj"
	case UpProj:
		return "up_proj"
	case DownProj:
		return "down_proj"
	}
	return fmt.Sprintf("Module(%d)", int(m))
}

// Path is the module's path inside a decoder layer ("self_attn.q_proj").
func (m Module) Path() string {
	if m <= OProj {
		return "self_attn." + m.String()
	}
	return "mlp." + m.String()
}

// MarshalText writes the Hugging Face name, so configs read as PEFT's.
func (m Module) MarshalText() ([]byte, error) {
	if m < 0 || m >= numModules {
		return nil, fmt.Errorf("model: unknown module %d", int(m))
	}
	return []byte(m.String()), nil
}

// UnmarshalText accepts what ParseModule accepts.
func (m *Module) UnmarshalText(b []byte) error {
	v, ok := ParseModule(string(b))
	if !ok {
		return fmt.Errorf("unknown module %q (want one of q, k, v, o, gate, up, down, or q_proj ... down_proj)", b)
	}
	*m = v
	return nil
}

// ParseModule accepts a Hugging Face name ("q_proj") or its short form ("q").
func ParseModule(s string) (Module, bool) {
	for _, m := range Modules() {
		name := m.String()
		if s == name || s == name[:len(name)-len("_proj")] {
			return m, true
		}
	}
	return 0, false
}

// dims returns the input and output widths of projection mod.
func dims(c *hfconfig.Config, mod Module) (in, out int) {
	C, I := c.HiddenSize, c.IntermediateSize
	qd, kvd := c.NumHeads*c.HeadDim, c.NumKVHeads*c.HeadDim
	switch mod {
	case QProj:
		return C, qd
	case KProj, VProj:
		return C, kvd
	case OProj:
		return qd, C
	case GateProj, UpProj:
		return C, I
	default:
		return I, C
	}
}

// AdapterConfig holds a LoRA adapter's hyper-parameters, named as PEFT's
// LoraConfig names them.
type AdapterConfig struct {
	Rank    int      `json:"r"`
	Alpha   float64  `json:"lora_alpha"`
	Dropout float64  `json:"lora_dropout"`   // on the adapter's input, in training only
	Targets []Module `json:"target_modules"` // HF names in JSON
	RSLoRA  bool     `json:"use_rslora"`     // scale alpha/sqrt(r) instead of alpha/r
}

// Scale is the factor the adapter's product B·A is multiplied by.
func (c AdapterConfig) Scale() float64 {
	if c.RSLoRA {
		return c.Alpha / math.Sqrt(float64(c.Rank))
	}
	return c.Alpha / float64(c.Rank)
}

// Validate checks the settings; errors name the PEFT setting.
func (c AdapterConfig) Validate() error {
	switch {
	case c.Rank <= 0:
		return fmt.Errorf("lora rank %d must be positive", c.Rank)
	case !(c.Alpha > 0) || math.IsInf(c.Alpha, 0):
		return fmt.Errorf("lora alpha %g must be a finite number > 0", c.Alpha)
	case !(c.Dropout >= 0 && c.Dropout < 1):
		return fmt.Errorf("lora dropout %g must be in [0,1)", c.Dropout)
	case len(c.Targets) == 0:
		return fmt.Errorf("lora target_modules is empty")
	}
	seen := map[Module]bool{}
	for _, m := range c.Targets {
		if m < 0 || m >= numModules {
			return fmt.Errorf("lora target module %d unknown", int(m))
		}
		if seen[m] {
			return fmt.Errorf("lora target module %s named twice", m)
		}
		seen[m] = true
	}
	return nil
}

// LoRA is the pair of low-rank factors on one projection: the projection
// computes y = x·Wᵀ + scale·(x·Aᵀ)·Bᵀ with A [r, in] and B [out, r].
type LoRA struct {
	A, B    *Param
	In, Out int
}

// Adapter is a LoRA adapter for one model config, on one device: the
// factors of every targeted projection of every layer. Its parameter
// names are PEFT's saved key names
// ("base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight"), so
// a checkpoint of Params is an adapter_model.safetensors as is.
//
// The adapter is attached to a Run (training) or a Cache (generation) with
// SetAdapter; the base model stays untouched, so one base serves several
// adapters.
type Adapter struct {
	Cfg      AdapterConfig
	ModelCfg *hfconfig.Config
	be       compute.Device
	params   []*Param
	byName   map[string]*Param
	layers   [][numModules]*LoRA // nil where a module is not targeted
	scale    float32
	maxIn    int // widest input of a targeted projection
	// dropSeed advances once per training forward so each forward draws
	// fresh dropout masks; the backward regenerates the same masks.
	dropSeed uint64
}

// AdapterKey is PEFT's saved key of layer l's projection mod, factor
// "lora_A" or "lora_B".
func AdapterKey(l int, mod Module, factor string) string {
	return fmt.Sprintf("base_model.model.model.layers.%d.%s.%s.weight", l, mod.Path(), factor)
}

// NewAdapter allocates a zero adapter (A and B all zero) for models of
// cfg on be. Call Init for PEFT's initialisation.
func NewAdapter(be compute.Device, cfg *hfconfig.Config, ac AdapterConfig) (*Adapter, error) {
	if err := ac.Validate(); err != nil {
		return nil, fmt.Errorf("model: %w", err)
	}
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("model: %w", err)
	}
	ac.Targets = slices.Clone(ac.Targets)
	slices.Sort(ac.Targets)
	a := &Adapter{Cfg: ac, ModelCfg: cfg, be: be, byName: map[string]*Param{}, scale: float32(ac.Scale())}
	add := func(name string, shape ...int) *Param {
		p := &Param{Name: name, Shape: shape}
		p.W = be.Alloc(p.Len())
		a.params = append(a.params, p)
		a.byName[name] = p
		return p
	}
	r := ac.Rank
	for l := range cfg.NumLayers {
		var ls [numModules]*LoRA
		for _, mod := range ac.Targets {
			in, out := dims(cfg, mod)
			ls[mod] = &LoRA{In: in, Out: out,
				A: add(AdapterKey(l, mod, "lora_A"), r, in),
				B: add(AdapterKey(l, mod, "lora_B"), out, r),
			}
			a.maxIn = max(a.maxIn, in)
		}
		a.layers = append(a.layers, ls)
	}
	return a, nil
}

// Init sets every A as PEFT does, nn.Linear's default
// kaiming_uniform_(a=√5), i.e. U(-1/√in, 1/√in), and every B to zero, so
// the adapted model starts equal to the base. The draw is a function of
// seed only.
func (a *Adapter) Init(seed uint64) {
	r := rand.New(rand.NewPCG(seed, 0x5851f42d4c957f2d))
	for _, ls := range a.layers {
		for _, lo := range ls {
			if lo == nil {
				continue
			}
			bound := 1 / math.Sqrt(float64(lo.In))
			buf := make([]float32, lo.A.Len())
			for i := range buf {
				buf[i] = float32((2*r.Float64() - 1) * bound)
			}
			a.be.Upload(lo.A.W, buf)
			a.be.Zero(lo.B.W)
		}
	}
}

// DropoutCounter is the number of training forwards that have drawn
// dropout masks; the masks are a function of it, so a checkpoint saves it
// and a resume restores it with SetDropoutCounter.
func (a *Adapter) DropoutCounter() uint64 { return a.dropSeed }

// SetDropoutCounter restores DropoutCounter.
func (a *Adapter) SetDropoutCounter(n uint64) { a.dropSeed = n }

// Device is the compute device the adapter lives on.
func (a *Adapter) Device() compute.Device { return a.be }

// Params lists the factors in PEFT key order (by layer, then projection,
// A before B).
func (a *Adapter) Params() []*Param { return a.params }

// Param returns the factor with PEFT key name.
func (a *Adapter) Param(name string) (*Param, bool) {
	p, ok := a.byName[name]
	return p, ok
}

// Layer returns layer l's factors on mod, or nil when mod is not targeted.
func (a *Adapter) Layer(l int, mod Module) *LoRA { return a.layers[l][mod] }

// AllocGrads allocates zeroed gradients for the factors (once).
func (a *Adapter) AllocGrads() {
	for _, p := range a.params {
		if p.G == nil {
			p.G = a.be.Alloc(p.Len())
		}
	}
}

// ZeroGrads sets the factors' gradients to zero.
func (a *Adapter) ZeroGrads() {
	for _, p := range a.params {
		if p.G != nil {
			a.be.Zero(p.G)
		}
	}
}

// NumParams is the number of trainable scalars.
func (a *Adapter) NumParams() int {
	n := 0
	for _, p := range a.params {
		n += p.Len()
	}
	return n
}

// compatible reports why a cannot run on m, or nil.
func (a *Adapter) compatible(m *Model) error {
	if a.be != m.be {
		return fmt.Errorf("model: adapter lives on another device than the model")
	}
	c, d := a.ModelCfg, m.Cfg
	if c.NumLayers != d.NumLayers || c.HiddenSize != d.HiddenSize || c.IntermediateSize != d.IntermediateSize ||
		c.NumHeads*c.HeadDim != d.NumHeads*d.HeadDim || c.NumKVHeads*c.HeadDim != d.NumKVHeads*d.HeadDim {
		return fmt.Errorf("model: adapter was built for another model shape")
	}
	return nil
}

// forward adds the adapter's term to y = proj(x) over rows rows:
// u = scale·x·Aᵀ (kept for the backward), y += u·Bᵀ.
func (lo *LoRA) forward(be compute.Device, y, x, u compute.Tensor, rows, r int, scale float32) {
	be.MatMul(u, x, lo.A.W, rows, r, lo.In, false, true, false)
	be.Scale(u, scale)
	be.MatMul(y, u, lo.B.W, rows, lo.Out, r, false, true, true)
}

// backward accumulates the factors' gradients (when allocated) and the
// adapter's part of dx for dy = dL/dy, given the input x and the u of the
// forward: dB += dyᵀ·u; du = scale·dy·B; dA += duᵀ·x; dx += du·A. du is
// scratch [rows, r].
func (lo *LoRA) backward(be compute.Device, dx, dy, x, u, du compute.Tensor, rows, r int, scale float32) {
	if lo.B.G != nil {
		be.MatMul(lo.B.G, dy, u, lo.Out, r, rows, true, false, true)
	}
	be.MatMul(du, dy, lo.B.W, rows, r, lo.Out, false, false, false)
	be.Scale(du, scale)
	if lo.A.G != nil {
		be.MatMul(lo.A.G, du, x, r, lo.In, rows, true, false, true)
	}
	be.MatMul(dx, du, lo.A.W, rows, lo.In, r, false, false, true)
}
