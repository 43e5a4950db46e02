// triad-bench-cluster: the KV data plane between processes (issue #29).
//
// ucx_transfer_over_memcpy: a prefill -> decode KV transfer between two processes of this
// machine over UCX's shared-memory transports (cluster::kv_wire), against memcpy of the same
// pages between two buffers in one process by one thread. The sender's pages lie in shared
// memory the receiver maps (cluster::kv_shared_memory, UCX-allocated, as a KV cache registered
// with UCX would be; copied there before the rounds): the wire sends where each page lies, and
// the receiver copies it out of its mapping into its own memory, checking its checksum in the
// same pass (copy_checked), then tells the sender it is done. The sender times a round from
// its first send to the receiver's acknowledgement, which follows the last page's check; the
// memcpy is one thread, unchecked (glibc's, into a destination it reads for ownership: the
// receiver's copy writes with non-temporal stores and can beat it). ucx_transfer_over_checked_copy
// (a metric) sets the transfer against that very copy in one process.
// ucx_shared_memory_read_in_place says the pages went so (0: no shared memory could be had, they
// went by cross-memory attach from the heap). ucx_tcp_transfer_over_memcpy: the same over TCP
// (loopback here; the transport between machines without RDMA). Each figure is the median of its
// rounds after one unrecorded round; the pages are those of a llama3-8b sequence in bf16 (128 KiB
// of KV a token, pages of 16 tokens: 2 MiB each).
//
// remote_over_local_decode_throughput: triad-load's chat requests (512-token prompts, 128
// tokens out, 16 at once) against triad-node processes serving llama3-8b on SIMULATED H200s
// (the sim backend, modelled step times in real time): a node with its prefill and decode
// device in one process, against a node with the prefill device whose decode device is another
// process's (`--role decode`), joined over CAF's BASP (the control plane): output tokens per
// second of the second over the first. KV of kv_wire_min_kib (64 KiB) or more waits in the
// front's exchange (in its shared memory) and the decode node fetches it over the KV wire (UCX
// over shared memory: every node is on this machine) and copies it out in place; a sim's KV is
// its tokens (a few KiB), so it goes in the control message.
// remote_kv_wire_{fetches,fetched_bytes,fetch_failures,in_place_bytes} say what crossed the wire.
// remote_over_local_decode_throughput_cpu: the same with the tiny model on cpu devices (one core
// each: they compute for real and their KV crosses over the KV wire), all processes and
// triad-load on this machine's cores.
// split_over_local_decode_throughput_cpu: the cpu load against a front without devices, a
// `--role prefill` node and a `--role decode` node (three processes): the prefill node streams
// each prompt's KV into its KV store and holds those pages; the decode node fetches them over the
// KV wire and attaches them (split_kv_handoff_tokens_cpu: the tokens attached so, against
// split_prefilled_tokens_cpu computed on the prefill node), over the one-node figure.
// failover_lost_requests: the same node with two decode nodes; one is killed (SIGKILL) while it
// decodes for a load of 256-token answers; the requests left without an answer or an error when
// triad-load ends (it waits for every one). failover_completed / failover_failed say how the
// rest ended, failover_detect_ms how long the front took to drop the node (its connection
// closes at the kill; the heartbeat deadline covers a silent node).

#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include <boost/json.hpp>

#include "bench/report.hpp"
#include "cluster/kv_wire.hpp"
#include "load/target.hpp"
#include "runtime/checksum.hpp"
#include "runtime/child_process.hpp"
#include "runtime/main_guard.hpp"

