// reference.mjs computes the expected outputs the Go tokenizer and chat tests
// compare against, using implementations that share no code with ours:
//
//   - token ids: @lenml/tokenizers (a fork of transformers.js's tokenizers)
//     loading the real Qwen tokenizer.json;
//   - pre-token splits: V8's regex engine running the tokenizer.json pattern;
//   - chat renderings: @huggingface/jinja rendering the chat_template shipped
//     in the Qwen tokenizer_config.json.
//
// Where JavaScript's regex semantics differ from Oniguruma's (which Hugging
// Face tokenizers uses), the pattern is rewritten into an equivalent JS regex
// that spells out Oniguruma's classes; see onigToJS below and
// docs/tokenizer.md. The unmodified pattern is also run and its disagreements
// counted in summary.json, so the rewrite's effect is visible.
//
// Usage: node reference.mjs TOKENIZER_DIR CORPUS_DIR CHAT_CASES OUT_DIR
import { createRequire } from "node:module";
import fs from "node:fs";
import path from "node:path";
import crypto from "node:crypto";

const require = createRequire(import.meta.url);
const { TokenizerLoader } = require("@lenml/tokenizers");
const { Template } = require("@huggingface/jinja");

const [tokDir, corpusDir, chatCases, outDir] = process.argv.slice(2);
if (!outDir) {
  console.error("usage: node reference.mjs TOKENIZER_DIR CORPUS_DIR CHAT_CASES OUT_DIR");
  process.exit(2);
}
fs.mkdirSync(outDir, { recursive: true });

const tokJSON = JSON.parse(fs.readFileSync(path.join(tokDir, "tokenizer.json"), "utf8"));
const tokConfig = JSON.parse(fs.readFileSync(path.join(tokDir, "tokenizer_config.json"), "utf8"));

// The one pattern the Go scanner implements (trainer/tokenizer/split.go).
const QWEN = String.raw`(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`;
const split = tokJSON.pre_tokenizer.pretokenizers[0];
if (split.pattern.Regex !== QWEN) {
  throw new Error(`tokenizer.json split pattern changed: ${split.pattern.Regex}`);
}

// Oniguruma's \s is Unicode White_Space; JS's \s adds U+FEFF and lacks
// U+0085. Oniguruma's (?i) folds ſ (U+017F) to s; JS has no (?i:...) groups.
const WS = String.raw`\t\n\v\f\r \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000`;
function onigToJS(p) {
  const contractions = String.raw`(?i:'s|'t|'re|'ve|'m|'ll|'d)`;
  if (!p.startsWith(contractions)) throw new Error("unexpected pattern head");
  p = String.raw`(?:'(?:[sS\u017f]|[tT]|[rR][eE]|[vV][eE]|[mM]|[lL][lL]|[dD]))` + p.slice(contractions.length);
  p = p.replaceAll(String.raw`[^\s`, `[^${WS}`);
  p = p.replaceAll(String.raw`\S`, `[^${WS}]`);
  p = p.replaceAll(String.raw`\s`, `[${WS}]`);
  return p;
}
const onigPattern = onigToJS(QWEN);
const onigRegex = new RegExp(onigPattern, "gu");
// What transformers.js itself would build from the unmodified pattern.
const naiveRegex = new RegExp(
  QWEN.replace(String.raw`(?i:'s|'t|'re|'ve|'m|'ll|'d)`, String.raw`(?:'([sS]|[tT]|[rR][eE]|[vV][eE]|[mM]|[lL][lL]|[dD]))`),
  "gu",
);

function regexSplit(text, re) {
  const out = [];
  let prev = 0;
  for (const m of text.matchAll(re)) {
    if (m.index > prev) out.push(text.slice(prev, m.index)); // never happens for this pattern
    out.push(m[0]);
    prev = m.index + m[0].length;
  }
  if (prev < text.length) out.push(text.slice(prev));
  return out;
}

function loadTokenizer(pattern) {
  const j = structuredClone(tokJSON);
  j.pre_tokenizer.pretokenizers[0].pattern.Regex = pattern;
  return TokenizerLoader.fromPreTrained({ tokenizerJSON: j, tokenizerConfig: tokConfig });
}
const tok = loadTokenizer(onigPattern);
const naiveTok = TokenizerLoader.fromPreTrained({ tokenizerJSON: tokJSON, tokenizerConfig: tokConfig });
const encode = (t, s) => t.encode(s, { add_special_tokens: false });

// ---- corpus: every file whole, and in chunks of 16 lines ----
const sha = (b) => crypto.createHash("sha256").update(b).digest("hex");
const files = fs.readdirSync(corpusDir).filter((f) => f.endsWith(".txt")).sort();
const manifest = {};
const docs = [];
for (const f of files) {
  const buf = fs.readFileSync(path.join(corpusDir, f));
  manifest[f] = sha(buf);
  const text = buf.toString("utf8");
  docs.push({ file: f, chunk: -1, text });
  const lines = text.split(/(?<=\n)/);
  for (let i = 0; i < lines.length; i += 16) {
    docs.push({ file: f, chunk: i / 16, text: lines.slice(i, i + 16).join("") });
  }
}

const encOut = [];
let naiveDiffs = 0;
for (const d of docs) {
  const ids = encode(tok, d.text);
  if (JSON.stringify(ids) !== JSON.stringify(encode(naiveTok, d.text))) naiveDiffs++;
  encOut.push(JSON.stringify({ file: d.file, chunk: d.chunk, text: d.text, ids }));
}
fs.writeFileSync(path.join(outDir, "encode.jsonl"), encOut.join("\n") + "\n");

