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

const tools = [
  { type: "function", function: { name: "get_weather", parameters: { type: "object", properties: { city: { type: "string" } } } } },
  { type: "function", function: { name: "get_time", parameters: { type: "object", properties: {} } } },
];
// The model is forced (the triad.script extension, on with --allow-scripts) to write two calls
// in its family's syntax (Hermes <tool_call> for this Qwen-style file); the node parses them.
const script = [
  { tokens: 0, tool_call: { name: "get_weather", arguments: { city: "Oslo" } } },
  { tokens: 0, tool_call: { name: "get_time", arguments: {} } },
  { tokens: 0 },
];
function checkCalls(calls) {
  assert.equal(calls.length, 2);
  assert.equal(calls[0].function.name, "get_weather");
  assert.deepEqual(JSON.parse(calls[0].function.arguments), { city: "Oslo" });
  assert.equal(calls[1].function.name, "get_time");
  assert.deepEqual(JSON.parse(calls[1].function.arguments), {});
  assert.notEqual(calls[0].id, calls[1].id);
  for (const c of calls) assert.match(c.id, /^[A-Za-z0-9]{9}$/);
}

await check("a model file's parallel tool calls reach the client as tool_calls", async () => {
  const r = await client.chat.completions.create({ model, messages: user, tools, max_tokens: 200, triad: { script } });
  assert.equal(r.choices[0].finish_reason, "tool_calls");
  assert.equal(r.choices[0].message.content, null);
  checkCalls(r.choices[0].message.tool_calls);
  // The conversation goes on with the calls and their results, through the model's template.
  const next = await client.chat.completions.create({
    model, tools, max_tokens: 4,
    messages: [...user, r.choices[0].message,
      { role: "tool", tool_call_id: r.choices[0].message.tool_calls[0].id, content: "12 C" },
      { role: "tool", tool_call_id: r.choices[0].message.tool_calls[1].id, content: "14:00" }],
  });
  assert.ok(["stop", "length"].includes(next.choices[0].finish_reason));
  assert.ok(next.usage.prompt_tokens > r.usage.prompt_tokens);
});

await check("streamed, the calls come as indexed tool_calls deltas", async () => {
  const stream = await client.chat.completions.create({ model, messages: user, tools, max_tokens: 200, stream: true, triad: { script } });
  const calls = [];
  let finish = null;
  for await (const chunk of stream) {
    for (const c of chunk.choices) {
      for (const d of c.delta?.tool_calls ?? []) {
        calls[d.index] ??= { id: "", function: { name: "", arguments: "" } };
        if (d.id) calls[d.index].id = d.id;
        if (d.function?.name) calls[d.index].function.name += d.function.name;
        if (d.function?.arguments) calls[d.index].function.arguments += d.function.arguments;
      }
      if (c.finish_reason) finish = c.finish_reason;
    }
  }
  assert.equal(finish, "tool_calls");
  checkCalls(calls);
});

await check("cut by max_tokens, the calls made so far come with finish_reason length", async () => {
  const r = await client.chat.completions.create({ model, messages: user, tools, max_tokens: 64, triad: { script } });
  assert.equal(r.choices[0].finish_reason, "length");
  assert.equal(r.choices[0].message.tool_calls.length, 1);
  assert.equal(r.choices[0].message.tool_calls[0].function.name, "get_weather");
  assert.match(r.choices[0].message.content, /^<tool_call>\{"name":"get/);
});

console.log(`${passed} checks passed`);
