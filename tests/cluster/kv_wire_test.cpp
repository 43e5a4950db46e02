#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <netinet/in.h>

#include <cstdio>
#include <cstring>
#include <future>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <boost/test/unit_test.hpp>

#include "cluster/kv_wire.hpp"
#include "runtime/checksum.hpp"
#include "tests/printers.hpp"

using namespace triad;
using namespace triad::cluster;

namespace {

// Block `id`'s bytes: a pseudo-random pattern of `n` bytes from its id.
std::vector<std::byte> block_bytes(std::uint64_t id, std::size_t n) {
  std::mt19937_64 rng{id * 0x9e3779b97f4a7c15ull + 1};
  std::vector<std::byte> v(n);
  for (std::size_t i = 0; i < n; i += 8) {
    const auto r = rng();
    std::memcpy(v.data() + i, &r, std::min<std::size_t>(8, n - i));
  }
  return v;
}

// KV pages of several sizes: small ones (sent eagerly) and pages of a few MiB (rendezvous).
const std::vector<std::size_t> page_sizes = {64, 4096, 65536 + 7, 2 << 20, 4 << 20, 1000};

// What the receiving process saw in one slot.
// `in_place`: intact, copied by the receiver out of the sender's shared memory.
enum class seen : std::uint8_t { intact, in_place, different, corrupted, too_large, other };

// Runs a receiver in a child process (its own UCX context, opened after the fork): it listens on
// 127.0.0.1, tells the parent its port through a pipe, receives a block into each slot of
// `slot_sizes`, compares each block's bytes with block_bytes(its id) and writes what it saw.
// The parent, the sender, runs `send(port)`; the outcome per slot comes back. `reads`: the
// receiver reads blocks sent as where they lie in the sender's shared memory. `batches`: it
// receives that many batches in turn (the outcomes one after the other). `cannot_map`: its
// reader cannot map any memory (a fault injected: as in another IPC namespace, or without the
// right to attach the holder's segments).
template<class Send>
std::vector<seen> across_processes(wire_transport transport,
                                   const std::vector<std::size_t>& slot_sizes, Send send,
                                   bool reads = false, int batches = 1, bool cannot_map = false) {
  int fds[2];
  BOOST_REQUIRE_EQUAL(::pipe(fds), 0);
  const pid_t child = ::fork();
  BOOST_REQUIRE(child >= 0);
  if (child == 0)
    try {
      ::close(fds[0]);
      auto fail = [&] { ::_exit(2); };
      wire_sharing sharing;
      if (reads) {
        auto reader = kv_shared_reader::open(cannot_map ? kv_shared_reader::fault::cannot_map
                                                        : kv_shared_reader::fault::none);
        if (!reader)
          fail();
        sharing.reader = std::move(*reader);
      }
      auto wire = kv_wire::open(transport, sharing);
      if (!wire)
        fail();
      auto port = (*wire)->listen("127.0.0.1", 0);
      if (!port || ::write(fds[1], &*port, sizeof(*port)) != sizeof(*port))
        fail();
      std::vector<std::vector<std::byte>> memory;
      std::vector<std::span<std::byte>> slots;
      for (auto n : slot_sizes)
        memory.emplace_back(n);
      for (auto& m : memory)
        slots.emplace_back(m);
      for (int batch = 0; batch < batches; ++batch) {
        auto got = (*wire)->receive(slots);
        std::vector<seen> out;
        for (std::size_t i = 0; got && i < got->size(); ++i) {
          const auto& b = (*got)[i];
          if (b) {
            // In order: slot i holds block i + 1, all of it, as it was sent.
            auto want = block_bytes(i + 1, page_sizes[i]);
            out.push_back(b->id == i + 1 && b->bytes == want.size() &&
                                  std::memcmp(want.data(), slots[i].data(), b->bytes) == 0
                              ? (b->in_place ? seen::in_place : seen::intact)
                              : seen::different);
          } else {
            out.push_back(b.error().code == errc::corrupted   ? seen::corrupted
                          : b.error().code == errc::exhausted ? seen::too_large
                                                              : seen::other);
          }
        }
        if (!got)
          fail();
        if (::write(fds[1], out.data(), out.size()) != static_cast<ssize_t>(out.size()))
          fail();
      }
      ::_exit(0);
    } catch (...) {
      ::_exit(3); // never back into the test runner in the child
    }
  ::close(fds[1]);
  // The child is ended and reaped however this returns (a failed REQUIRE throws).
  struct reaper {
    pid_t pid;
    int fd;
    int status = -1;
    int wait() {
      if (pid > 0) {
        ::waitpid(pid, &status, 0);
        pid = -1;
      }
      return status;
    }
    ~reaper() {
      if (pid > 0)
        ::kill(pid, SIGKILL);
      wait();
      ::close(fd);
    }
  } child_process{child, fds[0]};
  std::uint16_t port = 0;
  BOOST_REQUIRE_EQUAL(::read(fds[0], &port, sizeof(port)), static_cast<ssize_t>(sizeof(port)));
  send(port);
  std::vector<seen> out(slot_sizes.size() * static_cast<std::size_t>(batches));
  std::size_t n = 0;
  while (n < out.size()) {
    auto r = ::read(fds[0], reinterpret_cast<char*>(out.data()) + n, out.size() - n);
    if (r <= 0)
      break;
    n += static_cast<std::size_t>(r);
  }
  const int status = child_process.wait();
  BOOST_REQUIRE(WIFEXITED(status));
  BOOST_REQUIRE_EQUAL(WEXITSTATUS(status), 0);
  BOOST_REQUIRE_EQUAL(n, out.size());
  return out;
}

// Sends block_bytes(i + 1) of each size to the wire at `port`; `corrupt` names one index whose
// checksum is sent wrong. `shared`: the pages lie in shared memory the receiver may read; once
// the send has returned they are overwritten (the receiver must have copied them by then).
void send_pages(wire_transport transport, std::uint16_t port, int corrupt = -1, bool shared = false,
                int batches = 1) {
  std::shared_ptr<kv_shared_memory> memory;
  if (shared) {
    auto opened = kv_shared_memory::open(16 << 20);
    BOOST_REQUIRE_MESSAGE(opened.has_value(), why(opened));
    memory = std::move(*opened);
  }
  wire_sharing sharing{memory, nullptr};
  auto wire = kv_wire::open(transport, sharing);
  BOOST_REQUIRE_MESSAGE(wire.has_value(), why(wire));
  auto up = (*wire)->connect("127.0.0.1", port);
  BOOST_REQUIRE_MESSAGE(up.has_value(), why(up));
  std::vector<std::vector<std::byte>> bytes;
  std::vector<wire_block> blocks;
  for (std::size_t i = 0; i < page_sizes.size(); ++i)
    bytes.push_back(block_bytes(i + 1, page_sizes[i]));
  std::vector<std::span<std::byte>> pages(bytes.begin(), bytes.end());
  if (shared) {
    for (std::size_t i = 0; i < bytes.size(); ++i) {
      auto range = memory->allocate(bytes[i].size());
      BOOST_REQUIRE(range.has_value());
      pages[i] = range->first(bytes[i].size());
    }
  }
  for (std::size_t i = 0; i < page_sizes.size(); ++i) {
    auto sum = block_checksum(bytes[i]);
    blocks.push_back({i + 1, pages[i], static_cast<int>(i) == corrupt ? sum ^ 1 : sum});
  }
  for (int batch = 0; batch < batches; ++batch) {
    for (std::size_t i = 0; shared && i < bytes.size(); ++i)
      std::memcpy(pages[i].data(), bytes[i].data(), bytes[i].size());
    auto sent = (*wire)->send(blocks);
    BOOST_REQUIRE_MESSAGE(sent.has_value(), why(sent));
    for (auto& page : pages) // the send is done with them
      std::memset(page.data(), 0xee, page.size());
  }
}

std::vector<seen> all(seen s) {
  return std::vector<seen>(page_sizes.size(), s);
}

// Pages from shared memory to a reader: those of 64 KiB and more copied out in place, the
// smaller ones sent with their bytes.
std::vector<seen> in_place_from_64k() {
  std::vector<seen> out;
  for (auto n : page_sizes)
    out.push_back(n >= 65536 ? seen::in_place : seen::intact);
  return out;
}

} // namespace

