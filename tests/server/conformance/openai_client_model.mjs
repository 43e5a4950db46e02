// Conformance with a model file: the official `openai` npm client against a triad-node serving a
// GGUF (--model), whose answers come from the file's weights through its own tokenizer and chat
// template. Usage: node openai_client_model.mjs BASE_URL API_KEY MODEL MESSAGE PROMPT_TOKENS
import assert from "node:assert/strict";
import OpenAI from "openai";

const [baseURL, apiKey, model, message, promptTokens] = process.argv.slice(2);
const client = new OpenAI({ baseURL, apiKey, maxRetries: 0, timeout: 120_000 });
const user = [{ role: "user", content: message }];
let passed = 0;
async function check(name, fn) {
  try {
    await fn();
    passed++;
    console.log(`ok   ${name}`);
  } catch (e) {
    console.log(`FAIL ${name}: ${e.stack ?? e}`);
    process.exitCode = 1;
  }
}

await check("models.list names the file's model", async () => {
  const models = await client.models.list();
  assert.deepEqual(models.data.map((m) => m.id), [model]);
});

await check("a completion counts the prompt as the model's tokenizer does", async () => {
  const r = await client.chat.completions.create({ model, messages: user, max_tokens: 8, temperature: 0 });
  assert.equal(r.object, "chat.completion");
  assert.equal(r.model, model);
  assert.equal(r.usage.prompt_tokens, Number(promptTokens));
  assert.ok(r.usage.completion_tokens >= 1 && r.usage.completion_tokens <= 8);
  assert.equal(typeof r.choices[0].message.content, "string");
  assert.ok(["stop", "length"].includes(r.choices[0].finish_reason));
});

await check("a streamed completion gives the same answer in valid UTF-8 deltas", async () => {
  const whole = await client.chat.completions.create({ model, messages: user, max_tokens: 8, temperature: 0 });
  const stream = await client.chat.completions.create({
    model, messages: user, max_tokens: 8, temperature: 0, stream: true,
    stream_options: { include_usage: true },
  });
  let text = "";
  let usage = null;
  for await (const chunk of stream) {
    for (const c of chunk.choices) if (c.delta?.content) {
      assert.ok(!c.delta.content.includes("\ufffd") || whole.choices[0].message.content.includes("\ufffd"));
      text += c.delta.content;
    }
    if (chunk.usage) usage = chunk.usage;
  }
  assert.equal(text, whole.choices[0].message.content);
  assert.equal(usage.prompt_tokens, Number(promptTokens));
});

console.log(`${passed} checks passed`);
