/*
 * onigsplit: split texts with a regex using Oniguruma, the regex engine
 * Hugging Face tokenizers (Rust, "onig" feature, the default) runs
 * tokenizer.json Split patterns with. It is the strongest reference for
 * trainer/tokenizer's hand-written scanner: the same engine, same options
 * (ONIG_OPTION_NONE, ONIG_SYNTAX_DEFAULT, UTF-8) as the Rust onig crate's
 * Regex::new.
 *
 * Usage: onigsplit PATTERN < texts > matches
 * Input: records of a 4-byte little-endian length and that many bytes.
 * Output: one line per record: space-separated "start-end" byte offsets of
 * the successive leftmost matches (what find_iter yields).
 */
#include <oniguruma.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: onigsplit PATTERN < records\n");
    return 2;
  }
  OnigEncoding encs[] = {ONIG_ENCODING_UTF8};
  onig_initialize(encs, 1);
  regex_t *reg;
  OnigErrorInfo einfo;
  const UChar *pat = (const UChar *)argv[1];
  int r = onig_new(&reg, pat, pat + strlen(argv[1]), ONIG_OPTION_NONE, ONIG_ENCODING_UTF8,
                   ONIG_SYNTAX_DEFAULT, &einfo);
  if (r != ONIG_NORMAL) {
    UChar msg[ONIG_MAX_ERROR_MESSAGE_LEN];
    onig_error_code_to_str(msg, r, &einfo);
    fprintf(stderr, "onigsplit: pattern: %s\n", msg);
    return 1;
  }
  OnigRegion *region = onig_region_new();
  unsigned char hdr[4];
  while (fread(hdr, 1, 4, stdin) == 4) {
    size_t n = (size_t)hdr[0] | (size_t)hdr[1] << 8 | (size_t)hdr[2] << 16 | (size_t)hdr[3] << 24;
    UChar *buf = malloc(n + 1);
    if (buf == NULL || (n > 0 && fread(buf, 1, n, stdin) != n)) {
      fprintf(stderr, "onigsplit: short read\n");
      return 1;
    }
    const UChar *end = buf + n;
    size_t pos = 0;
    int first = 1;
    while (pos < n) {
      r = onig_search(reg, buf, end, buf + pos, end, region, ONIG_OPTION_NONE);
      if (r == ONIG_MISMATCH) break;
      if (r < 0) {
        fprintf(stderr, "onigsplit: search error %d\n", r);
        return 1;
      }
      printf(first ? "%d-%d" : " %d-%d", region->beg[0], region->end[0]);
      first = 0;
      /* An empty match would loop forever; this pattern has none. */
      pos = region->end[0] > region->beg[0] ? (size_t)region->end[0] : (size_t)region->end[0] + 1;
    }
    putchar('\n');
    free(buf);
  }
  onig_region_free(region, 1);
  onig_free(reg);
  onig_end();
  return 0;
}
