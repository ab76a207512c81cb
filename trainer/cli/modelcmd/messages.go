package modelcmd

import "fmt"

// renderMessages will render a messages file with chat.Render once the
// trainer/chat package lands; until then --messages reports that it is not
// available rather than guessing at the template.
func renderMessages(path string) (string, error) {
	return "", fmt.Errorf("--messages %s: the chat template package (trainer/chat) is not available in this build", path)
}
