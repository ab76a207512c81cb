package compute

// Sampling selects how TokenSampler draws a token from a row of logits.
type Sampling struct {
	// Temperature scales the logits (logits/T); 0 is greedy (argmax).
	Temperature float32
	// TopK keeps the K most likely tokens; 0 disables it.
	TopK int
	// TopP keeps the smallest most-likely set whose probability reaches
	// TopP (after TopK); 0 or 1 disables it.
	TopP float32
	// Seed keys the random stream; see TokenSampler.
	Seed uint64
}

// TokenSampler is implemented by devices that draw next tokens where the
// logits already are, so generation moves token ids and their log-probs to
// the host rather than whole rows of logits. The CPU backend does not
// implement it: the host sampler (trainer/generate) reads its logits in
// place.
type TokenSampler interface {
	// SampleTokens draws ids[r] from row r of logits[rows,vocab] and sets
	// logp[r] to its log-prob under softmax(logits/T) over the whole
	// vocabulary (T=1 when greedy). The draw of row r depends only on the
	// seed, stream[r] and step[r] (a counter-based generator), never on
	// the other rows or the batch size.
	SampleTokens(ids Ints, logp, logits Tensor, stream, step Ints, rows, vocab int, s Sampling)
	// DownloadInts copies src to the host; it waits for queued ops.
	DownloadInts(dst []int32, src Ints)
}