// Two processes on one machine, shared-memory transports: every page arrives bit-exact in the
// other process's memory, in order, small and large.
BOOST_AUTO_TEST_CASE(pages_cross_processes_bit_exact_over_shared_memory) {
  auto got = across_processes(wire_transport::shared_memory, page_sizes, [](std::uint16_t port) {
    send_pages(wire_transport::shared_memory, port);
  });
  BOOST_TEST((got == all(seen::intact)));
}

// The same over TCP (the transport between machines without RDMA).
BOOST_AUTO_TEST_CASE(pages_cross_processes_bit_exact_over_tcp) {
  auto got = across_processes(wire_transport::tcp, page_sizes,
                              [](std::uint16_t port) { send_pages(wire_transport::tcp, port); });
  BOOST_TEST((got == all(seen::intact)));
}

// A page whose bytes do not match the checksum its owner computed is refused (errc::corrupted,
// its bytes not handed out); the pages around it arrive.
BOOST_AUTO_TEST_CASE(a_page_that_fails_its_checksum_is_refused) {
  auto got = across_processes(wire_transport::shared_memory, page_sizes, [](std::uint16_t port) {
    send_pages(wire_transport::shared_memory, port, 3);
  });
  auto want = all(seen::intact);
  want[3] = seen::corrupted;
  BOOST_TEST((got == want));
}

