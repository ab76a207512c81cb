// gencorpus.mjs writes trainer/tokenizer/testdata/corpus/generated.txt: a
// deterministic, combinatorial corpus of the cases a byte-level BPE
// tokenizer most easily gets wrong (whitespace runs, CR/LF, trailing spaces,
// contractions, numbers, NFC, emoji, embedded special tokens). Its output is
// committed; rerun it only to change the corpus:
//
//   node scripts/tokenizer/gencorpus.mjs > trainer/tokenizer/testdata/corpus/generated.txt
const out = [];
const emit = (s) => out.push(s);

let seed = 12345;
function rand(n) {
  seed ^= seed << 13; seed >>>= 0;
  seed ^= seed >>> 17;
  seed ^= seed << 5; seed >>>= 0;
  return seed % n;
}
const pick = (xs) => xs[rand(xs.length)];

// 1. Whitespace between every kind of neighbour.
const spaces = ["", " ", "  ", "   ", "\t", "\t\t", " \t", "\t ", "    ", "\u00a0", "\u3000", "\u2003", "\u0085", "\ufeff", " \u00a0 "];
const breaks = ["\n", "\r\n", "\r", "\n\n", "\r\n\r\n", " \n", "  \n", "\t\n", " \r\n", "\n ", "\n  ", "\n\t", "\n\n\n   "];
const neighbours = ["word", "Word", "123", "4", "!", "...", "(", ")", "é", "中文", "😀", "'s", "'ll", "-", "_x", "<|im_end|>", "ſ"];
for (const a of neighbours) {
  for (const s of spaces) {
    emit(`${a}${s}${pick(neighbours)}${s}${a}`);
  }
}
for (const b of breaks) {
  for (const s of spaces.slice(0, 8)) {
    emit(`start${s}${b}${s}${pick(neighbours)}${b}end${s}`);
  }
}
// Trailing whitespace at the very end of a line of each kind.
for (const s of spaces) emit(`trailing${s}`);

// 2. Contractions in every case, glued and spaced.
const contractions = ["'s", "'t", "'re", "'ve", "'m", "'ll", "'d"];
const variants = (c) => [c, c.toUpperCase(), c[0] + c[1].toUpperCase() + c.slice(2), c[0] + c.slice(1, 2) + c.slice(2).toUpperCase()];
for (const c of contractions) {
  for (const v of variants(c)) {
    emit(`it${v} x${v}y ${v} ${v}${v} 9${v} !${v} ${v}s ${v}-${v}ing ’${v.slice(1)} ''${v.slice(1)}`);
  }
}
emit("'ſ 'ſa 'ſt xſ 'ſ's 'K 'k 'S 'SS 'LL 'Ll 'lL 'RE 'rE 'Re 'VE 'M 'D 'T");

// 3. Numbers of every length and shape.
let n = "";
for (let i = 1; i <= 40; i++) {
  n += String((i * 7) % 10);
  emit(`${n} ${n}.${n.slice(0, 3)} -${n} +${n}e-${i} x${n}y ${n}th`);
}
const scripts = ["0123456789", "٠١٢٣٤٥٦٧٨٩", "۰۱۲۳۴۵۶۷۸۹", "०१२३४५६७८९", "০১২৩৪৫৬৭৮৯", "๐๑๒๓๔๕๖๗๘๙", "０１２３４５６７８９", "𝟎𝟏𝟐𝟑𝟒𝟓𝟔𝟕𝟖𝟗"];
for (const d of scripts) emit(`digits: ${d} ${d.slice(0, 4)}.${d.slice(4)} (${d}) ${d}abc abc${d}`);
emit("1,234,567.89 1.234.567,89 1 234 567,89 1'234'567 0x7fff_ffff 0o755 0b1011 1e10 1E-10 6.022e23 3.14159265358979323846");
emit("½+¼=¾ ⅐ ⅑ ⅒ ² ³ ¹ ⁴ Ⅷ ⅷ ㊿ ⑳ ⓪ 〇 零一二三 十百千万 壹贰叁");

