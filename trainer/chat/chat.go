// Package chat renders conversations into the exact prompt text Qwen2.5
// Instruct models were trained on (ChatML with Hermes-style tool calls, as
// written by Qwen2.5-Instruct's chat_template), tokenizes them with an
// assistant mask for RL/SFT losses, and parses <tool_call> blocks back out of
// generated text.
//
// It is a native Go transcription of that one template, not a Jinja engine:
// other models' templates, Qwen3's <think> handling and multimodal content
// are deliberately out of scope.
package chat

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/rlhost/rlhost/core"
	"github.com/rlhost/rlhost/trainer/tokenizer"
)

// DefaultSystemPrompt is what Qwen2.5-Instruct's template puts in the system
// turn when the conversation has no system message.
const DefaultSystemPrompt = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."

// The fixed text of the template's tools block.
const (
	toolsHeader = "\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\n" +
		"You are provided with function signatures within <tools></tools> XML tags:\n<tools>"
	toolsFooter = "\n</tools>\n\nFor each function call, return a json object with function name and arguments " +
		"within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": " +
		"<args-json-object>}\n</tool_call><|im_end|>\n"
	imStart = "<|im_start|>"
	imEnd   = "<|im_end|>"
)

// segment is a piece of the rendered prompt; assistant marks text the policy
// produced (assistant content, tool calls and the closing <|im_end|>).
type segment struct {
	text      string
	assistant bool
}

// Render returns the prompt text for msgs, byte-for-byte what
// Qwen2.5-Instruct's chat_template renders for the same messages and tools
// (tool-call arguments passed as parsed JSON, as Hugging Face expects).
// addGenerationPrompt appends the "<|im_start|>assistant\n" header.
func Render(msgs []core.Message, tools []core.ToolSpec, addGenerationPrompt bool) (string, error) {
	segs, err := render(msgs, tools, addGenerationPrompt)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	for _, s := range segs {
		b.WriteString(s.text)
	}
	return b.String(), nil
}

func render(msgs []core.Message, tools []core.ToolSpec, addGenerationPrompt bool) ([]segment, error) {
	var segs []segment
	prompt := func(s string) { segs = append(segs, segment{text: s}) }

	hasSystem := len(msgs) > 0 && msgs[0].Role == core.RoleSystem
	system := DefaultSystemPrompt
	if hasSystem {
		system = msgs[0].Content
	}
	if len(tools) > 0 {
		var b strings.Builder
		b.WriteString(imStart + "system\n" + system + toolsHeader)
		for i, tool := range tools {
			js, err := toolJSON(tool)
			if err != nil {
				return nil, fmt.Errorf("chat: tools[%d] (%s): %w", i, tool.Function.Name, err)
			}
			b.WriteString("\n" + js)
		}
		b.WriteString(toolsFooter)
		prompt(b.String())
	} else {
		prompt(imStart + "system\n" + system + imEnd + "\n")
	}

	for i, m := range msgs {
		switch {
		case m.Role == core.RoleSystem && i == 0:
			// Already rendered in the header.
		case m.Role == core.RoleUser || m.Role == core.RoleSystem ||
			(m.Role == core.RoleAssistant && len(m.ToolCalls) == 0):
			if m.Role == core.RoleAssistant {
				prompt(imStart + "assistant\n")
				segs = append(segs, segment{text: m.Content + imEnd, assistant: true})
				prompt("\n")
			} else {
				prompt(imStart + string(m.Role) + "\n" + m.Content + imEnd + "\n")
			}
		case m.Role == core.RoleAssistant:
			// The template writes "<|im_start|>assistant" and then "\n" +
			// content only when content is non-empty, and "\n<tool_call>..."
			// per call; either way the first "\n" follows the header, so the
			// header is split off as "<|im_start|>assistant\n".
			var b strings.Builder
			if m.Content != "" {
				b.WriteString(m.Content)
			}
			for j, tc := range m.ToolCalls {
				args, err := argumentsJSON(tc.Function.Arguments)
				if err != nil {
					return nil, fmt.Errorf("chat: messages[%d].tool_calls[%d] (%s): %w", i, j, tc.Function.Name, err)
				}
				if j > 0 || m.Content != "" {
					b.WriteString("\n")
				}
				b.WriteString("<tool_call>\n{\"name\": \"" + tc.Function.Name + "\", \"arguments\": " + args + "}\n</tool_call>")
			}
			b.WriteString(imEnd)
			prompt(imStart + "assistant\n")
			segs = append(segs, segment{text: b.String(), assistant: true})
			prompt("\n")
		case m.Role == core.RoleTool:
			var b strings.Builder
			if i == 0 || msgs[i-1].Role != core.RoleTool {
				b.WriteString(imStart + "user")
			}
			b.WriteString("\n<tool_response>\n" + m.Content + "\n</tool_response>")
			if i == len(msgs)-1 || msgs[i+1].Role != core.RoleTool {
				b.WriteString(imEnd + "\n")
			}
			prompt(b.String())
		default:
			// The Jinja template silently drops unknown roles; refusing is
			// kinder than training on a conversation with a hole in it.
			return nil, fmt.Errorf("chat: messages[%d]: unknown role %q", i, m.Role)
		}
	}
	if addGenerationPrompt {
		prompt(imStart + "assistant\n")
	}
	return segs, nil
}

