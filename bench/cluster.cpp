// triad-bench-cluster: the KV data plane between processes (issue #29).
//
// ucx_transfer_over_memcpy: a prefill -> decode KV transfer between two processes of this
// machine over UCX's shared-memory transports (cluster::kv_wire: a sequence's KV pages sent
// as tagged messages from the sender's memory into the receiver's, each page's checksum checked
// on arrival), against memcpy of the same pages between two buffers in one process by one
// thread. The sender times a round from its first send to the receiver's acknowledgement,
// which follows the last page's check. Both processes work at once (on this 2-vCPU VM, both
// cores: over shared memory the sender's core writes the pages into the receiver's memory
// while the receiver's checks those already there); the memcpy is one thread, unchecked.
// ucx_tcp_transfer_over_memcpy: the same over TCP (loopback here; the transport between machines
// without RDMA). Each figure is the median of its rounds after one unrecorded round; the pages are
// those of a llama3-8b sequence in bf16 (128 KiB of KV a token, pages of 16 tokens: 2 MiB each).
//
// Not yet here (issue #29): remote_over_local_decode_throughput and failover_lost_requests
// (they need the control plane across processes).

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

#include "bench/report.hpp"
#include "cluster/kv_wire.hpp"
#include "runtime/checksum.hpp"
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
// (id: the round; a failed page answers id 0). Exits 0 when every round was intact.
[[noreturn]] void receiver(wire_transport transport, std::size_t pages, std::size_t rounds,
                           int fd) {
  ::prctl(PR_SET_PDEATHSIG, SIGKILL); // never outlives the benchmark
  auto wire = kv_wire::open(transport);
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
    for (std::size_t i = 0; round_ok && i < got->size(); ++i)
      round_ok = (*got)[i].has_value();
    intact = intact && round_ok;
    std::uint64_t ack = round_ok ? r : 0;
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
  auto wire = kv_wire::open(transport);
  if (!wire)
    return finish(wire.error().message);
  if (auto up = (*wire)->connect("127.0.0.1", port); !up)
    return finish(up.error().message);
  std::vector<triad::cluster::wire_block> blocks;
  for (std::size_t i = 0; i < data.size(); ++i)
    blocks.push_back({i + 1, data[i], sums[i]});
  std::uint64_t ack = 0;
  std::span<std::byte> ack_slot[] = {std::as_writable_bytes(std::span{&ack, 1})};
  for (std::size_t r = 0; r <= rounds; ++r) { // round 0: unrecorded
    const auto t0 = clock_type::now();
    if (auto sent = (*wire)->send(blocks); !sent)
      return finish(sent.error().message);
    auto got = (*wire)->receive(ack_slot);
    if (!got)
      return finish(got.error().message);
    if (!(*got)[0] || ack != r + 1)
      return finish("the receiving process found a page that did not arrive intact");
    if (r > 0)
      out.seconds.push_back(std::chrono::duration<double>(clock_type::now() - t0).count());
  }
  return finish({});
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

  triad::bench::report rep;
  rep.quick = common.quick;
  const double memcpy_gbps = total / triad::bench::median(memcpy_s) / 1e9;
  rep.metrics["memcpy_gb_per_s"] = memcpy_gbps;
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
    rep.ratios[transport == wire_transport::tcp ? "ucx_tcp_transfer_over_memcpy"
                                                : "ucx_transfer_over_memcpy"] = gbps / memcpy_gbps;
  }
  return rep.finish(common.json_path);
}

} // namespace

int main(int argc, char** argv) {
  return triad::guarded_main("triad-bench-cluster", argc, argv, run);
}
