// The llama.cpp peer of triad-bench-models: node-llama-cpp (its prebuilt CPU libraries) on a
// GGUF file, timed the way the bench times triad. Run by the bench, one job per process:
//   node models_peer.mjs MODULE_DIR JOB_JSON
// JOB_JSON: {"model", "threads", "flash_attention" ("auto", llama.cpp's default, or false),
// "prompt": [ids], "generate", "sessions", "session_rounds": [[[ids], ...], ...] (each round's
// prompts, one per session), "session_generate", "context"}. Prints one JSON line: {"prefill_s", "decode_s",
// "decoded" (tokens after the first), "tokens": [ids], "aggregate_s", "aggregate_tokens",
// "backend"}; prefill and decode are the better of two runs after a warm-up, as the bench
// takes triad's. The bench sets
// UV_THREADPOOL_SIZE=1 (node-llama-cpp runs each evaluation on Node's thread pool; with more
// pool threads consecutive decodes land on different threads and run slower).
import path from "node:path";
import { pathToFileURL } from "node:url";

const [moduleDir, jobText] = process.argv.slice(2);
const job = JSON.parse(jobText);
const { getLlama } = await import(
  pathToFileURL(path.join(moduleDir, "node_modules/node-llama-cpp/dist/index.js")).href);
const llama = await getLlama({ gpu: false, build: "never", logLevel: "error", progressLogs: false });
const model = await llama.loadModel({ modelPath: job.model, gpuLayers: 0 });
const now = () => performance.now() / 1000;

// One sequence: the prompt's prefill (time to the first token), then greedy decoding.
// With flash attention on, llama.cpp's CPU kernel sums the attention's values in f16 when the
// KV cache is f16 (its default); off, it multiplies them in f32 (ggml_mul_mat).
const flashAttention = job.flash_attention ?? "auto";
const single = await model.createContext({
  contextSize: job.context, sequences: 1, threads: job.threads, batchSize: job.context,
  flashAttention,
});
const sequence = single.getSequence();
// One greedy run of the prompt: its tokens, time to the first, and the rest.
async function timed(limit) {
  await sequence.clearHistory();
  const tokens = [];
  const start = now();
  let first = 0;
  for await (const t of sequence.evaluate(job.prompt, { temperature: 0 })) {
    if (tokens.length === 0) first = now();
    tokens.push(t);
    if (tokens.length >= limit) break;
  }
  return { prefill_s: first - start, decode_s: now() - first, tokens };
}
await timed(2); // warm-up: the mapped file's pages, the context's buffers
const runs = [await timed(job.generate), await timed(job.generate)];
const out = {
  prefill_s: Math.min(runs[0].prefill_s, runs[1].prefill_s),
  decode_s: Math.min(runs[0].decode_s, runs[1].decode_s),
  decoded: runs[0].tokens.length - 1,
  tokens: runs[0].tokens,
};
await single.dispose();

// `sessions` sequences at once in one context: llama.cpp batches their steps together. The
// better of the rounds, each in a fresh context, as the bench takes triad's.
for (const prompts of job.sessions > 0 ? job.session_rounds : []) {
  const many = await model.createContext({
    contextSize: job.context * job.sessions, sequences: job.sessions, threads: job.threads,
    batchSize: job.context, flashAttention,
  });
  let produced = 0;
  const start = now();
  await Promise.all(prompts.map(async (prompt) => {
    const s = many.getSequence();
    let n = 0;
    for await (const t of s.evaluate(prompt, { temperature: 0 })) {
      void t;
      if (++n >= job.session_generate) break;
    }
    produced += n;
  }));
  const seconds = now() - start;
  if (out.aggregate_s === undefined || seconds < out.aggregate_s) {
    out.aggregate_s = seconds;
    out.aggregate_tokens = produced;
  }
  await many.dispose();
}
out.backend = "node-llama-cpp " + (llama.buildType ?? "") + " threads " + job.threads +
  " flash attention " + flashAttention;
console.log(JSON.stringify(out));
process.exit(0);
