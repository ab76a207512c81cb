package coding

import "strings"

// extract returns the code of a completion, found by the first method in
// order that finds any non-blank code, and the name of that method; ("", "")
// when none does. The code is always a substring of text, so what is run
// can be traced back to what the model wrote.
func extract(text string, order []string) (code, method string) {
	for _, m := range order {
		var c string
		switch m {
		case ExtractFenced:
			c = extractFenced(text)
		case ExtractAnswer:
			c = extractAnswer(text)
		case ExtractRaw:
			c = trimBlankLines(text)
		}
		if c != "" {
			return c, m
		}
	}
	return "", ""
}

// extractFenced returns the last ``` block tagged python (py, python3), or
// failing that the last untagged one. A block left open at the end counts:
// completions cut off by a token limit still get scored (usually as a syntax
// error). Blocks in other languages are ignored.
func extractFenced(text string) string {
	var python, bare string
	inside := false
	fence, start := 0, 0
	lang := ""
	keep := func(body string) {
		body = trimBlankLines(body)
		if body == "" {
			return
		}
		switch lang {
		case "python", "py", "python3":
			python = body
		case "":
			bare = body
		}
	}
	for pos := 0; pos < len(text); {
		end := strings.IndexByte(text[pos:], '\n')
		next := len(text)
		if end >= 0 {
			end += pos
			next = end + 1
		} else {
			end = len(text)
		}
		line := strings.TrimLeft(text[pos:end], " \t")
		ticks := len(line) - len(strings.TrimLeft(line, "`"))
		if !inside && ticks >= 3 {
			inside, fence, start = true, ticks, next
			lang = ""
			if f := strings.Fields(line[ticks:]); len(f) > 0 {
				lang = strings.ToLower(f[0])
			}
		} else if inside && ticks >= fence && strings.TrimSpace(line[ticks:]) == "" {
			keep(text[start:pos])
			inside = false
		}
		pos = next
	}
	if inside && start <= len(text) {
		keep(text[start:])
	}
	if python != "" {
		return python
	}
	return bare
}

// extractAnswer returns what follows the last <answer> tag, up to </answer>
// or the end; a fenced block inside it wins over the bare text.
func extractAnswer(text string) string {
	i := strings.LastIndex(text, "<answer>")
	if i < 0 {
		return ""
	}
	body := text[i+len("<answer>"):]
	if j := strings.Index(body, "</answer>"); j >= 0 {
		body = body[:j]
	}
	if c := extractFenced(body); c != "" {
		return c
	}
	return trimBlankLines(body)
}

// trimBlankLines drops leading blank lines and trailing whitespace but keeps
// the first line's indentation, which Python would reject if it were wrong.
func trimBlankLines(s string) string {
	s = strings.TrimRight(s, " \t\r\n")
	for {
		nl := strings.IndexByte(s, '\n')
		if nl < 0 || strings.TrimSpace(s[:nl]) != "" {
			break
		}
		s = s[nl+1:]
	}
	if strings.TrimSpace(s) == "" {
		return ""
	}
	return s
}
