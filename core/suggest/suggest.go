// Package suggest finds the name a user probably meant when they typed one
// that does not exist: a flag, an attribute, a block. It only ranks known
// names by edit distance; saying "did you mean" is up to the caller.
package suggest

// Closest returns the candidate nearest to name, or "" when none is close
// enough to be a likely typo (at most a third of the name's length in edits,
// and at least one).
func Closest(name string, candidates []string) string {
	best, bestDist := "", -1
	limit := max(1, len([]rune(name))/3)
	for _, c := range candidates {
		d := distance(name, c)
		if d <= limit && (bestDist < 0 || d < bestDist) {
			best, bestDist = c, d
		}
	}
	return best
}

// distance is the optimal string alignment distance: Levenshtein edits plus
// swapping two neighbouring characters, the most common typo ("stpes").
func distance(a, b string) int {
	ra, rb := []rune(a), []rune(b)
	// Three rows suffice: the current one and the two before it.
	prev2 := make([]int, len(rb)+1)
	prev := make([]int, len(rb)+1)
	cur := make([]int, len(rb)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(ra); i++ {
		cur[0] = i
		for j := 1; j <= len(rb); j++ {
			cost := 1
			if ra[i-1] == rb[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && ra[i-1] == rb[j-2] && ra[i-2] == rb[j-1] {
				cur[j] = min(cur[j], prev2[j-2]+1)
			}
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return prev[len(rb)]
}
