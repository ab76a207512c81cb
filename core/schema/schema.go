// Package schema describes a plugin's HCL configuration in a form that can
// cross the plugin boundary, and carries the decoded configuration and the
// diagnostics a plugin returns about it.
//
// The host turns a Spec into an hcldec spec and decodes the plugin's block
// against it, so the plugin never sees HCL syntax and errors keep their
// file:line:col. It deliberately offers only what HCL blocks in rlhost need:
// typed attributes with defaults, and nested blocks.
package schema

import (
	"bytes"
	"encoding/json"
	"fmt"
	"path/filepath"

	"github.com/zclconf/go-cty/cty"
)

// Spec is the config schema of one plugin block.
type Spec struct {
	Attributes []Attribute `json:"attributes,omitempty"`
	Blocks     []Block     `json:"blocks,omitempty"`
}

// Attribute is one typed attribute. Default is a plain JSON value of the
// attribute's type, used when the attribute is absent.
type Attribute struct {
	Name        string          `json:"name"`
	Type        cty.Type        `json:"type"`
	Required    bool            `json:"required,omitempty"`
	Default     json.RawMessage `json:"default,omitempty"`
	Description string          `json:"description,omitempty"`
	Sensitive   bool            `json:"sensitive,omitempty"` // never echoed in logs or `rlhost plugins`
}

// Nesting says how many times a nested block may appear.
type Nesting string

// Block nesting modes, as in hcldec.
const (
	NestingSingle Nesting = "single" // at most once; object, or null when absent
	NestingList   Nesting = "list"   // any number; list of objects
)

// Block is a nested block with its own Spec.
type Block struct {
	Name        string  `json:"name"`
	Nesting     Nesting `json:"nesting"`
	Required    bool    `json:"required,omitempty"`
	Spec        Spec    `json:"spec"`
	Description string  `json:"description,omitempty"`
}

// DefaultJSON encodes v as a JSON default; it panics on values that cannot be
// encoded because schemas are static program data.
func DefaultJSON(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("schema: default %v: %v", v, err))
	}
	return b
}

// Config is a plugin block after decoding: plain JSON of the object the spec
// describes, plus where it came from so relative paths can be resolved.
type Config struct {
	Name    string `json:"name"`     // the block label, e.g. "coding" in env "coding" {}
	JSON    []byte `json:"json"`     // the decoded object as plain JSON
	BaseDir string `json:"base_dir"` // directory of the config file
	RunID   string `json:"run_id"`
}

// Decode unmarshals the config into v, rejecting fields v does not know,
// which catches schema/struct drift inside the plugin.
func (c Config) Decode(v any) error {
	if len(c.JSON) == 0 {
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(c.JSON))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("decode config of %q: %w", c.Name, err)
	}
	return nil
}

// Path resolves p relative to the config file's directory, so users write
// paths relative to the HCL file they are reading.
func (c Config) Path(p string) string {
	if p == "" || filepath.IsAbs(p) || c.BaseDir == "" {
		return p
	}
	return filepath.Join(c.BaseDir, p)
}
