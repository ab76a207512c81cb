// Package jsonl reads JSON Lines files, the format of every dataset, task,
// replay and record file rlhost reads: one JSON value per line, blank lines
// skipped, each error naming its line. It deliberately does not decode for
// the caller beyond DecodeStrict, and does not write.
package jsonl

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// Each calls fn with the number (from 1) and text of every non-blank line
// of r, trimmed of surrounding white space. maxLine bounds one line, so a
// wrong file (a binary, a huge dump) is refused instead of being read whole
// into memory. An error from fn stops the reading and comes back as
// "name:N: err", or "line N: err" when name is "".
func Each(r io.Reader, name string, maxLine int, fn func(n int, line []byte) error) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, min(64<<10, maxLine)), maxLine)
	for n := 1; sc.Scan(); n++ {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		if err := fn(n, line); err != nil {
			if name == "" {
				return fmt.Errorf("line %d: %w", n, err)
			}
			return fmt.Errorf("%s:%d: %w", name, n, err)
		}
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			err = fmt.Errorf("a line is longer than %d bytes: %w", maxLine, err)
		}
		if name != "" {
			return fmt.Errorf("%s: %w", name, err)
		}
		return err
	}
	return nil
}

// DecodeStrict decodes one line into v, rejecting fields v does not know
// and anything after the first value.
func DecodeStrict(line []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return errors.New("trailing data after the JSON value")
	}
	return nil
}
