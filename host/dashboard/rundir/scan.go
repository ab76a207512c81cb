package rundir

import (
	"bytes"
	"encoding/json"
	"errors"
	"strconv"

	"github.com/rlhost/rlhost/host/output"
)

// A line of trajectories.jsonl is mostly messages and token ids the index
// does not keep. The scanner below walks the line's top-level object and
// skips values without decoding them: strings by jumping from quote to
// quote, flat arrays of numbers by jumping to their closing bracket. Only
// the few fields a listing shows are decoded.

var errSyntax = errors.New("not a JSON object")

// lineFields are the fields of one trajectory line the index keeps.
type lineFields struct {
	runID, taskID, finish string
	step, group, index    int
	reward, durationMS    float64
	errored               bool
	turns                 int
	promptTokens          int
	completionTokens      int
	// From the episode's metrics: what output.Passed and output.TimedOut
	// look at, and the sandbox's exec count.
	passed, timeouts, execs, execTimeouts float64
}

// scanLine reads the index's fields from one trajectory line.
func scanLine(b []byte) (lineFields, error) {
	var f lineFields
	end, err := object(b, 0, func(key []byte, v int) (int, error) {
		switch string(key) {
		case "metrics":
			return scanMetrics(b, v, &f)
		case "turns":
			return scanTurns(b, v, &f)
		}
		e, err := skipValue(b, v)
		if err != nil {
			return 0, err
		}
		val := b[v:e]
		switch string(key) {
		case "run_id":
			f.runID, err = unquote(val)
		case "task_id":
			f.taskID, err = unquote(val)
		case "finish_reason":
			f.finish, err = unquote(val)
		case "step":
			f.step, err = atoi(val)
		case "group":
			f.group, err = atoi(val)
		case "index":
			f.index, err = atoi(val)
		case "reward":
			f.reward, err = atof(val)
		case "duration_ms":
			f.durationMS, err = atof(val)
		case "error":
			var s string
			s, err = unquote(val)
			f.errored = s != ""
		}
		return e, err
	})
	if err != nil {
		return f, err
	}
	return f, trailing(b, end)
}

func scanMetrics(b []byte, v int, f *lineFields) (int, error) {
	if isNull(b[v:min(v+4, len(b))]) {
		return v + 4, nil
	}
	return object(b, v, func(key []byte, v int) (int, error) {
		e, err := skipValue(b, v)
		if err != nil {
			return 0, err
		}
		var dst *float64
		switch string(key) {
		case "passed":
			dst = &f.passed
		case "timeouts":
			dst = &f.timeouts
		case output.SandboxExecs:
			dst = &f.execs
		case output.SandboxTimeouts:
			dst = &f.execTimeouts
		default:
			return e, nil
		}
		*dst, err = atof(b[v:e])
		return e, err
	})
}

func scanTurns(b []byte, v int, f *lineFields) (int, error) {
	if isNull(b[v:min(v+4, len(b))]) {
		return v + 4, nil
	}
	f.turns, f.promptTokens, f.completionTokens = 0, 0, 0
	return array(b, v, func(v int) (int, error) {
		f.turns++
		return object(b, v, func(key []byte, v int) (int, error) {
			if string(key) != "usage" {
				return skipValue(b, v)
			}
			return object(b, v, func(k []byte, v int) (int, error) {
				e, err := skipValue(b, v)
				if err != nil {
					return 0, err
				}
				var x int
				switch string(k) {
				case "prompt_tokens":
					x, err = atoi(b[v:e])
					f.promptTokens += x
				case "completion_tokens":
					x, err = atoi(b[v:e])
					f.completionTokens += x
				}
				return e, err
			})
		})
	})
}

// object walks the object starting at b[i] (after white space): fn gets
// each raw key (between its quotes, escapes left as they are) and the
// offset of its value, and returns the offset just past the value. object
// returns the offset just past the closing brace.
func object(b []byte, i int, fn func(key []byte, v int) (int, error)) (int, error) {
	i = skipSpace(b, i)
	if i >= len(b) || b[i] != '{' {
		return 0, errSyntax
	}
	i = skipSpace(b, i+1)
	if i < len(b) && b[i] == '}' {
		return i + 1, nil
	}
	for {
		if i >= len(b) || b[i] != '"' {
			return 0, errSyntax
		}
		ke, err := skipString(b, i)
		if err != nil {
			return 0, err
		}
		key := b[i+1 : ke-1]
		i = skipSpace(b, ke)
		if i >= len(b) || b[i] != ':' {
			return 0, errSyntax
		}
		ve, err := fn(key, skipSpace(b, i+1))
		if err != nil {
			return 0, err
		}
		next, done, err := afterValue(b, ve, '}')
		if err != nil || done {
			return next, err
		}
		i = next
	}
}

