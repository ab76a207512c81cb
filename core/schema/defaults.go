package schema

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	ctyjson "github.com/zclconf/go-cty/cty/json"
)

// Complete turns a block's settings, given as a plain JSON object, into the
// object the host would hand the plugin for the same HCL block: defaults
// filled in, absent optional attributes and blocks as null (list blocks as
// []), every value converted to its declared type. Unknown or missing
// required settings are errors. Test harnesses use it so that a plugin
// under test sees what a real run gives it.
func (s Spec) Complete(settings []byte) ([]byte, error) {
	var obj map[string]json.RawMessage
	if len(settings) > 0 {
		if err := json.Unmarshal(settings, &obj); err != nil {
			return nil, fmt.Errorf("settings: want a JSON object: %w", err)
		}
	}
	out, err := s.complete(obj, "")
	if err != nil {
		return nil, err
	}
	return json.Marshal(out)
}

func (s Spec) complete(obj map[string]json.RawMessage, prefix string) (map[string]json.RawMessage, error) {
	out := map[string]json.RawMessage{}
	known := map[string]bool{}
	for _, a := range s.Attributes {
		known[a.Name] = true
		raw, ok := obj[a.Name]
		if !ok || string(raw) == "null" {
			switch {
			case len(a.Default) > 0:
				raw = a.Default
			case a.Required:
				return nil, fmt.Errorf("%s%s: required", prefix, a.Name)
			default:
				out[a.Name] = json.RawMessage("null")
				continue
			}
		}
		v, err := ctyjson.Unmarshal(raw, a.Type)
		if err != nil {
			return nil, fmt.Errorf("%s%s: %s is not a %s: %w", prefix, a.Name, raw, a.Type.FriendlyName(), err)
		}
		b, err := ctyjson.Marshal(v, a.Type)
		if err != nil {
			return nil, fmt.Errorf("%s%s: %w", prefix, a.Name, err)
		}
		out[a.Name] = b
	}
	for _, b := range s.Blocks {
		known[b.Name] = true
		raw, ok := obj[b.Name]
		absent := !ok || string(raw) == "null"
		if absent && b.Required {
			return nil, fmt.Errorf("%s%s: required block", prefix, b.Name)
		}
		switch {
		case b.Nesting == NestingList:
			var items []map[string]json.RawMessage
			if !absent {
				if err := json.Unmarshal(raw, &items); err != nil {
					return nil, fmt.Errorf("%s%s: want a list of objects: %w", prefix, b.Name, err)
				}
			}
			done := []map[string]json.RawMessage{}
			for i, it := range items {
				c, err := b.Spec.complete(it, fmt.Sprintf("%s%s[%d].", prefix, b.Name, i))
				if err != nil {
					return nil, err
				}
				done = append(done, c)
			}
			out[b.Name], _ = json.Marshal(done)
		case absent:
			out[b.Name] = json.RawMessage("null")
		default:
			var it map[string]json.RawMessage
			if err := json.Unmarshal(raw, &it); err != nil {
				return nil, fmt.Errorf("%s%s: want an object: %w", prefix, b.Name, err)
			}
			c, err := b.Spec.complete(it, prefix+b.Name+".")
			if err != nil {
				return nil, err
			}
			out[b.Name], _ = json.Marshal(c)
		}
	}
	var unknown []string
	for k := range obj {
		if !known[k] {
			unknown = append(unknown, prefix+k)
		}
	}
	if len(unknown) > 0 {
		sort.Strings(unknown)
		return nil, fmt.Errorf("unknown settings: %s", strings.Join(unknown, ", "))
	}
	return out, nil
}
