// The chat-template reference for tests/python/test_chat_template.py: @huggingface/jinja (the
// Jinja that Hugging Face's JavaScript libraries render chat templates with), pinned by
// package-lock.json. Reads a JSON list of cases on stdin:
//   {"template": str, "vars": {messages, add_generation_prompt, bos_token, eos_token, ...}}
// and writes a JSON list of {"ok": true, "text": str} or {"ok": false, "error": str}.
import { Template } from "@huggingface/jinja";

let input = "";
process.stdin.setEncoding("utf8");
for await (const chunk of process.stdin) input += chunk;
const cases = JSON.parse(input);
const out = cases.map(({ template, vars }) => {
  try {
    return { ok: true, text: new Template(template).render(vars) };
  } catch (e) {
    return { ok: false, error: String(e && e.message ? e.message : e) };
  }
});
process.stdout.write(JSON.stringify(out));
