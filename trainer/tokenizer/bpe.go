package tokenizer

// merge is one BPE merge rule: the pair it applies to is the map key; rank is
// its line in the merges list (lower merges first) and id the merged token.
type merge struct {
	rank int32
	id   int32
}

func pairKey(left, right int32) uint64 { return uint64(uint32(left))<<32 | uint64(uint32(right)) }

// candidate is a pair of adjacent symbols that a merge rule applies to, as it
// was when the candidate was queued; it is stale once either symbol changed.
type candidate struct {
	rank        int32
	pos         int32 // index of the left symbol
	left, right int32 // symbol ids when queued
	id          int32 // merged id
}

func (a candidate) before(b candidate) bool {
	if a.rank != b.rank {
		return a.rank < b.rank
	}
	return a.pos < b.pos
}

// bpeScratch holds the buffers one merge run needs, reused through a pool so
// that encoding a cache miss allocates only its result.
type bpeScratch struct {
	id, prev, next []int32
	heap           []candidate
}

func (s *bpeScratch) reset(n int) {
	if cap(s.id) < n {
		s.id = make([]int32, n)
		s.prev = make([]int32, n)
		s.next = make([]int32, n)
	}
	s.id, s.prev, s.next = s.id[:n], s.prev[:n], s.next[:n]
	s.heap = s.heap[:0]
}

func (s *bpeScratch) push(c candidate) {
	h := append(s.heap, c)
	for i := len(h) - 1; i > 0; {
		p := (i - 1) / 2
		if !h[i].before(h[p]) {
			break
		}
		h[i], h[p] = h[p], h[i]
		i = p
	}
	s.heap = h
}

func (s *bpeScratch) pop() candidate {
	h := s.heap
	top := h[0]
	last := len(h) - 1
	h[0] = h[last]
	h = h[:last]
	for i := 0; ; {
		l, r, m := 2*i+1, 2*i+2, i
		if l < len(h) && h[l].before(h[m]) {
			m = l
		}
		if r < len(h) && h[r].before(h[m]) {
			m = r
		}
		if m == i {
			break
		}
		h[i], h[m] = h[m], h[i]
		i = m
	}
	s.heap = h
	return top
}

// bpe merges the bytes of word into vocabulary ids and appends them to out.
// It always applies the lowest-ranked applicable merge, leftmost first, which
// is what Hugging Face's BPE model does (a priority queue over rank, then
// position). Symbols form a linked list so that a merge is O(log n).
func (t *Tokenizer) bpe(word string, s *bpeScratch, out []int) []int {
	n := len(word)
	s.reset(n)
	for i := 0; i < n; i++ {
		s.id[i] = t.byteID[word[i]]
		s.prev[i] = int32(i - 1)
		s.next[i] = int32(i + 1)
	}
	s.next[n-1] = -1
	queue := func(pos int32) {
		nx := s.next[pos]
		if nx < 0 {
			return
		}
		if m, ok := t.merges[pairKey(s.id[pos], s.id[nx])]; ok {
			s.push(candidate{rank: m.rank, pos: pos, left: s.id[pos], right: s.id[nx], id: m.id})
		}
	}
	for i := 0; i < n-1; i++ {
		queue(int32(i))
	}
	for len(s.heap) > 0 {
		c := s.pop()
		right := s.next[c.pos]
		if s.id[c.pos] != c.left || right < 0 || s.id[right] != c.right {
			continue // stale: one side was merged since this was queued
		}
		s.id[c.pos] = c.id
		s.id[right] = -1
		s.next[c.pos] = s.next[right]
		if nx := s.next[right]; nx >= 0 {
			s.prev[nx] = c.pos
		}
		if p := s.prev[c.pos]; p >= 0 {
			queue(p)
		}
		queue(c.pos)
	}
	for i := int32(0); i >= 0; i = s.next[i] {
		out = append(out, int(s.id[i]))
	}
	return out
}