// Pages of 64 KiB or more lying in the sender's shared memory go as where they lie: the receiver
// copies each out of its mapping (checked in the same pass), bit-exact, before the sender's send
// returns (the sender overwrites them right after).
BOOST_AUTO_TEST_CASE(pages_in_shared_memory_are_copied_out_in_place_bit_exact) {
  auto got = across_processes(
      wire_transport::shared_memory, page_sizes,
      [](std::uint16_t port) { send_pages(wire_transport::shared_memory, port, -1, true); }, true);
  BOOST_TEST((got == in_place_from_64k()));
}

// A receiver that cannot map the sender's shared memory (fault injected) refuses the pages sent
// as where they lie (io_error) and tells the sender so: the next batch comes with its bytes,
// intact.
BOOST_AUTO_TEST_CASE(a_receiver_that_cannot_map_the_shared_memory_gets_the_bytes_next_time) {
  auto got = across_processes(
      wire_transport::shared_memory, page_sizes,
      [](std::uint16_t port) { send_pages(wire_transport::shared_memory, port, -1, true, 2); },
      true, 2, true);
  std::vector<seen> want;
  for (auto n : page_sizes) // the first batch: those sent as where they lie are refused
    want.push_back(n >= 65536 ? seen::other : seen::intact);
  const auto second = all(seen::intact);
  want.insert(want.end(), second.begin(), second.end());
  BOOST_TEST((got == want));
}

// A receiver that does not read shared memory gets the bytes of pages in the sender's shared
// memory pushed, as any others.
BOOST_AUTO_TEST_CASE(pages_in_shared_memory_are_pushed_to_a_receiver_that_does_not_read_it) {
  auto got = across_processes(wire_transport::shared_memory, page_sizes, [](std::uint16_t port) {
    send_pages(wire_transport::shared_memory, port, -1, true);
  });
  BOOST_TEST((got == all(seen::intact)));
}

// A page in shared memory that fails its checksum as it is copied out is refused; the others
// arrive in place.
BOOST_AUTO_TEST_CASE(a_page_in_shared_memory_that_fails_its_checksum_is_refused) {
  auto got = across_processes(
      wire_transport::shared_memory, page_sizes,
      [](std::uint16_t port) { send_pages(wire_transport::shared_memory, port, 4, true); }, true);
  auto want = in_place_from_64k();
  want[4] = seen::corrupted;
  BOOST_TEST((got == want));
}

// A page in shared memory larger than its slot is refused too, not cut short.
BOOST_AUTO_TEST_CASE(a_page_in_shared_memory_larger_than_its_slot_is_refused) {
  auto slots = page_sizes;
  slots[3] = page_sizes[3] / 2;
  auto got = across_processes(
      wire_transport::shared_memory, slots,
      [](std::uint16_t port) { send_pages(wire_transport::shared_memory, port, -1, true); }, true);
  auto want = in_place_from_64k();
  want[3] = seen::too_large;
  BOOST_TEST((got == want));
}

// A page larger than the slot it lands in is refused (errc::exhausted), not cut short.
BOOST_AUTO_TEST_CASE(a_page_larger_than_its_slot_is_refused) {
  auto slots = page_sizes;
  slots[4] = page_sizes[4] / 2;
  auto got = across_processes(wire_transport::shared_memory, slots, [](std::uint16_t port) {
    send_pages(wire_transport::shared_memory, port);
  });
  auto want = all(seen::intact);
  want[4] = seen::too_large;
  BOOST_TEST((got == want));
}

