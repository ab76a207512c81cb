// client.mjs BASE_URL MODEL: drives rlhost's embedded policy server with
// the official `openai` npm package and prints one JSON object of what it
// saw, for trainer/serve's TestOpenAINodeClient to check. Installed by
// scripts/serve/fetch.sh into .cache/openai-node (NODE_PATH points there).
import OpenAI from "openai";

const [baseURL, model] = process.argv.slice(2);
const client = new OpenAI({ baseURL, apiKey: "unused", maxRetries: 0 });
const messages = [{ role: "user", content: "add 3 please" }];
const tools = [{ type: "function", function: { name: "add", description: "adds", parameters: { type: "object", properties: { x: { type: "integer" } } } } }];
const out = {};

async function failure(p) {
  try {
    await p;
    return { status: 0, message: "no error" };
  } catch (e) {
    return { status: e.status ?? -1, message: String(e.message ?? e), type: e.type ?? e.error?.type ?? "" };
  }
}

const tool = await client.chat.completions.create({ model, messages, tools, tool_choice: "auto" });
out.tools = {
  finish: tool.choices[0].finish_reason,
  content: tool.choices[0].message.content,
  calls: (tool.choices[0].message.tool_calls ?? []).map((c) => ({ id: c.id, type: c.type, name: c.function.name, arguments: c.function.arguments })),
};

const many = await client.chat.completions.create({ model, messages, n: 2, max_tokens: 3, logprobs: true, top_logprobs: 2, seed: 4 });
out.n = many.choices.map((c) => ({ index: c.index, finish: c.finish_reason, content: c.message.content, logprobs: c.logprobs.content.map((l) => ({ token: l.token, logprob: l.logprob, top: l.top_logprobs.length })) }));
out.n_usage = many.usage;

const stopped = await client.chat.completions.create({ model, messages, stop: ["<tool"] });
out.stop = { finish: stopped.choices[0].finish_reason, content: stopped.choices[0].message.content };

const stream = await client.chat.completions.create({ model, messages, stream: true, stream_options: { include_usage: true } });
let text = "", finish = null, usage = null, chunks = 0;
for await (const chunk of stream) {
  chunks++;
  if (chunk.usage) usage = chunk.usage;
  for (const c of chunk.choices) {
    text += c.delta?.content ?? "";
    if (c.finish_reason) finish = c.finish_reason;
  }
}
out.stream = { content: text, finish, usage, chunks };

const ids = await client.chat.completions.create({ model, messages, return_token_ids: true, max_tokens: 4 });
out.token_ids = { prompt: ids.prompt_token_ids, completion: ids.choices[0].token_ids, content: ids.choices[0].message.content };

const together = await Promise.all([0, 1, 2, 3].map((i) => client.chat.completions.create({ model, messages: [{ role: "user", content: `request ${i}` }], max_tokens: 2 + i })));
out.concurrent = together.map((r) => r.usage.completion_tokens);

out.unknown_model = await failure(client.chat.completions.create({ model: "nope", messages }));
out.overflow = await failure(client.chat.completions.create({ model, messages, max_tokens: 100000 }));
out.bad_temperature = await failure(client.chat.completions.create({ model, messages, temperature: -3 }));
out.models = (await client.models.list()).data.map((m) => m.id);

console.log(JSON.stringify(out));
