package fakevllm

import (
	"encoding/binary"
	"encoding/json"
	"hash/fnv"
	"math"
	"sync"

	"github.com/rlhost/rlhost/core"
)

// The fake has no model and no tokenizer. When it makes the text itself
// (Options.Agent), token ids stand in for a tokenizer's: one token per
// four bytes of text, its id a hash of those bytes, with a chat template
// of start, role and end tokens around each message. The same text always
// gives the same ids, so a conversation's prompt ids grow turn by turn as
// a real model's do, and token counts are those of a real tokenizer on
// code to within a small factor.

// Special token ids of the fake chat template.
const (
	tokStart     = 151644
	tokEnd       = 151645
	tokSystem    = 151646
	tokUser      = 151647
	tokAssistant = 151648
	tokTool      = 151649
	vocabText    = 151000 // text tokens are below this
	bytesPerTok  = 4
)

// tokenize appends the fake ids of text to dst.
func tokenize(dst []int, text string) []int {
	for i := 0; i < len(text); i += bytesPerTok {
		h := fnv.New32a()
		h.Write([]byte(text[i:min(i+bytesPerTok, len(text))]))
		dst = append(dst, int(h.Sum32()%vocabText))
	}
	return dst
}

func roleToken(r core.Role) int {
	switch r {
	case core.RoleSystem:
		return tokSystem
	case core.RoleUser:
		return tokUser
	case core.RoleTool:
		return tokTool
	}
	return tokAssistant
}

// renderMessage appends the template ids of one message.
func renderMessage(dst []int, m core.Message) []int {
	dst = append(dst, tokStart, roleToken(m.Role))
	dst = tokenize(dst, m.Content)
	for _, c := range m.ToolCalls {
		dst = tokenize(dst, c.Function.Name)
		dst = tokenize(dst, c.Function.Arguments)
	}
	return append(dst, tokEnd)
}

// replyTokens are the ids a model would sample for m.
func replyTokens(m core.Message) []int {
	ids := renderMessage(nil, m)
	return ids[2:] // the template's start and role are the prompt's
}

// prompt is a rendered conversation: its ids, and at each message
// boundary a hash of everything before it and the number of ids so far,
// for the prefix cache.
type prompt struct {
	ids        []int
	boundaries []boundary
	tail       boundary // the last boundary: tools and every message
}

type boundary struct {
	hash   uint64
	tokens int
}

// renderPrompt renders tools and messages as the fake's chat template,
// ending with the start of the assistant's reply.
func renderPrompt(msgs []core.Message, tools []core.ToolSpec) prompt {
	var p prompt
	if len(tools) > 0 {
		b, _ := json.Marshal(tools)
		p.ids = append(p.ids, tokStart, tokSystem)
		p.ids = tokenize(p.ids, string(b))
		p.ids = append(p.ids, tokEnd)
		p.tail = boundary{hash: chain(0, b), tokens: len(p.ids)}
	}
	for _, m := range msgs {
		p.ids = renderMessage(p.ids, m)
		b, _ := json.Marshal(m)
		p.tail = boundary{hash: chain(p.tail.hash, b), tokens: len(p.ids)}
		p.boundaries = append(p.boundaries, p.tail)
	}
	p.ids = append(p.ids, tokStart, tokAssistant)
	return p
}

// chain hashes data onto the hash of what came before it.
func chain(prev uint64, data []byte) uint64 {
	h := fnv.New64a()
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], prev)
	h.Write(b[:])
	h.Write(data)
	return h.Sum64()
}

// after is the boundary that follows p's messages with reply appended, as
// the next turn of the conversation renders it.
func (p prompt) after(reply core.Message) boundary {
	b, _ := json.Marshal(reply)
	return boundary{hash: chain(p.tail.hash, b), tokens: p.tail.tokens + len(renderMessage(nil, reply))}
}

// logProb is the fake log-probability of the k-th sampled token of a
// choice: deterministic in (seed, choice, k), in (-3, 0].
func logProb(seed int64, choice, k int) float32 {
	var b [24]byte
	binary.LittleEndian.PutUint64(b[0:], uint64(seed))
	binary.LittleEndian.PutUint64(b[8:], uint64(choice))
	binary.LittleEndian.PutUint64(b[16:], uint64(k))
	h := fnv.New64a()
	h.Write(b[:])
	u := float64(h.Sum64()>>11) / (1 << 53)
	return float32(-3 * math.Pow(u, 4))
}

// prefixCache remembers message-boundary hashes a server has prefilled,
// the oldest forgotten first once it holds capacity of them.
type prefixCache struct {
	mu       sync.Mutex
	capacity int
	known    map[uint64]int // hash -> tokens up to that boundary
	order    []uint64       // ring, oldest at next
	next     int
}

func newPrefixCache(capacity int) *prefixCache {
	return &prefixCache{capacity: capacity, known: map[uint64]int{}}
}

// cached is the number of leading tokens of p already prefilled; p's
// boundaries are remembered from now on.
func (c *prefixCache) cached(bs []boundary) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	hit := 0
	for _, b := range bs {
		if _, ok := c.known[b.hash]; ok {
			hit = b.tokens
		}
	}
	for _, b := range bs {
		c.addLocked(b)
	}
	return hit
}

// add remembers one boundary (a reply's, whose tokens the server holds).
func (c *prefixCache) add(b boundary) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.addLocked(b)
}

func (c *prefixCache) addLocked(b boundary) {
	if _, ok := c.known[b.hash]; ok {
		return
	}
	if len(c.order) < c.capacity {
		c.order = append(c.order, b.hash)
	} else {
		delete(c.known, c.order[c.next])
		c.order[c.next] = b.hash
		c.next = (c.next + 1) % c.capacity
	}
	c.known[b.hash] = b.tokens
}
