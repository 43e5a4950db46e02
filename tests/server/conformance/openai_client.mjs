// Conformance of triad-node with the official `openai` npm client: non-streaming, streaming
// (with usage), tool calls returned to the client, server-side tool execution, and errors.
// Usage: node openai_client.mjs BASE_URL API_KEY
import assert from "node:assert/strict";
import OpenAI from "openai";

const [baseURL, apiKey] = process.argv.slice(2);
const client = new OpenAI({ baseURL, apiKey, maxRetries: 0, timeout: 120_000 });
const model = "triad-tiny";
const user = [{ role: "user", content: "What is the weather in Oslo?" }];
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

await check("models.list names the served model", async () => {
  const models = await client.models.list();
  assert.deepEqual(models.data.map((m) => m.id), [model]);
});

await check("a completion, not streamed", async () => {
  const r = await client.chat.completions.create({ model, messages: user, max_tokens: 6, temperature: 0 });
  assert.equal(r.object, "chat.completion");
  assert.equal(r.choices.length, 1);
  assert.equal(r.choices[0].message.role, "assistant");
  assert.equal(typeof r.choices[0].message.content, "string");
  assert.equal(r.choices[0].finish_reason, "length");
  assert.equal(r.usage.completion_tokens, 6);
  assert.equal(r.usage.total_tokens, r.usage.prompt_tokens + 6);
});

await check("a streamed completion with usage", async () => {
  const stream = await client.chat.completions.create({
    model, messages: user, max_tokens: 5, temperature: 0, stream: true,
    stream_options: { include_usage: true },
  });
  let text = "", finish = null, usage = null, chunks = 0;
  for await (const chunk of stream) {
    chunks++;
    assert.equal(chunk.object, "chat.completion.chunk");
    if (chunk.usage) usage = chunk.usage;
    for (const c of chunk.choices) {
      text += c.delta.content ?? "";
      if (c.finish_reason) finish = c.finish_reason;
    }
  }
  assert.ok(chunks >= 3);
  assert.equal(finish, "length");
  assert.equal(usage.completion_tokens, 5);
  const whole = await client.chat.completions.create({ model, messages: user, max_tokens: 5, temperature: 0 });
  assert.equal(text, whole.choices[0].message.content); // greedy: the same text either way
});

await check("a plain completion, streamed and not", async () => {
  const r = await client.completions.create({ model, prompt: "int main() {", max_tokens: 4, temperature: 0 });
  assert.equal(r.object, "text_completion");
  assert.equal(r.usage.completion_tokens, 4);
  const stream = await client.completions.create({ model, prompt: "int main() {", max_tokens: 4, temperature: 0, stream: true });
  let text = "";
  for await (const chunk of stream) text += chunk.choices[0]?.text ?? "";
  assert.equal(text, r.choices[0].text);
});

const weather = [{ type: "function", function: { name: "get_weather", description: "Weather of a city",
  parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] } } }];
const callScript = { script: [{ tokens: 3, tool_call: { name: "get_weather", arguments: { city: "Oslo" } } }, { tokens: 2 }] };

await check("a tool call the node does not host is returned to the client", async () => {
  const r = await client.chat.completions.create({ model, messages: user, tools: weather, triad: callScript });
  const choice = r.choices[0];
  assert.equal(choice.finish_reason, "tool_calls");
  const call = choice.message.tool_calls[0];
  assert.equal(call.type, "function");
  assert.equal(call.function.name, "get_weather");
  assert.deepEqual(JSON.parse(call.function.arguments), { city: "Oslo" });
  // The client runs it and sends the result back: the conversation goes on.
  const next = await client.chat.completions.create({
    model, max_tokens: 4,
    messages: [...user, choice.message, { role: "tool", tool_call_id: call.id, content: "sunny, 18 C" }],
  });
  assert.equal(next.choices[0].finish_reason, "length");
});