// array walks the array starting at b[i] as object walks an object.
func array(b []byte, i int, fn func(v int) (int, error)) (int, error) {
	i = skipSpace(b, i)
	if i >= len(b) || b[i] != '[' {
		return 0, errSyntax
	}
	i = skipSpace(b, i+1)
	if i < len(b) && b[i] == ']' {
		return i + 1, nil
	}
	for {
		ve, err := fn(i)
		if err != nil {
			return 0, err
		}
		next, done, err := afterValue(b, ve, ']')
		if err != nil || done {
			return next, err
		}
		i = next
	}
}

// afterValue reads what follows a member or an element from b[i]: a comma,
// with more to come from next, or the closing byte, with next just past it.
func afterValue(b []byte, i int, closing byte) (next int, done bool, err error) {
	i = skipSpace(b, i)
	switch {
	case i >= len(b):
		return 0, false, errSyntax
	case b[i] == ',':
		return skipSpace(b, i+1), false, nil
	case b[i] == closing:
		return i + 1, true, nil
	}
	return 0, false, errSyntax
}

func trailing(b []byte, i int) error {
	if skipSpace(b, i) != len(b) {
		return errSyntax
	}
	return nil
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// skipValue returns the offset just past the value starting at b[i].
func skipValue(b []byte, i int) (int, error) {
	if i >= len(b) {
		return 0, errSyntax
	}
	switch b[i] {
	case '"':
		return skipString(b, i)
	case '{', '[':
		return skipNested(b, i)
	}
	j := i
	for j < len(b) && !isDelim(b[j]) {
		j++
	}
	if j == i {
		return 0, errSyntax
	}
	return j, nil
}

func isDelim(c byte) bool {
	switch c {
	case ',', '}', ']', ' ', '\t', '\n', '\r', ':', '"', '{', '[':
		return true
	}
	return false
}

// skipString returns the offset just past the string whose opening quote
// is b[i]. A quote preceded by an odd number of backslashes is escaped.
func skipString(b []byte, i int) (int, error) {
	j := i + 1
	for {
		k := bytes.IndexByte(b[j:], '"')
		if k < 0 {
			return 0, errSyntax
		}
		q := j + k
		n := 0
		for p := q - 1; p > i && b[p] == '\\'; p-- {
			n++
		}
		if n%2 == 0 {
			return q + 1, nil
		}
		j = q + 1
	}
}

// skipNested returns the offset just past the object or array opening at
// b[i], tracking depth and skipping strings whole.
func skipNested(b []byte, i int) (int, error) {
	depth := 0
	// A failed flat-array check found the first ']' at tried; any '['
	// before it would find the same one, so none is checked again, which
	// keeps deep nesting linear.
	tried := -1
	for i < len(b) {
		switch b[i] {
		case '"':
			e, err := skipString(b, i)
			if err != nil {
				return 0, err
			}
			i = e
			continue
		case '[':
			// Token ids and log-probs: a flat array of numbers is most of a
			// training run's line, so it is skipped in one jump.
			if i > tried {
				e, end := flatArrayEnd(b, i)
				if e > 0 {
					if depth == 0 {
						return e, nil
					}
					i = e
					continue
				}
				tried = end
			}
			depth++
		case '{':
			depth++
		case '}', ']':
			depth--
			if depth == 0 {
				return i + 1, nil
			}
			if depth < 0 {
				return 0, errSyntax
			}
		}
		i++
	}
	return 0, errSyntax
}

// flatArrayEnd returns the offset past the array opening at b[i] when it
// holds no string, object or array, else 0 and the offset of the first
// ']' after b[i] (len(b) when there is none).
func flatArrayEnd(b []byte, i int) (int, int) {
	k := bytes.IndexByte(b[i+1:], ']')
	if k < 0 {
		return 0, len(b)
	}
	body := b[i+1 : i+1+k]
	if bytes.IndexByte(body, '"') >= 0 || bytes.IndexByte(body, '[') >= 0 || bytes.IndexByte(body, '{') >= 0 {
		return 0, i + 1 + k
	}
	return i + k + 2, 0
}

func isNull(v []byte) bool { return string(v) == "null" }

// unquote decodes a raw JSON string value; null is "".
func unquote(v []byte) (string, error) {
	if isNull(v) {
		return "", nil
	}
	if len(v) < 2 || v[0] != '"' || v[len(v)-1] != '"' {
		return "", errSyntax
	}
	if bytes.IndexByte(v, '\\') < 0 {
		return string(v[1 : len(v)-1]), nil
	}
	var s string
	err := json.Unmarshal(v, &s)
	return s, err
}

func atoi(v []byte) (int, error) {
	if isNull(v) {
		return 0, nil
	}
	n, err := strconv.Atoi(string(v))
	if err != nil {
		// encoding/json accepts 1e2 for an int field only when exact;
		// the writer never produces it, so anything else is malformed.
		return 0, errSyntax
	}
	return n, nil
}

func atof(v []byte) (float64, error) {
	if isNull(v) {
		return 0, nil
	}
	x, err := strconv.ParseFloat(string(v), 64)
	if err != nil {
		return 0, errSyntax
	}
	return x, nil
}