// 4. NFC: decomposed, composed and reordered sequences.
const nfc = [
  "e\u0301", "E\u0301", "a\u030a", "A\u030a", "o\u0308", "u\u0308", "n\u0303", "c\u0327", "s\u030c", "z\u030c",
  "a\u0323\u0302", "a\u0302\u0323", "o\u031b\u0301", "\u1100\u1161", "\u1100\u1161\u11a8", "\u1112\u1161\u11ab",
  "\u2126", "\u212b", "\u212a", "\uf900", "\uf91c", "\u0344", "\u0958", "\u00c5", "\u0041\u030a\u0301",
  "\u0915\u093c", "\u05d1\u05bc", "\u0627\u0653", "\u304b\u3099", "\u30cf\u309a", "q\u0307\u0323", "\u1e0b\u0323",
];
for (const s of nfc) emit(`[${s}] x${s}y ${s}${s} ${s}123 '${s} ${s}'s`);
emit(nfc.join(" "));
emit(nfc.join(""));

// 5. Emoji: modifiers, ZWJ sequences, flags, keycaps, variation selectors.
const emoji = ["😀", "👍🏽", "👨‍👩‍👧‍👦", "🧑🏾‍🤝‍🧑🏻", "🏳️‍⚧️", "🇫🇷", "🏴󠁧󠁢󠁳󠁣󠁴󠁿", "#️⃣", "9️⃣", "❤️‍🔥", "☺︎", "☺️", "🫶🏼", "🐈‍⬛", "👁️‍🗨️"];
for (const e of emoji) emit(`${e} x${e}y ${e}${e}${e} "${e}" ${e}.${e} 1${e}2`);

// 6. Special and added tokens embedded in text, and near misses.
const specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>", "<think>", "</think>", "<|fim_prefix|>", "<|vision_pad|>"];
for (const s of specials) {
  emit(`a${s}b ${s} ${s}${s} x ${s}\ny\n${s} <${s}> ${s.slice(0, -1)} ${s.slice(1)} ${s.toUpperCase()}`);
}
emit("<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\nHi there!<|im_end|>\n<|im_start|>assistant\nHello!<|im_end|>");
emit("<|im_start|<|im_end||><||im_start|>><|im_st art|><|im_start|>");

// 7. Control characters and odd whitespace.
emit("nul:\u0000: bell:\u0007: esc:\u001b[31mred\u001b[0m: del:\u007f: c1:\u0080\u0099: vt:\u000b: ff:\u000c: ls:\u2028: ps:\u2029:");
emit("zwsp:\u200b: zwnj:\u200c: zwj:\u200d: wj:\u2060: mvs:\u180e: nnbsp:\u202f: mmsp:\u205f: ogham:\u1680:");

// 8. Long runs.
emit(" ".repeat(100) + "x");
emit("\t".repeat(33) + "y" + " ".repeat(17));
emit("a".repeat(300));
emit("🙂".repeat(50));
emit("ab".repeat(150) + " " + "12".repeat(40) + " " + "!?".repeat(60));
emit("\n".repeat(7) + "z" + "\r\n".repeat(5) + "w");

// 9. Seeded random sentences mixing everything above.
const words = [
  "the", "The", "THE", "model", "tokenizer", "reward", "policy", "gradient", "Qwen", "GRPO", "sandbox", "episode",
  "über", "naïve", "café", "résumé", "Ελλάδα", "Москва", "東京", "北京", "서울", "القاهرة", "ירושלים", "मुंबई",
  "don't", "can't", "I'm", "you're", "we've", "she'll", "he'd", "O'Reilly", "rock'n'roll",
  "42", "3.14", "1e9", "2024", "-7", "0x1f", "v2.5", "100%", "$5", "#1",
  ",", ".", "!", "?", ";", ":", "...", "--", "—", "(", ")", "[", "]", "{", "}", "\"", "'", "`", "/", "\\",
  "😀", "🚀", "👍🏿", "👩‍🔬", "🇧🇷", "e\u0301", "A\u030a", "<|im_end|>", "<tool_call>", "\u00a0", "\u3000",
];
const seps = [" ", " ", " ", " ", "", "  ", "\t", "\n", "\r\n", " \n", "\n\n", "   "];
for (let line = 0; line < 1500; line++) {
  let s = "";
  const len = 1 + rand(20);
  for (let i = 0; i < len; i++) {
    s += pick(words);
    if (i < len - 1 || rand(4) === 0) s += pick(seps);
  }
  emit(s);
}

process.stdout.write(out.join("\n") + "\n");
