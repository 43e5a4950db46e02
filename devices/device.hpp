#pragma once

#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include <boost/container/small_vector.hpp>
#include <caf/actor.hpp>
#include <caf/atom.hpp>
#include <caf/typed_actor.hpp>

#include "devices/backend.hpp"
#include "devices/config.hpp"
#include "devices/defaults.hpp"
#include "devices/kv_stream.hpp"
#include "devices/kv_tier.hpp"
#include "devices/oi_cf.hpp"
#include "devices/sampling.hpp"
#include "grammar/token_mask.hpp"
#include "runtime/bridge.hpp"
#include "runtime/domains.hpp"
#include "runtime/metrics.hpp"
#include "runtime/trace.hpp"

namespace triad {

/// Asks a device to generate for a sequence: `(generate_atom, generate_request)`; the answer
/// comes at once as an `admission`.
using generate_atom = caf::atom_constant<caf::atom("generate")>;
/// Stops scheduling a sequence but keeps its KV: `(park_atom, seq_id)`.
using park_atom = caf::atom_constant<caf::atom("park")>;
/// Appends tokens to a parked sequence (a tool result) and resumes it under the grammar the
/// answer to the result follows (null: free): `(resume_atom, seq_id, std::vector<token>,
/// std::shared_ptr<grammar::token_constraint>)`.
using resume_atom = caf::atom_constant<caf::atom("resume")>;
/// Drops a sequence and its KV: `(free_atom, seq_id)`.
using free_atom = caf::atom_constant<caf::atom("free")>;
/// Asks for a sequence's KV as bytes (for a transfer): `(export_atom, seq_id)` -> kv_blob.
using export_atom = caf::atom_constant<caf::atom("export")>;
/// Exports a sequence's KV, then drops the sequence: `(move_out_atom, seq_id)` -> kv_blob. A
/// transfer's or demotion's export and free in one message; the free runs on the driver after
/// the export, so the bytes are taken before the pages go.
using move_out_atom = caf::atom_constant<caf::atom("moveout")>;
/// Admits a sequence whose KV arrives as bytes: `(import_atom, kv_blob, generate_request)` ->
/// admission; the request's prompt holds every token so far, at least one more than the blob
/// covers (typically the first generated token); those past the blob are prefilled, then
/// generation goes on. `(import_atom, std::shared_ptr<const kv_blob>, generate_request)` is the
/// same without a copy of the bytes: a caller that keeps the blob (to try another device when
/// this one is busy) shares it with the device until the import has run.
using import_atom = caf::atom_constant<caf::atom("import")>;
/// Moves a sequence's KV to the tier below (the node's KV store) and drops the sequence, for
/// a tool call (the demote policy, or a pin past its TTL): `(demote_atom, seq_id,
/// std::uint32_t keep_ms)` -> kv_kept; the store keeps the blocks pinned for keep_ms. Its full
/// pages also stay in the device's prefix cache (evictable), so a resume there may find them
/// without a copy.
using demote_atom = caf::atom_constant<caf::atom("demote")>;
/// Ends the pin a demotion on this device gave its kept blocks in its node's store (kv_kept's
/// store, blocks and pin): `(unpin_kept_atom, std::uint64_t store, std::vector<std::uint64_t>
/// blocks, std::uint64_t pin)`; nothing when its store is another. How a request lets go of
/// blocks kept in another node's store (its own node's it unpins itself), so they need not wait
/// for their pin's time.
using unpin_kept_atom = caf::atom_constant<caf::atom("unpinkept")>;
/// Asks for a device_stats snapshot: `(stats_atom)`.
using stats_atom = caf::atom_constant<caf::atom("stats")>;
/// Subscribes an actor to the device's free KV: `(watch_kv_atom, caf::actor watcher)`. The
/// device then sends the watcher a kv_free_atom message at once and whenever its free pages
/// move by a step (1/32 of its pages, at least one) from what it last sent, or reach or leave
/// zero, or its decode step time moves by a quarter: the router routes by them without
/// polling, so an idle node sleeps.
using watch_kv_atom = caf::atom_constant<caf::atom("watchkv")>;
/// A device's free KV pages and speed (see watch_kv_atom): `(kv_free_atom, caf::actor_addr
/// device, std::uint64_t free_pages, std::uint64_t total_pages, double decode_step_s)`, the
/// last its recent decode steps' seconds (a moving mean; 0 before its first): what one more
/// decoding sequence can expect a token to take there.
using kv_free_atom = caf::atom_constant<caf::atom("kvfree")>;
/// To a parked sequence's sink: the device that holds it is leaving (its node drains), so its
/// holder moves the KV off (move_out_atom) before it goes: `(device_leaving_atom, seq_id)`.
using device_leaving_atom = caf::atom_constant<caf::atom("devleaving")>;

/// A device's own: a step job came back from the driver thread (device.cpp).
using step_done_atom = caf::atom_constant<caf::atom("stepdone")>;
/// A device's own: try again to hand the backlog or a step to a full driver queue.
using device_retry_atom = caf::atom_constant<caf::atom("devretry")>;
/// A device's own: a demotion's pages were copied out on the driver:
/// `(demote_done_atom, key, std::vector<kv_page>)`.
using demote_done_atom = caf::atom_constant<caf::atom("demotedone")>;
/// A device's own: an export finished on the driver: `(export_done_atom, key, kv_blob, error)`.
using export_done_atom = caf::atom_constant<caf::atom("exportdone")>;
/// A device's own: a preempted sequence's pages were copied out on the driver (swapped to
/// host memory) and freed: `(swap_done_atom, seq_id, swap key, std::vector<kv_page>)`.
using swap_done_atom = caf::atom_constant<caf::atom("swapdone")>;
/// A device's own: pages another device asked for (kv_share_atom) were copied out on the
/// driver: `(share_done_atom, key, std::vector<kv_page>, bool failed)`; `failed`: the copy
/// could not be made (out of memory), which is not the pages being gone.
using share_done_atom = caf::atom_constant<caf::atom("sharedone")>;

namespace detail {
struct step_job;
} // namespace detail

/// A generation order for one sequence.
struct generate_request {
  seq_id seq = 0;                    ///< caller-chosen id, unique on the device
  std::vector<token> prompt;         ///< tokens to prefill (at least one)
  sampling_params sampling;          ///< how tokens are chosen
  std::uint32_t max_new_tokens = 16; ///< generation stops after this many (prefill role: 1)
  std::vector<token> stop;           ///< tokens that end generation besides `end`
  /// Tokens that end the answer (the model's EOS, end of turn): done, never parked. The byte
  /// tokenizer's EOS unless the request's format names others.
  std::vector<token> end = {tokenizer::eos};
  caf::actor sink; ///< receives device_event messages
  /// Scripted generation (benchmarks, tests): the n-th token generated is forced[n] while n is
  /// below its size. The step still computes the logits; only the choice is forced.
  std::vector<token> forced;
  /// Starts from the longest prefix of `prompt` in the device's prefix cache, when it has one;
  /// false computes every token (the `discard` policy's recompute after a tool call).
  bool reuse_prefix = true;
  /// A stop token from `stop` (not EOS, not the length limit) parks the sequence instead of
  /// ending it, as `park_atom` would: its KV stays until a resume or a free. Saves the park
  /// message at each tool call when the KV is pinned or the device held (monolithic layout).
  bool park_on_stop = false;
  /// When generation ends (not parked), the driver job that ended it also exports the KV and
  /// drops the sequence (its full pages still go to the prefix cache), and the done event
  /// carries the KV: a prefill device's hand-off to decode without a move_out_atom round trip.
  bool move_out_when_done = false;
  /// With move_out_when_done on a device with a tier that streams (device_options::
  /// stream_moves): whether the KV may leave through a stream of the tier's blocks. False: as
  /// bytes (the sink is on another node that cannot fetch the blocks from this node's KV
  /// exchange; a device node's gateway says so).
  bool stream_when_done = true;
  /// Blocks of the KV store holding the prompt's first `kept_tokens` tokens (a demotion's,
  /// kv_kept): read back, checked, and appended before the rest is computed. Whatever cannot
  /// be read is computed.
  std::vector<std::uint64_t> kept_blocks;
  std::uint64_t kept_tokens = 0; ///< tokens the kept blocks cover
  std::uint64_t kept_store = 0;  ///< the store they are in (kv_kept::store)
  /// Where another node serves them (kv_kept::wire): a device of another store fetches them
  /// from there through its node's fetcher; without one (or a fetcher) they are computed.
  std::string kept_wire;
  /// Where another node's store may hold the prompt's first `prefix_pages` pages (its KV
  /// exchange; the router's hint): a device that holds fewer of them itself (cache, store,
  /// another device) fetches those pages from there through its node's fetcher when the copy
  /// is cheaper than computing them; what does not come is computed.
  std::string prefix_wire;
  std::uint64_t prefix_pages = 0; ///< see prefix_wire
  /// The grammar the generated tokens must follow, where the request has one (a response_format,
  /// tool calls):
  /// the driver masks each step's logits with it before sampling and moves it on by each token
  /// chosen. In-process only (not serialized: a remote device would need the grammar's text).
  std::shared_ptr<grammar::token_constraint> constraint;
  /// Report each generated token's log probability (token events' `logprobs`), and this many of
  /// the most likely alternatives (at most max_top_logprobs).
  bool logprobs = false;
  std::uint8_t top_logprobs = 0; ///< see logprobs
  /// The request is traced: the device writes the driver jobs it takes part in to its trace
  /// log (device_options::trace), with `trace_id` among their requests.
  bool traced = false;
  std::uint64_t trace_id = 0; ///< see traced
};

/// Where a demoted sequence's KV went: blocks of the KV store, pinned for the caller (who
/// releases them through the tier once done, or the pin expires), covering the sequence's
/// first `tokens`.
struct kv_kept {
  std::vector<std::uint64_t> blocks; ///< block ids in order; empty: not kept (recompute)
  std::uint64_t tokens = 0;          ///< tokens they cover
  std::uint64_t pin = 0;             ///< the store's pin that keeps them (kv_tier::release)
  /// The store holding them (kv_tier::store_id): block ids are a store's own, so they are read
  /// back (and released) only through that store: a device of another store fetches them from
  /// `wire`, or computes the tokens.
  std::uint64_t store = 0;
  /// Where that store's node serves them to other nodes (its KV exchange, "host:port,port..."; set
  /// by a device node's gateway, or by the request for its own node's devices; "" none).
  std::string wire;
};

/// Inspector of kv_kept.
template<class Inspector>
typename Inspector::result_type inspect(Inspector& f, kv_kept& x) {
  return f(caf::meta::type_name("kv_kept"), x.blocks, x.tokens, x.pin, x.store, x.wire);
}

/// A sequence's KV that another node holds for whoever imports it (a prefill node's, for a
/// decode node in a cluster): where its KV exchange listens and the blocks to fetch from it
/// over the KV wire (UCX), each with its size and the checksum taken when it was held. The
/// control message carries this, not the bytes.
struct kv_held {
  std::string wire;                     ///< the holder's KV exchange ("host:port,port...")
  std::vector<std::uint64_t> blocks;    ///< the holder's block ids, in order
  std::vector<std::uint64_t> sizes;     ///< each block's bytes
  /// Each block's block_checksum; empty for a stream's pages (page_tokens), whose checksums
  /// come with them.
  std::vector<std::uint64_t> checksums;
  /// 0: the blocks are the bytes of an exported blob, cut up. Else they are the pages of a
  /// stream through the holder's KV store (a prefill node's hand-off): one block per page of
  /// `page_tokens` tokens (the last may be partial), fetched as kept blocks are
  /// (kv_fetch_kept_atom, store 0) and attached as pages; their checksums come with them.
  std::uint32_t page_tokens = 0;
  /// Whether it names no blocks.
  bool empty() const noexcept { return blocks.empty(); }
  /// The bytes of every block together.
  std::uint64_t bytes() const noexcept {
    std::uint64_t n = 0;
    for (auto b : sizes)
      n += b;
    return n;
  }
};

/// Asks a fetcher for the bytes of a blob another node holds: `(kv_fetch_atom, kv_blob)` -> the
/// blob with its bytes and no reference, or an error saying why the fetch failed.
using kv_fetch_atom = caf::atom_constant<caf::atom("kvfetch")>;
/// Asks a fetcher for kept blocks of another node's KV store (a demotion's, kv_kept):
/// `(kv_fetch_kept_atom, std::string wire, std::uint64_t store, std::vector<std::uint64_t>
/// blocks, std::vector<token> tokens)` -> std::vector<kv_page>, the pages of `tokens` in order from
/// the first (fewer when some were gone), each checked; or an error saying why none came.
using kv_fetch_kept_atom = caf::atom_constant<caf::atom("kvfetchkpt")>;
/// Asks a fetcher for pages of a prompt another node's KV store holds (the router's hint,
/// generate_request::prefix_wire): `(kv_fetch_prefix_atom, std::string wire, std::vector<token>
/// tokens, std::uint64_t first, std::uint64_t count)` -> std::vector<kv_page>, pages `first`..
/// of the chain of `tokens` in order (fewer when that store has fewer), each checked; or an
/// error saying why none came.
using kv_fetch_prefix_atom = caf::atom_constant<caf::atom("kvfetchpfx")>;

/// Inspector of kv_held.
template<class Inspector>
typename Inspector::result_type inspect(Inspector& f, kv_held& x) {
  return f(caf::meta::type_name("kv_held"), x.wire, x.blocks, x.sizes, x.checksums, x.page_tokens);
}

/// A sequence's KV as exported by a backend: checksummed bytes in the backend's own format, or
/// a stream of its pages through the KV store (kv_stream), under way as the blob travels, or
/// held by another node (kv_held) until the importer fetches it.
struct kv_blob {
  seq_id seq = 0;               ///< the sequence it came from
  std::uint64_t tokens = 0;     ///< tokens it covers
  std::vector<std::byte> bytes; ///< header and pages, as the backend exported them
  /// The pages streamed through the store instead of `bytes` (in this process only: a stream is
  /// not serialised).
  std::shared_ptr<kv_stream> stream;
  /// The bytes wait on another node instead of being in `bytes` (cluster: fetched over the KV
  /// wire by the node whose device imports them).
  kv_held held;
  /// Whether it carries any KV.
  bool empty() const noexcept { return bytes.empty() && !stream && held.empty(); }
  /// The KV bytes it carries: the stream's, those held elsewhere, or those in `bytes`.
  std::uint64_t size_bytes() const noexcept {
    return stream ? stream->bytes() : !held.empty() ? held.bytes() : bytes.size();
  }
};

/// The immediate answer to a generate request.
struct admission {
  bool accepted = false; ///< false: busy or invalid; nothing was queued
  std::string reason;    ///< why not, for people, e.g. "busy: 64 of 64 sequences in flight"
  /// why not: busy (every sequence slot is taken; retry after one leaves) or invalid_argument
  errc code = errc::invalid_argument;
};

/// What a device reports about a sequence, sent to its sink.
struct device_event {
  /// The kinds of events.
  enum kind_t : std::uint8_t {
    token, ///< generated tokens (in `tokens`)
    done,  ///< generation ended (EOS, stop token or max_new_tokens), after the tokens in
           ///< `tokens`; KV kept until freed
    /// KV gave way for lack of memory: copied to host memory (its full pages to the prefix
    /// cache) and attached back when the sequence is scheduled, else recomputed; nothing lost
    preempted,
    failed, ///< the step failed; `message` says why; the sequence is dropped
  };
  seq_id seq = 0;      ///< the sequence
  kind_t kind = token; ///< what happened
  /// token: the token just chosen, sent by the device's driver thread as it chooses it (a
  /// burst of decode steps publishes each token at its step, not at the burst's end); done and
  /// the rest carry none (every token came before them, in order). Held inline: a token event
  /// costs the driver no allocation beyond its message, and the actor no free of another
  /// thread's memory.
  boost::container::small_vector<triad::token, 1> tokens;
  std::uint32_t generated = 0; ///< tokens generated so far, these included
  std::string message;         ///< detail for `done` (reason) and `failed`
  std::uint32_t cached = 0;    ///< prompt tokens whose KV came from the prefix cache
  /// done, for a sequence that asked to move out when done: its KV (the sequence is gone from
  /// the device). Empty bytes otherwise, or when the export failed (the sequence is then kept).
  kv_blob kv;
  /// Of `cached`, tokens whose KV was read from the tier below or another device's memory.
  std::uint32_t stored = 0;
  /// token, for a request that asked for logprobs: the token's log probability, then those of
  /// the alternatives in `top` (log_probabilities).
  std::vector<float> logprobs = {};
  std::vector<triad::token> top = {}; ///< token: the most likely alternatives (see logprobs)
  /// The first token after a KV import (a transfer, or a stream): the seconds the device's
  /// driver spent importing it (for a stream, waiting for and copying its layer groups), which
  /// the request reports as KV transfer, not decode.
  float import_seconds = 0;
};

/// A snapshot of a device's scheduler and cache.
struct device_stats {
  std::uint64_t steps = 0;       ///< steps run
  std::uint64_t step_jobs = 0;   ///< driver jobs that ran them (fewer when steps ran in bursts)
  /// Driver jobs run of every kind: step jobs, exports, swaps, shares, and the publishes and
  /// frees owed when another job than a step comes first (they ride with a step job else).
  std::uint64_t driver_jobs = 0;
  std::uint64_t tokens = 0;      ///< tokens computed
  std::uint64_t generated = 0;   ///< tokens sampled
  std::uint64_t refused = 0;     ///< generate requests answered busy
  std::uint64_t preemptions = 0; ///< sequences whose KV gave way for memory (swapped out)
  std::uint64_t swapped_in = 0;  ///< preempted sequences whose swapped KV was attached back
  std::size_t sequences = 0;     ///< sequences held
  std::size_t waiting = 0;       ///< sequences waiting for (more) prefill
  std::size_t running = 0;       ///< sequences decoding
  std::size_t parked = 0;        ///< sequences parked
  double busy_seconds = 0;       ///< time the driver spent in steps (modelled time for sim)
  /// CPU time of the driver thread inside the backend's steps (real, for sim too; a cpu
  /// backend's other compute-team threads are not in it): per step job, the thread's CPU over
  /// its steps less the wall time between them (an estimate that reads the thread CPU clock
  /// twice per job, not per step, and errs towards charging triad).
  double compute_cpu_seconds = 0;
  std::size_t kv_pages_used = 0;   ///< KV pages held
  std::size_t kv_pages_total = 0;  ///< KV pages of the budget
  std::size_t kv_pages_cached = 0; ///< KV pages held only by the prefix cache (evictable)
  std::uint64_t cached_tokens = 0; ///< prompt tokens whose KV came from the prefix cache
  /// Of cached_tokens, those whose pages came from the tier below (the KV store's blocks) or
  /// another device's memory (peer_tokens), not the device's own.
  std::uint64_t tier_tokens = 0;
  std::uint64_t spilled_pages = 0; ///< evicted prefix pages handed to the tier below
  /// Sequences whose KV left through a stream of the tier's blocks, in layer groups (a
  /// prefill device's moves to decode), and came in through one (a decode device's).
  std::uint64_t streamed_out = 0;
  std::uint64_t streamed_in = 0; ///< see streamed_out
  /// Streams that came in damaged or broken off: the tokens were computed here instead.
  std::uint64_t stream_recomputes = 0;
  /// Of tier_tokens, those whose pages were copied from another device's memory (its prefix
  /// cache, kv_share_atom), not read from the store's blocks.
  std::uint64_t peer_tokens = 0;
  /// Pages of this device's prefix cache copied out for another device's prompt.
  std::uint64_t lent_pages = 0;
  /// Prompts whose pages the tier below or another device held but which computed them here,
  /// as that takes less time than the copy (backend::import_cheaper).
  std::uint64_t imports_declined = 0;
  /// Fetches whose pages were refused as one failed its checksum (their tokens computed).
  std::uint64_t fetches_corrupted = 0;
  /// Modelled steps (a sim's) per cell of oi_cf_grid, row-major; empty when none was modelled.
  std::vector<std::uint64_t> oi_cf_steps;
  /// Per memory tier (the sim profile's order, step_output::tier_resident), the most bytes a
  /// modelled step found resident there (weights, activations, KV); empty when none was.
  std::vector<double> tier_peak_bytes;
};

/// Inspectors, so the messages can be logged and (later) cross the network.
template<class Inspector>
typename Inspector::result_type inspect(Inspector& f, sampling_params& x) {
  return f(caf::meta::type_name("sampling_params"), x.temperature, x.top_k, x.top_p, x.seed);
}
/// Inspector of generate_request.
template<class Inspector>
typename Inspector::result_type inspect(Inspector& f, generate_request& x) {
  return f(caf::meta::type_name("generate_request"), x.seq, x.prompt, x.sampling, x.max_new_tokens,
           x.stop, x.end, x.sink, x.forced, x.reuse_prefix, x.park_on_stop, x.move_out_when_done,
           x.stream_when_done, x.kept_blocks, x.kept_tokens, x.kept_store, x.kept_wire,
           x.prefix_wire, x.prefix_pages, x.logprobs, x.top_logprobs, x.traced, x.trace_id);
}
/// Inspector of admission.
template<class Inspector>
typename Inspector::result_type inspect(Inspector& f, admission& x) {
  return f(caf::meta::type_name("admission"), x.accepted, x.reason, x.code);
}
/// Inspector of device_event.
template<class Inspector>
typename Inspector::result_type inspect(Inspector& f, device_event& x) {
  return f(caf::meta::type_name("device_event"), x.seq, x.kind, x.tokens, x.generated, x.message,
           x.cached, x.kv, x.stored, x.logprobs, x.top);
}
/// Inspector of kv_blob: the bytes as one string (element by element, CAF would read each
/// std::byte through an uninitialised temporary).
template<class Inspector>
typename Inspector::result_type inspect(Inspector& f, kv_blob& x) {
  std::string raw;
  if constexpr (Inspector::reads_state)
    raw.assign(reinterpret_cast<const char*>(x.bytes.data()), x.bytes.size());
  auto load = caf::meta::load_callback([&]() -> caf::error {
    x.bytes.resize(raw.size());
    if (!raw.empty()) // memcpy's pointers must not be null, even for no bytes
      std::memcpy(x.bytes.data(), raw.data(), raw.size());
    return caf::none;
  });
  return f(caf::meta::type_name("kv_blob"), x.seq, x.tokens, raw, x.held, load);
}
/// Inspector of device_stats.
template<class Inspector>
typename Inspector::result_type inspect(Inspector& f, device_stats& x) {
  return f(caf::meta::type_name("device_stats"), x.steps, x.step_jobs, x.driver_jobs, x.tokens,
           x.generated, x.refused, x.preemptions, x.sequences, x.waiting, x.running, x.parked,
           x.busy_seconds, x.compute_cpu_seconds, x.kv_pages_used, x.kv_pages_total,
           x.kv_pages_cached, x.cached_tokens, x.tier_tokens, x.spilled_pages, x.streamed_out,
           x.streamed_in, x.stream_recomputes, x.peer_tokens, x.lent_pages, x.imports_declined,
           x.fetches_corrupted, x.swapped_in, x.oi_cf_steps, x.tier_peak_bytes);
}

/// Options of a device actor; every field documented where declared.
struct device_options {
  std::string name = "device";          ///< device name (metrics label, thread name)
  device_role role = device_role::both; ///< prefill devices stop after the first token
  /// Optional cap on the sequences held at once (0: none; the KV pages decide admission).
  std::size_t max_sequences = defaults::device_actor::max_sequences;
  std::size_t step_token_budget = defaults::device_actor::step_token_budget; ///< >= 1
  std::size_t max_prefill_chunk = defaults::device_actor::max_prefill_chunk; ///< >= 1
  /// Decode steps one driver job may run back to back, >= 1 (1: every step goes back to the
  /// actor); only while nothing waits to be prefilled and no message has changed the batch
  /// (`[[devices]] burst_steps`).
  std::size_t burst_steps = defaults::device::burst_steps;
  /// Keeps each step's KV within the backend's fastest memory tier (kv_usage::pages_fast):
  /// sequences past it wait for a later step instead of being read from a slower tier
  /// (`[[devices]] step_kv_fast_tier`).
  bool step_kv_fast_tier = defaults::device::step_kv_fast_tier;
  /// Driver time after which a burst ends and the actor sees its result (tokens leave as they
  /// are chosen; `[[devices]] burst_window_us`).
  std::chrono::microseconds burst_window{defaults::device::burst_window_us};
  /// Jobs (steps, exports, swaps, shares, owed frees) queued to the driver thread at once, >= 1;
  /// more wait in the device actor, in order (`[[devices]] queue_capacity`).
  std::size_t queue_capacity = defaults::device::queue_capacity;
  /// Keeps the KV pages of finished sequences, indexed by content, so a later prompt with the
  /// same start reuses them instead of computing them (`[[devices]] prefix_cache`).
  bool prefix_cache = defaults::device::prefix_cache;
  /// The tier below the device's memory (the node's KV store): pages its prefix cache evicts
  /// go there instead of being lost, and a prompt's pages held there and not on the device are
  /// fetched instead of computed. Null, or pages of another size than the tier's blocks: none.
  std::shared_ptr<kv_tier> tier;
  /// Whether a sequence that moves out when done streams its pages through the tier's blocks
  /// (when there is a tier): false on a front with peers, whose devices' KV leaves the process
  /// as bytes; a device node's streams are held by its KV exchange for another node to fetch.
  bool stream_moves = true;
  /// KV smaller than this moves out as bytes, not a stream (a device node's: its KV exchange
  /// sends small KV in the control message, where a stream cannot go).
  std::size_t stream_min_bytes = 0;
  /// KV of more tokens than this moves out as bytes, not a stream (0: no bound; a device
  /// node's: the most pages and tokens one fetch of another node asks for).
  std::size_t stream_max_tokens = 0;
  /// What fetches KV that another node holds (kv_held) for an import here: `(kv_fetch_atom,
  /// kv_blob)` -> the blob with its bytes (a cluster node's, cluster/detail/kv_exchange). Weak,
  /// so the device never keeps it (and its actor system) alive. None, or gone: such an import
  /// is refused (outside a cluster no KV is held elsewhere).
  caf::actor_addr kv_fetcher;
  std::vector<unsigned> driver_cpus;   ///< where the driver thread binds (empty: unbound)
  const topology* topo = nullptr;      ///< topology for binding (this machine only)
  metrics_registry* metrics = nullptr; ///< where per-device metrics go (may be null)
  /// Where the driver jobs of traced requests are written (null: nowhere).
  std::shared_ptr<trace_log> trace;
};

/// The messages a device actor takes (a wrong one is a compile error). kv_fetched_atom is its
/// tier's answer (kv_tier::fetch), kv_share_atom another device's question through the tier;
/// the *_done atoms, step_done_atom and device_retry_atom are its own, from its driver thread
/// and timers.
using device_actor = caf::typed_actor<
    caf::replies_to<generate_atom, generate_request>::with<admission>,
    caf::replies_to<import_atom, kv_blob, generate_request>::with<admission>,
    caf::replies_to<import_atom, std::shared_ptr<const kv_blob>, generate_request>::with<admission>,
    caf::reacts_to<park_atom, seq_id>,
    caf::reacts_to<resume_atom, seq_id, std::vector<token>,
                   std::shared_ptr<grammar::token_constraint>>,
    caf::reacts_to<free_atom, seq_id>, caf::replies_to<export_atom, seq_id>::with<kv_blob>,
    caf::replies_to<move_out_atom, seq_id>::with<kv_blob>,
    caf::replies_to<demote_atom, seq_id, std::uint32_t>::with<kv_kept>,
    caf::reacts_to<unpin_kept_atom, std::uint64_t, std::vector<std::uint64_t>, std::uint64_t>,
    caf::reacts_to<demote_done_atom, std::uint64_t, std::vector<kv_page>>,
    caf::reacts_to<kv_stored_atom, std::uint64_t, std::vector<std::uint64_t>, std::uint64_t>,
    caf::replies_to<stats_atom>::with<device_stats>, caf::reacts_to<watch_kv_atom, caf::actor>,
    caf::reacts_to<kv_fetched_atom, seq_id, std::vector<kv_page>>,
    caf::reacts_to<kv_leased_atom, seq_id, std::shared_ptr<kv_stream>>,
    caf::reacts_to<step_done_atom, std::shared_ptr<detail::step_job>>,
    caf::reacts_to<device_retry_atom>,
    caf::reacts_to<export_done_atom, std::uint64_t, kv_blob, std::string>,
    caf::replies_to<kv_share_atom, std::vector<token>, std::uint64_t,
                    std::uint64_t>::with<std::vector<kv_page>>,
    caf::reacts_to<share_done_atom, std::uint64_t, std::vector<kv_page>, bool>,
    caf::reacts_to<swap_done_atom, seq_id, std::uint64_t, std::vector<kv_page>>>;

/// Spawns a device actor in `home` owning `backend` and a driver thread that runs its steps.
/// The actor admits sequences (answering busy at once when full), forms each step from running
/// decodes and chunked prefills within the token budget, never blocks, and streams
/// device_event messages to each request's sink.
expected<device_actor> spawn_device(domain& home, std::unique_ptr<backend> backend,
                                    device_options options);

} // namespace triad

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(std::shared_ptr<const triad::kv_blob>)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(std::shared_ptr<triad::detail::step_job>)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(std::shared_ptr<triad::grammar::token_constraint>)