// ---- splitter: every corpus line plus seeded random strings ----
let seed = 0x9e3779b9;
function rand(n) {
  // xorshift32: deterministic across runs and machines.
  seed ^= seed << 13; seed >>>= 0;
  seed ^= seed >>> 17;
  seed ^= seed << 5; seed >>>= 0;
  return seed % n;
}
const alphabet = [
  " ", " ", " ", "  ", "\t", "\n", "\r", "\r\n", "\v", "\f", "\u0085", "\u00a0", "\u1680", "\u2003", "\u2028",
  "\u2029", "\u202f", "\u205f", "\u3000", "\ufeff", "\u200b", "\u180e",
  "a", "b", "Z", "é", "ß", "ſ", "K", "İ", "ω", "Ж", "ب", "א", "क", "ि", "中", "文", "の", "한", "ก",
  "'", "'s", "'S", "'t", "'re", "'RE", "'ve", "'m", "'ll", "'LL", "'d", "'x", "'", "’s",
  "0", "7", "٣", "½", "²", "Ⅻ", "①", "१",
  ".", ",", "!", "?", "-", "_", "(", ")", "{", "}", "\"", "#", "$", "%", "&", "*", "+", "/", "\\", ":", ";", "<", ">", "=", "@", "[", "]", "^", "`", "|", "~",
  "\u0301", "\u0308", "e\u0301", "\u200d", "👍", "👍🏽", "👨‍👩‍👧", "🇩🇪", "\u0000", "\u001b", "\u007f",
];
const splitOut = [];
let splitNaiveDiffs = 0;
function addSplit(text) {
  const pieces = regexSplit(text, onigRegex);
  if (JSON.stringify(pieces) !== JSON.stringify(regexSplit(text, naiveRegex))) splitNaiveDiffs++;
  splitOut.push(JSON.stringify({ text, pieces }));
}
for (const d of docs) if (d.chunk >= 0) addSplit(d.text);
for (let i = 0; i < 20000; i++) {
  let s = "";
  const n = rand(24);
  for (let k = 0; k < n; k++) s += alphabet[rand(alphabet.length)];
  addSplit(s);
}
fs.writeFileSync(path.join(outDir, "split.jsonl"), splitOut.join("\n") + "\n");

// ---- chat: render the packaged template on the test conversations ----
// The package ships Qwen3's template. For conversations that start with a
// system message and do not end with an assistant turn, it renders exactly
// what Qwen2.5-Instruct's template renders (see docs/tokenizer.md), so the
// reference inserts Qwen2.5's default system prompt where one is missing and
// marks the other conversations as not comparable.
const DEFAULT_SYSTEM = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.";
const template = new Template(tokConfig.chat_template);
const cases = JSON.parse(fs.readFileSync(chatCases, "utf8"));
const chatOut = [];
for (const c of cases) {
  const msgs = c.messages.map((m) => {
    const out = { role: m.role, content: m.content ?? "" };
    if (m.tool_calls) {
      out.tool_calls = m.tool_calls.map((tc) => ({
        id: tc.id, type: tc.type,
        function: { name: tc.function.name, arguments: JSON.parse(tc.function.arguments) },
      }));
    }
    return out;
  });
  const last = msgs[msgs.length - 1];
  const comparable = !(last && last.role === "assistant") && !msgs.some((m) => m.content.includes("</think>"));
  if (!comparable) {
    chatOut.push(JSON.stringify({ name: c.name, comparable: false }));
    continue;
  }
  if (msgs.length === 0 || msgs[0].role !== "system") msgs.unshift({ role: "system", content: DEFAULT_SYSTEM });
  const rendered = template.render({
    messages: msgs,
    tools: c.tools ?? undefined,
    add_generation_prompt: !!c.add_generation_prompt,
  });
  chatOut.push(JSON.stringify({ name: c.name, comparable: true, rendered, ids: encode(tok, rendered) }));
}
fs.writeFileSync(path.join(outDir, "chat.jsonl"), chatOut.join("\n") + "\n");

// ---- throughput of the JS encoder on the same corpus (for the benchmark) ----
const whole = docs.filter((d) => d.chunk === -1).map((d) => d.text);
let tokens = 0;
for (const t of whole) tokens += encode(tok, t).length; // warm its caches
const t0 = process.hrtime.bigint();
let reps = 0;
do {
  for (const t of whole) encode(tok, t);
  reps++;
} while (process.hrtime.bigint() - t0 < 2_000_000_000n);
const secs = Number(process.hrtime.bigint() - t0) / 1e9;

const summary = {
  corpus_sha256: manifest,
  documents: docs.length,
  split_cases: splitOut.length,
  chat_cases: chatOut.length,
  // Documents / split cases where the unmodified JS regex would disagree.
  naive_js_encode_diffs: naiveDiffs,
  naive_js_split_diffs: splitNaiveDiffs,
  js_corpus_tokens: tokens,
  js_tokens_per_sec: Math.round((tokens * reps) / secs),
  node: process.version,
};
fs.writeFileSync(path.join(outDir, "summary.json"), JSON.stringify(summary, null, 1) + "\n");
console.log(JSON.stringify(summary));