namespace {

using triad::cluster::kv_wire;
using triad::cluster::wire_transport;
using clock_type = std::chrono::steady_clock;

constexpr std::size_t kv_bytes_per_token = 131072; // llama3-8b, bf16: 2 x 32 x 8 x 128 x 2
constexpr std::size_t page_tokens = 16;
constexpr std::size_t page_bytes = kv_bytes_per_token * page_tokens;

// The receiving process: listens, tells the parent its port through `fd`, then per round
// receives `pages` pages, checks each arrived intact, and acknowledges with one 8-byte block
// (the round, bit 32 set when every page was copied in place; a failed page answers 0). Exits 0
// when every round was intact.
[[noreturn]] void receiver(wire_transport transport, std::size_t pages, std::size_t rounds,
                           int fd) {
  ::prctl(PR_SET_PDEATHSIG, SIGKILL); // never outlives the benchmark
  triad::cluster::wire_sharing sharing;
  if (transport == wire_transport::shared_memory)
    if (auto reader = triad::cluster::kv_shared_reader::open(); reader)
      sharing.reader = std::move(*reader);
  auto wire = kv_wire::open(transport, sharing);
  if (!wire) {
    std::fprintf(stderr, "triad-bench-cluster: receiver: %s\n", wire.error().message.c_str());
    ::_exit(2);
  }
  auto port = (*wire)->listen("127.0.0.1", 0);
  if (!port || ::write(fd, &*port, sizeof(*port)) != sizeof(*port))
    ::_exit(2);
  ::close(fd);
  std::vector<std::byte> memory(pages * page_bytes, std::byte{1}); // touched: faulted in
  std::vector<std::span<std::byte>> slots;
  for (std::size_t i = 0; i < pages; ++i)
    slots.emplace_back(memory.data() + i * page_bytes, page_bytes);
  bool intact = true;
  for (std::size_t r = 1; r <= rounds; ++r) {
    auto got = (*wire)->receive(slots);
    bool round_ok = got.has_value();
    bool in_place = round_ok;
    for (std::size_t i = 0; round_ok && i < got->size(); ++i) {
      round_ok = (*got)[i].has_value();
      in_place = in_place && round_ok && (*got)[i]->in_place;
    }
    intact = intact && round_ok;
    // The round, and (bit 32) whether every page of it was copied out of the sender's shared
    // memory in place.
    std::uint64_t ack = round_ok ? r | std::uint64_t{in_place} << 32 : 0;
    triad::cluster::wire_block block{ack, std::as_bytes(std::span{&ack, 1}), 0};
    block.checksum = triad::block_checksum(block.bytes);
    if (!(*wire)->send(std::span{&block, 1}))
      ::_exit(2);
  }
  ::_exit(intact ? 0 : 1);
}

struct transfer_result {
  std::vector<double> seconds; // per recorded round
  std::string error;           // empty: every round arrived intact
  bool from_shared = false;    // the receiver copied every page of every round in place
};

// One transfer measurement: a child process receives, this one sends `pages` pages per round.
transfer_result measure_transfer(wire_transport transport,
                                 const std::vector<std::vector<std::byte>>& data,
                                 const std::vector<std::uint64_t>& sums, std::size_t rounds) {
  transfer_result out;
  int fds[2];
  if (::pipe(fds) != 0)
    return {{}, "pipe failed"};
  const pid_t child = ::fork();
  if (child < 0) {
    ::close(fds[0]);
    ::close(fds[1]);
    return {{}, "fork failed"};
  }
  if (child == 0) {
    ::close(fds[0]);
    receiver(transport, data.size(), rounds + 1, fds[1]);
  }
  ::close(fds[1]);
  std::uint16_t port = 0;
  const bool have_port = ::read(fds[0], &port, sizeof(port)) == sizeof(port);
  ::close(fds[0]);
  auto finish = [&](std::string error) {
    if (!error.empty())
      ::kill(child, SIGKILL);
    int status = 0;
    ::waitpid(child, &status, 0);
    if (error.empty() && WIFSIGNALED(status))
      error = "the receiving process was killed by signal " + std::to_string(WTERMSIG(status));
    else if (error.empty() && WIFEXITED(status) && WEXITSTATUS(status) == 1)
      error = "the receiving process found a page that did not arrive intact";
    else if (error.empty() && WIFEXITED(status) && WEXITSTATUS(status) != 0)
      error = "the receiving process could not listen, receive or acknowledge (exit status " +
              std::to_string(WEXITSTATUS(status)) + ")";
    out.error = std::move(error);
    return out;
  };
  if (!have_port)
    return finish("the receiving process did not start");
  // Over shared memory the pages lie in memory the receiver maps (as a KV cache registered with
  // UCX would), copied there before the rounds; without it they go from the heap.
  triad::cluster::wire_sharing sharing;
  std::vector<std::span<const std::byte>> pages(data.begin(), data.end());
  if (transport == wire_transport::shared_memory) {
    auto memory = triad::cluster::kv_shared_memory::open(data.size() * page_bytes);
    if (memory) {
      for (std::size_t i = 0; i < data.size(); ++i) {
        auto range = (*memory)->allocate(page_bytes);
        if (!range)
          return finish("the shared memory has no room for page " + std::to_string(i));
        std::memcpy(range->data(), data[i].data(), page_bytes);
        pages[i] = range->first(page_bytes);
      }
      sharing.memory = std::move(*memory);
    } else {
      std::fprintf(stderr,
                   "triad-bench-cluster: no shared memory the receiver maps (%s): pages "
                   "go from the heap\n",
                   memory.error().message.c_str());
    }
  }
  auto wire = kv_wire::open(transport, sharing);
  if (!wire)
    return finish(wire.error().message);
  if (auto up = (*wire)->connect("127.0.0.1", port); !up)
    return finish(up.error().message);
  std::vector<triad::cluster::wire_block> blocks;
  for (std::size_t i = 0; i < data.size(); ++i)
    blocks.push_back({i + 1, pages[i], sums[i]});
  std::uint64_t ack = 0;
  std::span<std::byte> ack_slot[] = {std::as_writable_bytes(std::span{&ack, 1})};
  for (std::size_t r = 0; r <= rounds; ++r) { // round 0: unrecorded
    const auto t0 = clock_type::now();
    if (auto sent = (*wire)->send(blocks); !sent)
      return finish(sent.error().message);
    auto got = (*wire)->receive(ack_slot);
    if (!got)
      return finish(got.error().message);
    if (!(*got)[0] || (ack & 0xffffffff) != r + 1)
      return finish("the receiving process found a page that did not arrive intact");
    out.from_shared = (r == 0 || out.from_shared) && (ack >> 32) != 0;
    if (r > 0)
      out.seconds.push_back(std::chrono::duration<double>(clock_type::now() - t0).count());
  }
  return finish({});
}

// -- nodes as processes --

namespace fs = std::filesystem;

// A node's config, `devices` given as (name, role) pairs: llama3-8b on sim H200s, or (`cpu`)
// the tiny preset on cpu devices, which compute it and hold its KV for real.
std::string node_toml(const std::vector<std::pair<std::string, std::string>>& devices,
                      bool cpu = false) {
  std::string t = "[topology]\nbind_threads = false\n[server]\nallow_scripts = true\n";
  t += cpu ? "[model]\npreset = \"tiny\"\n"
           : "[model]\npreset = \"llama3-8b\"\nweights = \"bf16\"\n";
  // Every node runs on this machine: the KV wire over shared memory (held KV copied out in place).
  t += "[cluster]\nheartbeat_ms = 200\nheartbeat_deadline_ms = 1000\nrejoin_ms = 300\n"
       "kv_wire = \"shared_memory\"\n";
  for (const auto& [name, role] : devices)
    t += "[[devices]]\nname = \"" + name + "\"\nrole = \"" + role + "\"\n" +
         (cpu ? "backend = \"cpu\"\nmemory_mib = 256\ncompute_cores = 1\n"
              : "backend = \"sim\"\nprofile = \"h200\"\n");
  return t;
}

// The nodes of one measurement, in a scratch directory removed at the end.
struct node_set {
  fs::path dir;
  fs::path bin;
  std::vector<triad::child_process> nodes;
  explicit node_set(fs::path binaries)
      : dir(fs::temp_directory_path() / ("triad-bench-cluster-" + std::to_string(::getpid())))
      , bin(std::move(binaries)) {
    fs::create_directories(dir);
  }
  ~node_set() {
    nodes.clear(); // killed before their directory goes
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
  // Starts a triad-node of `toml` with `args`; its index.
  triad::expected<std::size_t> start(const std::string& name, const std::string& toml,
                                     std::vector<std::string> args) {
    std::ofstream{dir / (name + ".toml")} << toml;
    args.insert(args.begin(), {(bin / "triad-node").string(), "--config",
                               (dir / (name + ".toml")).string(), "--port", "0"});
    auto p = triad::child_process::start(std::move(args), dir / (name + ".log"));
    if (!p)
      return p.error();
    nodes.push_back(std::move(*p));
    return nodes.size() - 1;
  }
  // The last lines each node wrote (for an error: why a node stopped answering).
  std::string tails() const {
    std::string out;
    for (const auto& n : nodes) {
      auto text = n.log();
      std::size_t from = text.size();
      for (int lines = 0; lines < 60 && from > 0; ++lines)
        from = text.rfind('\n', from - 1) == std::string::npos ? 0 : text.rfind('\n', from - 1);
      out += "\n--- node " + std::to_string(n.pid()) + " (-1: ended) ---\n" + text.substr(from);
    }
    return out;
  }
  triad::expected<unsigned> port(std::size_t i, const char* pattern) {
    auto got = nodes[i].wait_for(pattern, std::chrono::seconds{60});
    if (!got)
      return got.error();
    return static_cast<unsigned>(std::stoul(*got));
  }
  triad::expected<unsigned> http_port(std::size_t i) {
    return port(i, "on http://127\\.0\\.0\\.1:([0-9]+)");
  }
  triad::expected<unsigned> cluster_port(std::size_t i) {
    return port(i, "published on 127\\.0\\.0\\.1:([0-9]+)");
  }
};

// A sample of a node's /metrics (-1 when absent or unreachable).
double sample(unsigned port, const std::string& series) {
  auto text = triad::load::http_get("http://127.0.0.1:" + std::to_string(port) + "/metrics");
  return text ? triad::load::metric_sample(*text, series).value_or(-1) : -1;
}

bool wait_sample(unsigned port, const std::string& series, double value) {
  const auto until = clock_type::now() + std::chrono::seconds{30};
  while (clock_type::now() < until) {
    if (sample(port, series) == value)
      return true;
    std::this_thread::sleep_for(std::chrono::milliseconds{20});
  }
  return false;
}

// triad-load's chat requests against the node on `port`, to completion: its report's metrics.
triad::expected<boost::json::object> load(const node_set& set, unsigned port, std::size_t requests,
                                          std::size_t prompt, std::size_t output_tokens,
                                          const std::string& name,
                                          triad::child_process* started = nullptr) {
  const auto json_path = (set.dir / (name + ".json")).string();
  std::vector<std::string> args = {(set.bin / "triad-load").string(),
                                   "--url",
                                   "http://127.0.0.1:" + std::to_string(port) + "/v1",
                                   "--requests",
                                   std::to_string(requests),
                                   "--concurrency",
                                   "16",
                                   "--input-tokens",
                                   std::to_string(prompt),
                                   "--output-tokens",
                                   "fixed:" + std::to_string(output_tokens),
                                   "--json",
                                   json_path};
  auto p = triad::child_process::start(std::move(args), set.dir / (name + ".log"));
  if (!p)
    return p.error();
  if (started != nullptr)
    *started = std::move(*p);
  auto& proc = started != nullptr ? *started : *p;
  const auto until = clock_type::now() + std::chrono::seconds{300};
  while (proc.running() && clock_type::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds{20});
  if (proc.running())
    return triad::make_error(triad::errc::timed_out,
                             "triad-load did not end in 300 s (requests left hanging): " +
                                 proc.log());
  std::ifstream in{json_path};
  std::stringstream text;
  text << in.rdbuf();
  boost::system::error_code ec;
  auto doc = boost::json::parse(text.str(), ec);
  if (ec || !doc.is_object())
    return triad::make_error(triad::errc::io_error, "triad-load wrote no report: " + proc.log());
  return doc.at("metrics").as_object();
}

// Output tokens per second of the load with the decode device in the node's process, then in
// another; their ratio in `rep`.
std::string measure_remote_decode(const fs::path& bin, bool quick, bool cpu,
                                  triad::bench::report& rep) {
  const std::size_t requests = cpu ? (quick ? 16 : 48) : (quick ? 32 : 128);
  const std::size_t prompt = cpu ? 256 : 512;
  // 0: one node; 1: the decode device another process's; 2 (cpu): a front without devices, a
  // prefill node and a decode node.
  double tps[3] = {0, 0, 0};
  double wire_bytes = 0, wire_fetches = 0, wire_failures = 0, wire_in_place = 0;
  double split_handed = 0, split_bytes = 0, split_failures = 0, split_prefilled = 0;
  const char* names[3] = {"local", "remote", "split"};
  for (int remote = 0; remote < (cpu ? 3 : 2); ++remote) {
    std::size_t decode_node = 0; // the remote run's decode node
    std::size_t prefill_node = 0; // the split run's prefill node
    node_set set{bin};
    std::size_t front = 0;
    if (remote == 2) {
      auto d = set.start("decode", node_toml({{"decode0", "decode"}}, cpu),
                         {"--role", "decode", "--cluster-port", "0", "--node-name", "d1"});
      if (!d)
        return d.error().message;
      decode_node = *d;
      auto p = set.start("prefill", node_toml({{"prefill0", "prefill"}}, cpu),
                         {"--role", "prefill", "--cluster-port", "0", "--node-name", "p1"});
      if (!p)
        return p.error().message;
      prefill_node = *p;
      auto dport = set.cluster_port(*d);
      if (!dport)
        return dport.error().message;
      auto pport = set.cluster_port(*p);
      if (!pport)
        return pport.error().message;
      auto f = set.start(
          "front", node_toml({}, cpu),
          {"--role", "front", "--peers",
           "127.0.0.1:" + std::to_string(*pport) + ",127.0.0.1:" + std::to_string(*dport)});
      if (!f)
        return f.error().message;
      front = *f;
    } else if (remote == 0) {
      auto f =
          set.start("local", node_toml({{"prefill0", "prefill"}, {"decode0", "decode"}}, cpu), {});
      if (!f)
        return f.error().message;
      front = *f;
    } else {
      auto d = set.start("decode", node_toml({{"decode0", "decode"}}, cpu),
                         {"--role", "decode", "--cluster-port", "0", "--node-name", "d1"});
      if (!d)
        return d.error().message;
      decode_node = *d;
      auto dport = set.cluster_port(*d);
      if (!dport)
        return dport.error().message;
      auto f = set.start("front", node_toml({{"prefill0", "prefill"}}, cpu),
                         {"--peers", "127.0.0.1:" + std::to_string(*dport)});
      if (!f)
        return f.error().message;
      front = *f;
    }
    auto port = set.http_port(front);
    if (!port)
      return port.error().message;
    if (remote > 0 && !wait_sample(*port, "triad_cluster_peers_up", remote))
      return "the front did not join its peers";
    auto m = load(set, *port, requests, prompt, 128, names[remote]);
    if (!m)
      return m.error().message;
    if (m->at("calls_ok").as_int64() != static_cast<std::int64_t>(requests)) {
      std::string running;
      for (auto& n : set.nodes)
        running += n.running() ? " running" : " ENDED";
      return std::string{names[remote]} +
             ": not every request completed: " + boost::json::serialize(m->at("errors")) +
             "; nodes:" + running + set.tails();
    }
    tps[remote] = m->at("output_tokens_per_s").to_number<double>();
    if (remote == 1) { // the decode node's fetches of the front's KV over the KV wire
      auto dport = set.http_port(decode_node);
      if (!dport)
        return dport.error().message;
      wire_bytes = sample(*dport, "triad_cluster_kv_wire_fetched_bytes_total");
      wire_fetches = sample(*dport, "triad_cluster_kv_wire_fetches_total");
      wire_failures = sample(*dport, "triad_cluster_kv_wire_fetch_failures_total");
      wire_in_place = sample(*dport, "triad_cluster_kv_wire_in_place_bytes_total");
    }
    if (remote == 2) { // the prefill node's pages the decode node fetched and attached
      auto dport = set.http_port(decode_node);
      if (!dport)
        return dport.error().message;
      auto pport = set.http_port(prefill_node);
      if (!pport)
        return pport.error().message;
      split_handed =
          sample(*dport, "triad_device_kv_handoff_fetched_tokens_total{device=\"decode0\"}");
      split_bytes = sample(*dport, "triad_cluster_kv_wire_fetched_bytes_total");
      split_failures = sample(*dport, "triad_cluster_kv_wire_fetch_failures_total");
      split_prefilled = sample(*pport, "triad_device_tokens_total{device=\"prefill0\"}");
    }
  }
  const std::string suffix = cpu ? "_cpu" : "";
  rep.metrics["local_decode_output_tokens_per_s" + suffix] = tps[0];
  rep.metrics["remote_decode_output_tokens_per_s" + suffix] = tps[1];
  rep.metrics["remote_kv_wire_fetches" + suffix] = wire_fetches;
  rep.metrics["remote_kv_wire_fetched_bytes" + suffix] = wire_bytes;
  rep.metrics["remote_kv_wire_fetch_failures" + suffix] = wire_failures;
  rep.metrics["remote_kv_wire_in_place_bytes" + suffix] = wire_in_place;
  rep.metrics["decode_workload" + suffix] =
      std::to_string(requests) + " chat requests (" + std::to_string(prompt) +
      "-token prompts, 128 tokens out, 16 at once) through triad-load to triad-node, " +
      (cpu ? "the tiny model on cpu devices (real compute; its KV crosses over the KV wire, UCX "
             "over TCP, from the front's exchange to the decode node)"
           : "llama3-8b on SIMULATED H200s (modelled step times in real time; a sim's KV export "
             "is its tokens, the transfer's time modelled; under kv_wire_min_kib it goes in the "
             "control message)") +
      "; remote: the decode device in a --role decode process joined over CAF's BASP, KV of "
      "kv_wire_min_kib or more fetched over the KV wire (remote_kv_wire_*)";
  rep.ratios["remote_over_local_decode_throughput" + suffix] = tps[1] / tps[0];
  if (cpu) {
    rep.metrics["split_decode_output_tokens_per_s_cpu"] = tps[2];
    rep.metrics["split_kv_handoff_tokens_cpu"] = split_handed;
    rep.metrics["split_prefilled_tokens_cpu"] = split_prefilled;
    rep.metrics["split_kv_wire_fetched_bytes_cpu"] = split_bytes;
    rep.metrics["split_kv_wire_fetch_failures_cpu"] = split_failures;
    rep.ratios["split_over_local_decode_throughput_cpu"] = tps[2] / tps[0];
  }
  return {};
}

// Two decode nodes; one killed while it decodes; how the load's requests ended.
std::string measure_failover(const fs::path& bin, bool quick, triad::bench::report& rep) {
  const std::size_t requests = quick ? 48 : 128;
  node_set set{bin};
  std::string peers;
  std::size_t d1 = 0;
  unsigned d1_http = 0;
  for (const char* name : {"d1", "d2"}) {
    auto d = set.start(name, node_toml({{"decode0", "decode"}}),
                       {"--role", "decode", "--cluster-port", "0", "--node-name", name});
    if (!d)
      return d.error().message;
    auto cport = set.cluster_port(*d);
    if (!cport)
      return cport.error().message;
    peers += (peers.empty() ? "127.0.0.1:" : ",127.0.0.1:") + std::to_string(*cport);
    if (std::string{name} == "d1") {
      d1 = *d;
      auto h = set.http_port(*d);
      if (!h)
        return h.error().message;
      d1_http = *h;
    }
  }
  auto f = set.start("front", node_toml({{"prefill0", "prefill"}}), {"--peers", peers});
  if (!f)
    return f.error().message;
  auto port = set.http_port(*f);
  if (!port)
    return port.error().message;
  if (!wait_sample(*port, "triad_cluster_peers_up", 2))
    return "the front did not join both decode nodes";
  // The load runs in a thread; the node dies while it decodes for it.
  triad::expected<boost::json::object> result = boost::json::object{};
  std::thread runner{[&] { result = load(set, *port, requests, 512, 256, "failover"); }};
  const auto until = clock_type::now() + std::chrono::seconds{60};
  double running = 0;
  while ((running = sample(d1_http, "triad_device_running{device=\"decode0\"}")) < 1 &&
         clock_type::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds{2});
  const auto killed = clock_type::now();
  set.nodes[d1].kill(SIGKILL);
  while (sample(*port, "triad_cluster_peers_up") != 1 &&
         clock_type::now() - killed < std::chrono::seconds{30})
    std::this_thread::sleep_for(std::chrono::milliseconds{1});
  const double detect_ms =
      std::chrono::duration<double, std::milli>(clock_type::now() - killed).count();
  runner.join();
  if (running < 1)
    return "the decode node to kill got no work";
  if (!result)
    return result.error().message;
  const auto& m = *result;
  std::int64_t failed = 0;
  for (const auto& [kind, n] : m.at("errors").as_object())
    failed += n.as_int64();
  const auto ok = m.at("calls_ok").as_int64();
  rep.metrics["failover_requests"] = requests;
  rep.metrics["failover_completed"] = ok;
  rep.metrics["failover_failed"] = failed;
  rep.metrics["failover_sequences_on_killed_node"] = running;
  rep.metrics["failover_detect_ms"] = detect_ms;
  rep.metrics["failover_retried"] = sample(*port, "triad_request_device_retries_total");
  rep.metrics["failover_heartbeat_deadline_ms"] = 1000;
  rep.ratios["failover_lost_requests"] = static_cast<double>(requests) - ok - failed;
  return {};
}

int run(int argc, char** argv) {
  CLI::App app{"triad-bench-cluster: the KV data plane between processes (UCX) against memcpy"};
  triad::bench::common_options common;
  triad::bench::add_common_options(app, common, "a 1024-token sequence's KV, 5 rounds");
  CLI11_PARSE(app, argc, argv);
  const std::size_t tokens = common.quick ? 1024 : 4096;
  const std::size_t rounds = common.quick ? 5 : 15;
  const std::size_t pages = tokens / page_tokens;

  std::vector<std::vector<std::byte>> data(pages, std::vector<std::byte>(page_bytes));
  std::vector<std::uint64_t> sums;
  std::mt19937_64 rng{7};
  for (auto& page : data) {
    for (std::size_t i = 0; i < page.size(); i += 8) {
      const auto r = rng();
      std::memcpy(page.data() + i, &r, 8);
    }
    sums.push_back(triad::block_checksum(page));
  }
  const double total = static_cast<double>(pages * page_bytes);

  // memcpy of the same pages into a touched destination, one thread.
  std::vector<std::byte> dst(pages * page_bytes, std::byte{1});
  std::vector<double> memcpy_s;
  for (std::size_t r = 0; r <= rounds; ++r) {
    const auto t0 = clock_type::now();
    for (std::size_t i = 0; i < pages; ++i)
      std::memcpy(dst.data() + i * page_bytes, data[i].data(), page_bytes);
    if (r > 0)
      memcpy_s.push_back(std::chrono::duration<double>(clock_type::now() - t0).count());
  }
  // The same pages through the copy the receiver makes (copy_checked: checksum in the same
  // pass, non-temporal stores), in this process, one thread: what the wire adds beyond it.
  std::vector<double> checked_s;
  for (std::size_t r = 0; r <= rounds; ++r) {
    const auto t0 = clock_type::now();
    for (std::size_t i = 0; i < pages; ++i)
      if (!triad::copy_checked({dst.data() + i * page_bytes, page_bytes}, data[i], sums[i])) {
        std::fprintf(stderr, "triad-bench-cluster: page %zu failed its checksum in memory\n", i);
        return 1;
      }
    if (r > 0)
      checked_s.push_back(std::chrono::duration<double>(clock_type::now() - t0).count());
  }

  triad::bench::report rep;
  rep.quick = common.quick;
  const double memcpy_gbps = total / triad::bench::median(memcpy_s) / 1e9;
  rep.metrics["memcpy_gb_per_s"] = memcpy_gbps;
  const double checked_gbps = total / triad::bench::median(checked_s) / 1e9;
  rep.metrics["checked_copy_gb_per_s"] = checked_gbps;
  rep.metrics["pages"] = pages;
  rep.metrics["page_bytes"] = page_bytes;
  rep.metrics["transfer_bytes"] = total;
  rep.metrics["rounds"] = rounds;
  rep.metrics["workload"] = "a prefill -> decode KV transfer of a " + std::to_string(tokens) +
                            "-token llama3-8b sequence (bf16, 2 MiB pages) between two "
                            "processes, every page's checksum checked on arrival";
  for (auto transport : {wire_transport::shared_memory, wire_transport::tcp}) {
    auto r = measure_transfer(transport, data, sums, rounds);
    const std::string name{triad::cluster::to_string(transport)};
    if (!r.error.empty()) {
      std::fprintf(stderr, "triad-bench-cluster: %s: %s\n", name.c_str(), r.error.c_str());
      return 1;
    }
    const double gbps = total / triad::bench::median(r.seconds) / 1e9;
    rep.metrics["ucx_" + name + "_gb_per_s"] = gbps;
    if (transport == wire_transport::shared_memory) {
      rep.metrics["ucx_shared_memory_read_in_place"] = r.from_shared ? 1 : 0;
      rep.metrics["ucx_transfer_over_checked_copy"] = gbps / checked_gbps;
      // The node's exchange first copies a hand-off's KV into its shared memory (a checked copy,
      // holder side), then it crosses: both in turn, from the two rates measured here.
      rep.metrics["ucx_hold_and_transfer_gb_per_s_derived"] = 1 / (1 / checked_gbps + 1 / gbps);
    }
    rep.ratios[transport == wire_transport::tcp ? "ucx_tcp_transfer_over_memcpy"
                                                : "ucx_transfer_over_memcpy"] = gbps / memcpy_gbps;
  }
  // The nodes: triad-node and triad-load beside this binary.
  const auto bin = fs::canonical("/proc/self/exe").parent_path();
  for (bool cpu : {false, true})
    if (auto e = measure_remote_decode(bin, common.quick, cpu, rep); !e.empty()) {
      std::fprintf(stderr, "triad-bench-cluster: remote decode%s: %s\n", cpu ? " (cpu)" : "",
                   e.c_str());
      return 1;
    }
  if (auto e = measure_failover(bin, common.quick, rep); !e.empty()) {
    std::fprintf(stderr, "triad-bench-cluster: failover: %s\n", e.c_str());
    return 1;
  }
  return rep.finish(common.json_path);
}

} // namespace

int main(int argc, char** argv) {
  return triad::guarded_main("triad-bench-cluster", argc, argv, run);
}
