package rlhostpb

// Conversions of what every plugin kind shares (Describe, Configure and
// its diagnostics). Each kind's own messages are converted beside the kind:
// core/sdk/envplugin/convert.go and core/sdk/sandboxplugin/convert.go.

import (
	"encoding/json"
	"strings"

	"github.com/rlhost/rlhost/core/schema"
	"github.com/rlhost/rlhost/core/sdk/pluginbase"
)

// FromInfo encodes a plugin description.
func FromInfo(in pluginbase.Info) (*PluginInfo, error) {
	spec, err := json.Marshal(in.Config)
	if err != nil {
		return nil, err
	}
	return &PluginInfo{Name: in.Name, Version: in.Version, Kind: in.Kind, Description: in.Description, ConfigSchemaJson: spec, NoSandbox: in.NoSandbox}, nil
}

// ToInfo decodes a plugin description.
func ToInfo(p *PluginInfo) (pluginbase.Info, error) {
	out := pluginbase.Info{Name: p.GetName(), Version: p.GetVersion(), Kind: p.GetKind(), Description: p.GetDescription(), NoSandbox: p.GetNoSandbox()}
	if len(p.GetConfigSchemaJson()) > 0 {
		if err := json.Unmarshal(p.GetConfigSchemaJson(), &out.Config); err != nil {
			return out, err
		}
	}
	return out, nil
}

// FromConfig encodes a decoded plugin config.
func FromConfig(c schema.Config) *ConfigureRequest {
	return &ConfigureRequest{Name: c.Name, ConfigJson: c.JSON, BaseDir: c.BaseDir, RunId: c.RunID}
}

// ToConfig decodes a plugin config.
func ToConfig(r *ConfigureRequest) schema.Config {
	return schema.Config{Name: r.GetName(), JSON: r.GetConfigJson(), BaseDir: r.GetBaseDir(), RunID: r.GetRunId()}
}

// FromDiagnostics encodes diagnostics.
func FromDiagnostics(ds schema.Diagnostics) *ConfigureResponse {
	out := &ConfigureResponse{}
	for _, d := range ds {
		out.Diagnostics = append(out.Diagnostics, &Diagnostic{Severity: int32(d.Severity), Summary: d.Summary, Detail: d.Detail, Path: d.Path})
	}
	return out
}

// ToDiagnostics decodes diagnostics.
func ToDiagnostics(r *ConfigureResponse) schema.Diagnostics {
	var out schema.Diagnostics
	for _, d := range r.GetDiagnostics() {
		out = append(out, schema.Diagnostic{Severity: schema.Severity(d.GetSeverity()), Summary: d.GetSummary(), Detail: d.GetDetail(), Path: d.GetPath()})
	}
	return out
}

// ValidUTF8 replaces invalid UTF-8 with U+FFFD: proto3 strings must be
// UTF-8, and text from sandboxes need not be.
func ValidUTF8(s string) string { return strings.ToValidUTF8(s, "\uFFFD") }

// ValidUTF8Map is ValidUTF8 over keys and values.
func ValidUTF8Map(m map[string]string) map[string]string {
	if m == nil {
		return nil
	}
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[ValidUTF8(k)] = ValidUTF8(v)
	}
	return out
}

// ValidUTF8Keys is ValidUTF8 over keys.
func ValidUTF8Keys(m map[string]float64) map[string]float64 {
	if m == nil {
		return nil
	}
	out := make(map[string]float64, len(m))
	for k, v := range m {
		out[ValidUTF8(k)] = v
	}
	return out
}
