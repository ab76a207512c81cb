package modelcmd

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"

	"github.com/rlhost/rlhost/core"
	"github.com/rlhost/rlhost/trainer/chat"
)

// messagesFile is --messages' format: either a bare OpenAI messages array
// or an object with "messages" and optional "tools", as in a Chat
// Completions request body.
type messagesFile struct {
	Messages []core.Message  `json:"messages"`
	Tools    []core.ToolSpec `json:"tools"`
}

// renderMessages reads a messages file and renders it with the chat
// template, ending with the assistant generation prompt.
func renderMessages(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("--messages: %w", err)
	}
	var f messagesFile
	if t := bytes.TrimSpace(b); len(t) > 0 && t[0] == '[' {
		err = json.Unmarshal(t, &f.Messages)
	} else {
		err = json.Unmarshal(b, &f)
	}
	if err != nil {
		return "", fmt.Errorf("--messages %s: %w", path, err)
	}
	if len(f.Messages) == 0 {
		return "", fmt.Errorf("--messages %s: no messages", path)
	}
	text, err := chat.Render(f.Messages, f.Tools, true)
	if err != nil {
		return "", fmt.Errorf("--messages %s: %w", path, err)
	}
	return text, nil
}
