// sdk_case.js — one case of tests/python/test_openai.py, run with the official openai SDK
// (pinned in package.json) against a running recurd.
//   node sdk_case.js <case> <baseURL> <apiKey> <model> [json args]
// Prints one JSON object on stdout: what the SDK returned (or, for an error, its class and
// fields), for the Python test to check against its own reference.
'use strict';
const { OpenAI } = require('openai');

async function collect(stream) {
  const chunks = [];
  for await (const c of stream) chunks.push(c);
  return chunks;
}

function errorInfo(e) {
  return {
    error: e.constructor.name,
    status: e.status,
    code: e.code ?? null,
    param: e.param ?? null,
    type: e.type ?? null,
    message: e.message,
    isBadRequest: e instanceof OpenAI.BadRequestError,
    isAuth: e instanceof OpenAI.AuthenticationError,
    isNotFound: e instanceof OpenAI.NotFoundError,
    isAPIError: e instanceof OpenAI.APIError,
  };
}

const cases = {
  // POST /v1/completions, not streamed: the SDK's parsed object.
  completion: (c, model, a) => c.completions.create({ model, ...a }),
  // Streamed: every chunk the SDK yielded.
  completion_stream: async (c, model, a) =>
    ({ chunks: await collect(await c.completions.create({ model, stream: true, ...a })) }),
  chat: (c, model, a) => c.chat.completions.create({ model, ...a }),
  chat_stream: async (c, model, a) =>
    ({ chunks: await collect(await c.chat.completions.create({ model, stream: true, ...a })) }),
  models: async (c, model) => ({ list: (await c.models.list()).data, one: await c.models.retrieve(model) }),
  model_missing: (c, model) => c.models.retrieve('no-such-model'),
  // A multi-turn chat as a stateless client sends it: the whole conversation every turn.
  conversation: async (c, model, a) => {
    const messages = a.system ? [{ role: 'system', content: a.system }] : [];
    const turns = [];
    for (const user of a.users) {
      messages.push({ role: 'user', content: user });
      const r = await c.chat.completions.create({ model, messages, ...a.params });
      messages.push({ role: 'assistant', content: r.choices[0].message.content });
      turns.push(r);
    }
    return { turns };
  },
};

async function main() {
  const [name, baseURL, apiKey, model, args] = process.argv.slice(2);
  const client = new OpenAI({ baseURL, apiKey, maxRetries: 0, timeout: 60000 });
  let out;
  try {
    out = await cases[name](client, model, args ? JSON.parse(args) : {});
  } catch (e) {
    if (!(e instanceof OpenAI.APIError)) throw e;
    out = errorInfo(e);
  }
  process.stdout.write(JSON.stringify(out));
}

main().catch((e) => {
  process.stderr.write(String(e && e.stack ? e.stack : e) + '\n');
  process.exit(2);
});
