// bench.mjs measures the JavaScript reference tokenizer (@lenml/tokenizers,
// i.e. transformers.js) on the committed corpus, as the baseline for
// BenchmarkEncode. Prints one JSON line: tokens, seconds, tokens_per_sec.
//
// Usage: node bench.mjs TOKENIZER_DIR CORPUS_DIR [SECONDS]
import { createRequire } from "node:module";
import fs from "node:fs";
import path from "node:path";

const require = createRequire(import.meta.url);
const { TokenizerLoader } = require("@lenml/tokenizers");
const [tokDir, corpusDir, secondsArg] = process.argv.slice(2);
const tok = TokenizerLoader.fromPreTrained({
  tokenizerJSON: JSON.parse(fs.readFileSync(path.join(tokDir, "tokenizer.json"), "utf8")),
  tokenizerConfig: JSON.parse(fs.readFileSync(path.join(tokDir, "tokenizer_config.json"), "utf8")),
});
// The same documents BenchmarkEncode uses: each corpus file in 16-line chunks.
const docs = [];
for (const f of fs.readdirSync(corpusDir).filter((f) => f.endsWith(".txt")).sort()) {
  const lines = fs.readFileSync(path.join(corpusDir, f), "utf8").split(/(?<=\n)/);
  for (let i = 0; i < lines.length; i += 16) docs.push(lines.slice(i, i + 16).join(""));
}
const encode = () => {
  let n = 0;
  for (const d of docs) n += tok.encode(d, { add_special_tokens: false }).length;
  return n;
};
const tokens = encode(); // warm the BPE cache, like the "warm" Go benchmark
const limit = BigInt(Math.round(Number(secondsArg ?? 3) * 1e9));
const t0 = process.hrtime.bigint();
let reps = 0;
do { encode(); reps++; } while (process.hrtime.bigint() - t0 < limit);
const secs = Number(process.hrtime.bigint() - t0) / 1e9;
console.log(JSON.stringify({ tokens, reps, seconds: secs, tokens_per_sec: Math.round((tokens * reps) / secs), node: process.version }));
