package tokenizer

// byteLevelRunes is GPT-2's byte-to-unicode table: printable Latin-1 bytes
// stand for themselves and the other 68 bytes are shifted to U+0100 upwards,
// in byte order, so that every vocabulary entry is a printable string.
func byteLevelRunes() (t [256]rune) {
	next := rune(256)
	for b := 0; b < 256; b++ {
		printable := (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF)
		if printable {
			t[b] = rune(b)
		} else {
			t[b] = next
			next++
		}
	}
	return t
}

// byteLevelDecode turns a vocabulary string back into raw bytes. ok is false
// when the string contains a character outside the byte-level alphabet.
func byteLevelDecode(s string, inverse *byteLevelInverse) (out []byte, ok bool) {
	out = make([]byte, 0, len(s))
	for _, r := range s {
		if r < 0 || int(r) >= len(inverse) || inverse[r] < 0 {
			return nil, false
		}
		out = append(out, byte(inverse[r]))
	}
	return out, true
}

// byteLevelInverse maps a byte-level rune (all are below U+0144) back to its
// byte, or -1.
type byteLevelInverse [512]int16

// byteLevelEncode maps raw bytes to their byte-level vocabulary string.
func byteLevelEncode(b []byte, table *[256]rune) string {
	out := make([]rune, len(b))
	for i, c := range b {
		out[i] = table[c]
	}
	return string(out)
}