await check("a streamed tool call arrives as tool_calls deltas", async () => {
  const stream = await client.chat.completions.create({ model, messages: user, tools: weather, triad: callScript, stream: true });
  let name = "", args = "", finish = null;
  for await (const chunk of stream)
    for (const c of chunk.choices) {
      for (const t of c.delta.tool_calls ?? []) {
        name += t.function?.name ?? "";
        args += t.function?.arguments ?? "";
      }
      if (c.finish_reason) finish = c.finish_reason;
    }
  assert.equal(finish, "tool_calls");
  assert.equal(name, "get_weather");
  assert.deepEqual(JSON.parse(args), { city: "Oslo" });
});

const shellTool = [{ type: "function", function: { name: "shell", description: "Runs a command",
  parameters: { type: "object", properties: { command: { type: "string" } }, required: ["command"] } } }];
const shellScript = { script: [{ tokens: 2, tool_call: { name: "shell", arguments: { command: "echo conformance" } } }, { tokens: 3 }] };

await check("a call to a hosted tool the client declared runs on the node and generation goes on", async () => {
  const r = await client.chat.completions.create({ model, messages: user, tools: shellTool, triad: shellScript });
  assert.equal(r.choices[0].finish_reason, "stop");
  assert.equal(r.choices[0].message.tool_calls, undefined);
  const ran = r.triad.server_tool_calls[0];
  assert.equal(ran.name, "shell");
  assert.match(ran.result, /conformance/);
});

await check("a hosted tool the client did not declare never runs: the call is returned", async () => {
  for (const tools of [undefined, weather]) {
    const r = await client.chat.completions.create({ model, messages: user, tools, triad: shellScript });
    assert.equal(r.choices[0].finish_reason, "tool_calls");
    assert.equal(r.choices[0].message.tool_calls[0].function.name, "shell");
    assert.equal(r.triad, undefined);
    assert.equal(r.usage.triad.server_tool_calls, 0);
  }
});

await check("a streamed hosted call arrives as a triad chunk with no choices", async () => {
  const stream = await client.chat.completions.create({ model, messages: user, tools: shellTool, triad: shellScript, stream: true });
  const ran = [];
  let finish = null;
  for await (const chunk of stream) {
    if (chunk.triad?.server_tool_call) {
      assert.equal(chunk.choices.length, 0);
      ran.push(chunk.triad.server_tool_call);
    }
    for (const c of chunk.choices) if (c.finish_reason) finish = c.finish_reason;
  }
  assert.equal(finish, "stop");
  assert.equal(ran.length, 1);
  assert.equal(ran[0].name, "shell");
  assert.match(ran[0].result, /conformance/);
});

// Arguments a random model completes quickly: enums and booleans only.
const forecast = [
  { type: "function", function: { name: "get_forecast", parameters: { type: "object",
    properties: { unit: { enum: ["celsius", "fahrenheit"] }, wind: { type: "boolean" } },
    required: ["unit", "wind"], additionalProperties: false } } },
  { type: "function", function: { name: "get_time", parameters: { type: "object", properties: {}, additionalProperties: false } } },
];
function checkForecastCall(call) {
  assert.equal(call.type, "function");
  const args = JSON.parse(call.function.arguments);
  if (call.function.name === "get_forecast") {
    assert.deepEqual(Object.keys(args), ["unit", "wind"]);
    assert.ok(["celsius", "fahrenheit"].includes(args.unit));
    assert.equal(typeof args.wind, "boolean");
  } else {
    assert.equal(call.function.name, "get_time");
    assert.deepEqual(args, {});
  }
}

await check("tool_choice required always yields a valid call to a declared tool", async () => {
  for (const seed of [1, 2, 3, 4]) {
    const r = await client.chat.completions.create({ model, messages: user, tools: forecast,
      tool_choice: "required", max_tokens: 300, temperature: 1.3, seed });
    assert.equal(r.choices[0].finish_reason, "tool_calls");
    assert.ok(r.choices[0].message.tool_calls.length >= 1);
    r.choices[0].message.tool_calls.forEach(checkForecastCall);
  }
});