// toolJSON renders a tool the way `tool | tojson` does for the OpenAI-shaped
// dict {"type": ..., "function": {"name", "description", "parameters"}}.
func toolJSON(t core.ToolSpec) (string, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(t); err != nil {
		return "", fmt.Errorf("encode tool: %w", err)
	}
	return pyJSON(bytes.TrimSpace(buf.Bytes()))
}

// argumentsJSON renders tool-call arguments as `tool_call.arguments | tojson`
// does when arguments are the parsed JSON (Hugging Face's convention). The
// OpenAI wire format carries them as a JSON string; arguments that are not
// valid JSON are rendered as that string, which is what the template does
// when handed a string.
func argumentsJSON(args string) (string, error) {
	if strings.TrimSpace(args) == "" {
		args = "{}"
	}
	if json.Valid([]byte(args)) {
		return pyJSON([]byte(args))
	}
	quoted, err := json.Marshal(args)
	if err != nil {
		return "", err
	}
	return pyJSON(quoted)
}

// RenderTokens renders msgs and tokenizes the result. mask[i] is true when
// ids[i] was produced by the assistant: its content, tool calls and closing
// <|im_end|>; the "<|im_start|>assistant\n" header, every other turn and the
// generation prompt are false.
//
// Segments are tokenized separately so that each token belongs to exactly
// one segment, and the concatenation is checked against tokenizing the whole
// prompt. They agree because every boundary is either an added token (which
// the tokenizer splits on first anyway) or the "\n" that ends an assistant
// header, and a newline only joins the next pre-token when that starts with
// whitespace containing another newline. In that one case (assistant content
// that starts with such whitespace, e.g. "\n\nHi") no token boundary exists
// between header and content, and RenderTokens returns an error rather than
// a mask that would be wrong.
func RenderTokens(tok *tokenizer.Tokenizer, msgs []core.Message, tools []core.ToolSpec, addGenerationPrompt bool) (ids []int, assistantMask []bool, err error) {
	segs, err := render(msgs, tools, addGenerationPrompt)
	if err != nil {
		return nil, nil, err
	}
	// Only a change of owner needs a token boundary: neighbouring pieces of
	// one owner (the tool responses of one turn) are tokenized together.
	var merged []segment
	for _, s := range segs {
		if n := len(merged); n > 0 && merged[n-1].assistant == s.assistant {
			merged[n-1].text += s.text
			continue
		}
		merged = append(merged, s)
	}
	var whole strings.Builder
	for _, s := range merged {
		n := len(ids)
		ids = tok.AppendEncode(ids, s.text)
		for range len(ids) - n {
			assistantMask = append(assistantMask, s.assistant)
		}
		whole.WriteString(s.text)
	}
	if want := tok.Encode(whole.String()); !slices.Equal(ids, want) {
		i := 0
		for i < len(ids) && i < len(want) && ids[i] == want[i] {
			i++
		}
		return nil, nil, fmt.Errorf("chat: tokens of the rendered prompt cross a turn boundary near token %d "+
			"(assistant content starting with a newline?): %q", i, tok.Decode(want[max(0, i-3):min(len(want), i+3)]))
	}
	return ids, assistantMask, nil
}
