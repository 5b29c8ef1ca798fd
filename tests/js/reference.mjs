// reference.mjs — the tokenizer reference for the tests: @huggingface/tokenizers (pinned in
// package-lock.json) run on a JSON-lines corpus.
//
//   node reference.mjs TOKENIZER_JSON CORPUS_JSONL OUT_JSONL [--special]
//       one line out per line in: {"ids": [...], "text": decode(ids)}
//   node reference.mjs TOKENIZER_JSON CORPUS_JSONL --bench
//       encodes the corpus once (warm-up) then again, timed; prints {"seconds", "bytes", "tokens"}
import { readFileSync, writeFileSync } from "node:fs";
import { Tokenizer } from "@huggingface/tokenizers";

const [file, corpus, out, flag] = process.argv.slice(2);
const tok = new Tokenizer(JSON.parse(readFileSync(file, "utf8")), {});
const lines = readFileSync(corpus, "utf8").split("\n").filter((l) => l.length > 0).map((l) => JSON.parse(l));

if (out === "--bench") {
  let tokens = 0, bytes = 0;
  for (const s of lines) tok.encode(s, { add_special_tokens: false });
  const t0 = process.hrtime.bigint();
  for (const s of lines) {
    tokens += tok.encode(s, { add_special_tokens: false }).ids.length;
    bytes += Buffer.byteLength(s, "utf8");
  }
  const seconds = Number(process.hrtime.bigint() - t0) / 1e9;
  console.log(JSON.stringify({ seconds, bytes, tokens }));
} else {
  const special = flag === "--special";
  const res = [];
  for (const s of lines) {
    const ids = tok.encode(s, { add_special_tokens: special }).ids;
    const text = ids.length ? tok.decode(ids, { clean_up_tokenization_spaces: false }) : "";
    res.push(JSON.stringify({ ids, text }));
  }
  writeFileSync(out, res.join("\n") + "\n");
}