await check("a named tool_choice always calls that function, streamed too", async () => {
  for (const name of ["get_time", "get_forecast"]) {
    const r = await client.chat.completions.create({ model, messages: user, tools: forecast,
      tool_choice: { type: "function", function: { name } }, max_tokens: 300, temperature: 1, seed: 9 });
    assert.equal(r.choices[0].finish_reason, "tool_calls");
    assert.equal(r.choices[0].message.tool_calls[0].function.name, name);
    r.choices[0].message.tool_calls.forEach(checkForecastCall);
  }
  const stream = await client.chat.completions.create({ model, messages: user, tools: forecast,
    tool_choice: { type: "function", function: { name: "get_forecast" } }, max_tokens: 300, stream: true });
  let fname = "", args = "", finish = null;
  for await (const chunk of stream)
    for (const c of chunk.choices) {
      for (const t of c.delta.tool_calls ?? []) { fname += t.function?.name ?? ""; args += t.function?.arguments ?? ""; }
      if (c.finish_reason) finish = c.finish_reason;
    }
  assert.equal(finish, "tool_calls");
  checkForecastCall({ type: "function", function: { name: fname, arguments: args } });
  assert.equal(fname, "get_forecast");
});

await check("a call streams in pieces as it is written, which the client's stream helper joins", async () => {
  const runner = client.beta.chat.completions.stream({ model, messages: user, tools: forecast,
    tool_choice: "required", max_tokens: 300, temperature: 1.2, seed: 5 });
  let pieces = 0;
  runner.on("tool_calls.function.arguments.delta", () => { pieces += 1; });
  const final = await runner.finalChatCompletion();
  assert.equal(final.choices[0].finish_reason, "tool_calls");
  final.choices[0].message.tool_calls.forEach(checkForecastCall);
  assert.ok(pieces > 3, `${pieces} argument pieces`);
});

await check("tool_choice auto: text, or calls that are valid", async () => {
  for (const seed of [1, 2, 3, 4, 5]) {
    const r = await client.chat.completions.create({ model, messages: user, tools: forecast,
      max_tokens: 120, temperature: 1.5, seed });
    if (r.choices[0].finish_reason === "tool_calls") r.choices[0].message.tool_calls.forEach(checkForecastCall);
    else assert.equal(typeof r.choices[0].message.content, "string");
  }
});

await check("response_format with tools: the document, or valid calls", async () => {
  const response_format = { type: "json_schema", json_schema: { name: "answer", strict: true,
    schema: { type: "object", properties: { ok: { type: "boolean" } }, required: ["ok"], additionalProperties: false } } };
  for (const seed of [1, 2, 3, 4]) {
    const r = await client.chat.completions.create({ model, messages: user, tools: forecast,
      response_format, max_tokens: 200, temperature: 1.3, seed });
    if (r.choices[0].finish_reason === "tool_calls") {
      r.choices[0].message.tool_calls.forEach(checkForecastCall);
    } else {
      const doc = JSON.parse(r.choices[0].message.content);
      assert.deepEqual(Object.keys(doc), ["ok"]);
      assert.equal(typeof doc.ok, "boolean");
    }
  }
});

await check("a response_format pattern: the string matches it", async () => {
  const response_format = { type: "json_schema", json_schema: { name: "code", strict: true, schema: {
    type: "object", properties: { code: { type: "string", pattern: "^[A-Z]{3}-\\d{2,4}$" } },
    required: ["code"], additionalProperties: false } } };
  for (const seed of [1, 2, 3]) {
    const r = await client.chat.completions.create({ model, messages: user, response_format,
      max_tokens: 60, temperature: 1.3, seed });
    assert.equal(r.choices[0].finish_reason, "stop");
    assert.match(JSON.parse(r.choices[0].message.content).code, /^[A-Z]{3}-\d{2,4}$/);
  }
});

await check("a named function not in tools is a 400 naming tool_choice", async () => {
  await assert.rejects(client.chat.completions.create({ model, messages: user, tools: forecast,
    tool_choice: { type: "function", function: { name: "launch" } } }),
    (e) => e instanceof OpenAI.BadRequestError && e.error?.param === "tool_choice.function.name");
});

