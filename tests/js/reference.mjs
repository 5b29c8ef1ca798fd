// reference.mjs — the tokenizer reference for the tests: @huggingface/tokenizers (pinned in
// package-lock.json) run on a JSON-lines corpus.
//
//   node reference.mjs TOKENIZER_JSON CORPUS_JSONL OUT_JSONL [--special]
//       one line out per line in: {"ids": [...], "text": decode(ids)}
//   node reference.mjs TOKENIZER_JSON CORPUS_JSONL --bench
//       encodes the corpus once (warm-up) then three times, timed; prints the best pass:
//       {"seconds" (wall), "cpu_seconds" (process user + system), "bytes", "tokens"}
import { readFileSync, writeFileSync } from "node:fs";
import { Tokenizer } from "@huggingface/tokenizers";

const [file, corpus, out, flag] = process.argv.slice(2);
const tok = new Tokenizer(JSON.parse(readFileSync(file, "utf8")), {});
const lines = readFileSync(corpus, "utf8").split("\n").filter((l) => l.length > 0).map((l) => JSON.parse(l));

if (out === "--bench") {
  for (const s of lines) tok.encode(s, { add_special_tokens: false });
  let best = null;
  for (let pass = 0; pass < 3; pass++) {
    let tokens = 0, bytes = 0;
    const t0 = process.hrtime.bigint(), c0 = process.cpuUsage();
    for (const s of lines) {
      tokens += tok.encode(s, { add_special_tokens: false }).ids.length;
      bytes += Buffer.byteLength(s, "utf8");
    }
    const seconds = Number(process.hrtime.bigint() - t0) / 1e9;
    const c = process.cpuUsage(c0), cpu_seconds = (c.user + c.system) / 1e6;
    if (!best || cpu_seconds < best.cpu_seconds) best = { seconds, cpu_seconds, bytes, tokens };
  }
  console.log(JSON.stringify(best));
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
