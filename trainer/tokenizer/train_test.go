package tokenizer

import (
	"fmt"
	"strings"
	"testing"
)

func TestTrainRoundTripsAndCompresses(t *testing.T) {
	var corpus []string
	for i := range 200 {
		corpus = append(corpus, fmt.Sprintf("def f(x):\n    return x + %d\n# add %d to x, then return it", i%10, i%10))
	}
	cases := []struct {
		vocab     int
		wantFewer bool // than bytes
	}{
		{vocab: 256 + len(ChatMLSpecials)},
		{vocab: 400, wantFewer: true},
	}
	for _, c := range cases {
		t.Run(fmt.Sprint(c.vocab), func(t *testing.T) {
			data, err := Train(corpus, c.vocab, ChatMLSpecials)
			if err != nil {
				t.Fatal(err)
			}
			tok, err := Parse(data)
			if err != nil {
				t.Fatalf("the trained tokenizer does not load: %v", err)
			}
			if tok.VocabSize() > c.vocab {
				t.Errorf("vocab %d exceeds %d", tok.VocabSize(), c.vocab)
			}
			text := "<|im_start|>user\nWrite f: return x + 7 ünïcode ✓<|im_end|>\n"
			ids := tok.Encode(text)
			if got := tok.Decode(ids); got != text {
				t.Errorf("decode(encode(x)) = %q, want %q", got, text)
			}
			end, ok := tok.TokenID("<|im_end|>")
			if !ok || !strings.Contains(fmt.Sprint(ids), fmt.Sprint(end)) {
				t.Errorf("<|im_end|> is not one token in %v", ids)
			}
			code := "def f(x):\n    return x + 3\n"
			n := len(tok.Encode(code))
			if c.wantFewer && n >= len(code) {
				t.Errorf("%d tokens for %d bytes: merges learned nothing", n, len(code))
			}
			if !c.wantFewer && n != len(code) {
				t.Errorf("byte-only vocabulary gave %d tokens for %d bytes", n, len(code))
			}
		})
	}
	if _, err := Train(corpus, 100, ChatMLSpecials); err == nil {
		t.Error("a vocabulary smaller than the byte alphabet was accepted")
	}
}

// An added token may hold spaces and newlines (a fixed block of text a
// chat template repeats in every prompt): it loads, encodes as one id and
// decodes back.
func TestTrainSpecialWithSpaces(t *testing.T) {
	block := "You have tools.\n\n# Tools\n{\"name\": \"read_file\"}"
	specials := append(append([]string(nil), ChatMLSpecials...), block)
	data, err := Train([]string{"hello world", "hello there"}, 300, specials)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := Parse(data)
	if err != nil {
		t.Fatalf("the trained tokenizer does not load: %v", err)
	}
	id, ok := tok.TokenID(block)
	if !ok {
		t.Fatal("the block is not a token")
	}
	text := "<|im_start|>system\n" + block + "<|im_end|>\nhello"
	ids := tok.Encode(text)
	n := 0
	for _, x := range ids {
		if x == id {
			n++
		}
	}
	if n != 1 || len(ids) != len(tok.Encode("<|im_start|>system\n<|im_end|>\nhello"))+1 {
		t.Errorf("%q encodes as %v; want the block as the one token %d", text, ids, id)
	}
	if got := tok.Decode(ids); got != text {
		t.Errorf("decodes to %q, want %q", got, text)
	}
}