await check("logprobs answer as OpenAI's: one entry per token, the greedy choice the most likely", async () => {
  const r = await client.chat.completions.create({ model, messages: user, max_tokens: 5, temperature: 0,
    logprobs: true, top_logprobs: 2 });
  const content = r.choices[0].logprobs.content;
  assert.equal(content.length, r.usage.completion_tokens);
  for (const e of content) {
    assert.equal(typeof e.token, "string");
    assert.ok(Array.isArray(e.bytes));
    assert.ok(e.logprob <= 0);
    assert.equal(e.top_logprobs.length, 2);
    assert.ok(Math.abs(e.logprob - e.top_logprobs[0].logprob) < 1e-6);
    assert.ok(e.top_logprobs[0].logprob >= e.top_logprobs[1].logprob);
  }
  const none = await client.chat.completions.create({ model, messages: user, max_tokens: 2 });
  assert.equal(none.choices[0].logprobs, null);
});

await check("n: 2 answers with two choices, streamed too", async () => {
  const r = await client.chat.completions.create({ model, messages: user, max_tokens: 4, n: 2, temperature: 1.2, seed: 4 });
  assert.equal(r.choices.length, 2);
  assert.deepEqual(r.choices.map((c) => c.index), [0, 1]);
  for (const c of r.choices) assert.equal(c.finish_reason, "length");
  assert.equal(r.usage.completion_tokens, 8);
  const stream = await client.chat.completions.create({ model, messages: user, max_tokens: 4, n: 2, stream: true });
  const finished = new Set();
  for await (const chunk of stream)
    for (const c of chunk.choices) if (c.finish_reason) finished.add(c.index);
  assert.deepEqual([...finished].sort(), [0, 1]);
});

await check("the Responses API: text, a required call, its output sent back, streamed events", async () => {
  const r = await client.responses.create({ model, input: "What is the weather in Oslo?", max_output_tokens: 5, temperature: 0 });
  assert.equal(r.object, "response");
  assert.equal(r.status, "incomplete");
  assert.equal(r.usage.output_tokens, 5);
  assert.equal(typeof r.output_text, "string");
  const tools = forecast.map((t) => ({ type: "function", name: t.function.name, parameters: t.function.parameters }));
  const called = await client.responses.create({ model, input: "weather?", tools, tool_choice: "required", max_output_tokens: 300 });
  const call = called.output.find((o) => o.type === "function_call");
  assert.ok(call, JSON.stringify(called.output));
  checkForecastCall({ type: "function", function: { name: call.name, arguments: call.arguments } });
  const next = await client.responses.create({ model, max_output_tokens: 3, tools,
    input: [{ role: "user", content: "weather?" }, call, { type: "function_call_output", call_id: call.call_id, output: "sunny" }] });
  assert.equal(next.usage.output_tokens, 3);
  const stream = await client.responses.create({ model, input: "hello", max_output_tokens: 4, stream: true });
  let text = "", last = null;
  for await (const ev of stream) {
    if (ev.type === "response.output_text.delta") text += ev.delta;
    last = ev;
  }
  assert.equal(last.type, "response.incomplete");
  assert.equal(last.response.output[0].content[0].text, text);
  const calls = await client.responses.create({ model, input: "weather?", tools, stream: true,
    tool_choice: { type: "function", name: "get_forecast" }, max_output_tokens: 300 });
  let args = "", deltas = 0, done = null, item = null;
  for await (const ev of calls) {
    if (ev.type === "response.function_call_arguments.delta") { args += ev.delta; deltas += 1; }
    if (ev.type === "response.function_call_arguments.done") done = ev;
    if (ev.type === "response.output_item.done") item = ev.item;
  }
  assert.ok(deltas > 3, `${deltas} argument deltas`);
  assert.equal(done.arguments, args);
  assert.equal(item.type, "function_call");
  checkForecastCall({ type: "function", function: { name: item.name, arguments: item.arguments } });
});

await check("errors come as the client's typed errors", async () => {
  await assert.rejects(client.chat.completions.create({ model: "no-such-model", messages: user }),
    (e) => e instanceof OpenAI.NotFoundError && e.status === 404);
  await assert.rejects(client.chat.completions.create({ model, messages: user, temperature: 9 }),
    (e) => e instanceof OpenAI.BadRequestError && e.error?.param === "temperature");
  const anonymous = new OpenAI({ baseURL, apiKey: "wrong", maxRetries: 0 });
  await assert.rejects(anonymous.chat.completions.create({ model, messages: user }),
    (e) => e instanceof OpenAI.AuthenticationError && e.status === 401);
});

console.log(`${passed} conformance checks passed`);