// Connecting where nothing listens is an error naming the address, within the timeout.
BOOST_AUTO_TEST_CASE(connecting_where_nothing_listens_names_the_address) {
  // A port that was free a moment ago: bound, read back, closed.
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  BOOST_REQUIRE(fd >= 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  BOOST_REQUIRE_EQUAL(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  socklen_t len = sizeof(addr);
  BOOST_REQUIRE_EQUAL(::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  const auto port = ntohs(addr.sin_port);
  ::close(fd);
  auto wire = kv_wire::open(wire_transport::tcp);
  BOOST_REQUIRE_MESSAGE(wire.has_value(), why(wire));
  auto up = (*wire)->connect("127.0.0.1", port, std::chrono::milliseconds{3000});
  BOOST_REQUIRE(!up);
  BOOST_TEST(up.error().code == errc::io_error);
  BOOST_TEST(up.error().message.find("127.0.0.1:" + std::to_string(port)) != std::string::npos,
             up.error().message);
}

// Sending on a wire that neither has nor listens for a peer is invalid_argument.
BOOST_AUTO_TEST_CASE(sending_without_a_peer_is_an_error) {
  auto wire = kv_wire::open(wire_transport::shared_memory);
  BOOST_REQUIRE_MESSAGE(wire.has_value(), why(wire));
  std::vector<std::byte> b(16);
  wire_block block{1, b, block_checksum(b)};
  auto sent = (*wire)->send(std::span{&block, 1});
  BOOST_REQUIRE(!sent);
  BOOST_TEST(sent.error().code == errc::invalid_argument);
}

// An address that is not an IPv4 address is invalid_argument naming it.
BOOST_AUTO_TEST_CASE(an_address_that_is_not_ipv4_is_refused_naming_it) {
  auto wire = kv_wire::open(wire_transport::shared_memory);
  BOOST_REQUIRE_MESSAGE(wire.has_value(), why(wire));
  auto up = (*wire)->connect("localhost:1", 1);
  BOOST_REQUIRE(!up);
  BOOST_TEST(up.error().code == errc::invalid_argument);
  BOOST_TEST(up.error().message.find("'localhost:1'") != std::string::npos);
}

// A receive that times out drops the peer and leaves nothing behind: a block the old peer
// sends afterwards never lands anywhere, and the next peer's block arrives intact in the next
// receive.
BOOST_AUTO_TEST_CASE(a_receive_that_times_out_drops_the_peer_and_leaves_nothing_behind) {
  auto a = kv_wire::open(wire_transport::tcp);
  BOOST_REQUIRE_MESSAGE(a.has_value(), why(a));
  auto port = (*a)->listen("127.0.0.1", 0);
  BOOST_REQUIRE_MESSAGE(port.has_value(), why(port));
  std::promise<void> timed_out;
  std::string sender_error;
  std::jthread sender{[&] {
    auto one = block_bytes(1, 4096), two = block_bytes(2, 3 << 20), three = block_bytes(3, 5000);
    wire_block first{1, one, block_checksum(one)}, second{2, two, block_checksum(two)},
        third{3, three, block_checksum(three)};
    auto b = kv_wire::open(wire_transport::tcp);
    if (!b || !(*b)->connect("127.0.0.1", *port) || !(*b)->send(std::span{&first, 1}))
      sender_error = "the first peer's connect or send failed";
    timed_out.get_future().wait();
    // The receiver dropped this peer: the send fails or goes nowhere; either way it ends.
    if (b)
      (void)(*b)->send(std::span{&second, 1}, std::chrono::milliseconds{1000});
    auto c = kv_wire::open(wire_transport::tcp);
    if (!c || !(*c)->connect("127.0.0.1", *port) || !(*c)->send(std::span{&third, 1}))
      sender_error = "the second peer's connect or send failed";
  }};
  std::vector<std::byte> memory(4 << 20);
  std::span<std::byte> slot[] = {memory};
  auto first = (*a)->receive(slot);
  auto late = first ? (*a)->receive(slot, std::chrono::milliseconds{200}) : first;
  timed_out.set_value();
  BOOST_REQUIRE_MESSAGE(first.has_value(), why(first));
  BOOST_REQUIRE_MESSAGE((*first)[0].has_value(), why((*first)[0]));
  BOOST_TEST((*first)[0]->id == 1u);
  BOOST_REQUIRE(!late.has_value());
  BOOST_TEST(late.error().code == errc::timed_out);
  auto next = (*a)->receive(slot);
  sender.join();
  BOOST_REQUIRE_MESSAGE(sender_error.empty(), sender_error);
  BOOST_REQUIRE_MESSAGE(next.has_value(), why(next));
  BOOST_REQUIRE((*next)[0].has_value());
  BOOST_TEST((*next)[0]->id == 3u);
  auto want = block_bytes(3, 5000);
  BOOST_TEST(std::memcmp(want.data(), memory.data(), want.size()) == 0);
}
