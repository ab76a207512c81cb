package coding

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/big"
	"strconv"
)

// value is a Python value as the harness encodes it: ["kind", payload].
// Only exact built-in types have a kind other than "unsupported".
type value struct {
	kind  string  // none, bool, int, float, str, bytes, list, tuple, set, dict, unsupported
	text  string  // int digits, float repr, str, bytes hex, unsupported type name
	b     bool    // bool
	items []value // list, tuple, set; dict as alternating key, value
}

// maxValueDepth bounds nesting when decoding; the harness refuses deeper.
const maxValueDepth = 256

var errValue = errors.New("malformed encoded value")

// parseValue decodes one encoded value.
func parseValue(raw json.RawMessage) (value, error) {
	return decodeValue(raw, 0)
}

func decodeValue(raw json.RawMessage, depth int) (value, error) {
	if depth > maxValueDepth {
		return value{}, fmt.Errorf("%w: nested deeper than %d", errValue, maxValueDepth)
	}
	var parts []json.RawMessage
	if err := json.Unmarshal(raw, &parts); err != nil || len(parts) == 0 {
		return value{}, fmt.Errorf("%w: not a tagged array", errValue)
	}
	var v value
	if err := json.Unmarshal(parts[0], &v.kind); err != nil {
		return value{}, fmt.Errorf("%w: tag is not a string", errValue)
	}
	want := 2
	if v.kind == "none" {
		want = 1
	}
	if len(parts) != want {
		return value{}, fmt.Errorf("%w: %s has %d parts", errValue, v.kind, len(parts))
	}
	switch v.kind {
	case "none":
	case "bool":
		if err := json.Unmarshal(parts[1], &v.b); err != nil {
			return value{}, fmt.Errorf("%w: bool payload", errValue)
		}
	case "int", "float", "str", "bytes", "unsupported":
		if err := json.Unmarshal(parts[1], &v.text); err != nil {
			return value{}, fmt.Errorf("%w: %s payload is not a string", errValue, v.kind)
		}
		if v.kind == "int" {
			if _, ok := new(big.Int).SetString(v.text, 10); !ok {
				return value{}, fmt.Errorf("%w: int %q", errValue, v.text)
			}
		}
		if v.kind == "float" {
			if _, err := strconv.ParseFloat(v.text, 64); err != nil {
				return value{}, fmt.Errorf("%w: float %q", errValue, v.text)
			}
		}
	case "list", "tuple", "set", "dict":
		var elems []json.RawMessage
		if err := json.Unmarshal(parts[1], &elems); err != nil {
			return value{}, fmt.Errorf("%w: %s payload is not an array", errValue, v.kind)
		}
		for _, e := range elems {
			if v.kind == "dict" {
				var kv []json.RawMessage
				if err := json.Unmarshal(e, &kv); err != nil || len(kv) != 2 {
					return value{}, fmt.Errorf("%w: dict entry is not a pair", errValue)
				}
				for _, x := range kv {
					item, err := decodeValue(x, depth+1)
					if err != nil {
						return value{}, err
					}
					v.items = append(v.items, item)
				}
				continue
			}
			item, err := decodeValue(e, depth+1)
			if err != nil {
				return value{}, err
			}
			v.items = append(v.items, item)
		}
	default:
		return value{}, fmt.Errorf("%w: unknown tag %q", errValue, v.kind)
	}
	return v, nil
}

// equal compares like Python's == on these types, except that floats
// compare with a small relative tolerance, bool is not a number, and
// unsupported values never compare equal (an object with its own __eq__
// must not pass for the right answer).
func equal(a, b value) bool {
	if isNumber(a) && isNumber(b) {
		return numbersEqual(a, b)
	}
	if a.kind != b.kind || a.kind == "unsupported" {
		return false
	}
	switch a.kind {
	case "none":
		return true
	case "bool":
		return a.b == b.b
	case "str", "bytes":
		return a.text == b.text
	}
	if len(a.items) != len(b.items) {
		return false
	}
	// Sets and dicts arrive sorted by their encoded elements or keys, so
	// comparing in order is exact for values of the same types.
	for i := range a.items {
		if !equal(a.items[i], b.items[i]) {
			return false
		}
	}
	return true
}

func isNumber(v value) bool { return v.kind == "int" || v.kind == "float" }

func numbersEqual(a, b value) bool {
	if a.kind == "int" && b.kind == "int" {
		x, _ := new(big.Int).SetString(a.text, 10)
		y, _ := new(big.Int).SetString(b.text, 10)
		return x != nil && y != nil && x.Cmp(y) == 0
	}
	x, errX := strconv.ParseFloat(a.text, 64)
	y, errY := strconv.ParseFloat(b.text, 64)
	if (errX != nil && !math.IsInf(x, 0)) || (errY != nil && !math.IsInf(y, 0)) {
		return false
	}
	if x == y {
		return true
	}
	if math.IsInf(x, 0) || math.IsInf(y, 0) || math.IsNaN(x) || math.IsNaN(y) {
		return false
	}
	return math.Abs(x-y) <= 1e-9*math.Max(math.Abs(x), math.Abs(y))+1e-12
}
