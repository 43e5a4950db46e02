// A cluster of triad-node processes on 127.0.0.1 with TLS on: a front node, a prefill node and
// two decode nodes. Agent sessions run through the front with triad-load; a decode node killed
// under load leaves no request hanging, and comes back to be routed to again.
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <future>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/json.hpp>
#include <boost/test/unit_test.hpp>

#include "load/target.hpp"
#include "runtime/child_process.hpp"
#include "tests/process.hpp"

namespace {

namespace fs = std::filesystem;
namespace json = boost::json;
using namespace std::chrono_literals;
using triad::test::binary;
using triad::test::run_command;

std::string slurp(const fs::path& p) {
  std::ifstream in{p};
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// A scratch directory with a CA, a node certificate it signed and the nodes' config.
struct scratch {
  fs::path dir;
  std::string base; // every node's config before its devices; [cluster] is its last table
  scratch() {
    dir = fs::temp_directory_path() / ("triad-cluster-test-" + std::to_string(::getpid()));
    fs::create_directories(dir);
    BOOST_REQUIRE_MESSAGE(run_command("command -v openssl >/dev/null").status == 0,
                          "openssl not found (Debian package openssl): run "
                          "scripts/install-deps.sh --test");
    const auto d = dir.string();
    auto r = run_command(
        "cd " + d +
        " && openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.pem -days 2 "
        "-subj /CN=triad-test-ca 2>&1 && openssl req -newkey rsa:2048 -nodes -keyout node.key "
        "-out node.csr -subj /CN=triad-node 2>&1 && openssl x509 -req -in node.csr -CA ca.pem "
        "-CAkey ca.key -CAcreateserial -out node.pem -days 2 2>&1");
    BOOST_REQUIRE_MESSAGE(r.status == 0, r.out);
    std::ostringstream b;
    b << "[topology]\nbind_threads = false\n"
      << "[scheduler]\nthreads_per_domain = 1\n"
      << "[tools]\nhosted = [\"shell\"]\n"
      << "[server]\nallow_scripts = true\n"
      << "[cluster]\ntls = true\ncertificate = \"" << d << "/node.pem\"\nkey = \"" << d
      << "/node.key\"\ncafile = \"" << d << "/ca.pem\"\n"
      << "heartbeat_ms = 200\nheartbeat_deadline_ms = 1000\nrejoin_ms = 300\n"
      << "kv_wire_min_kib = 0\n"; // the sim's KV is small: every KV over the wire
    base = b.str();
    std::ofstream{dir / "node.toml"} << base;
    std::filesystem::copy_file(dir / "node.toml", dir / "prefill.toml");
    std::filesystem::copy_file(dir / "node.toml", dir / "decode.toml");
    const std::string prefill0 =
        "[[devices]]\nname = \"prefill0\"\nbackend = \"sim\"\nrole = \"prefill\"\n"
        "profile = \"h200\"\n";
    std::ofstream{dir / "node.toml", std::ios::app}
        << prefill0 << "[[devices]]\nname = \"decode0\"\nbackend = \"sim\"\nrole = "
        << "\"decode\"\nprofile = \"h200\"\n";
    std::ofstream{dir / "prefill.toml", std::ios::app} << prefill0; // a whole node's, prefill only
    std::ofstream{dir / "decode.toml", std::ios::app}               // a whole node's, decode only
        << "[[devices]]\nname = \"decode0\"\nbackend = \"sim\"\nrole = \"decode\"\n"
        << "profile = \"h200\"\n";
  }
  ~scratch() {
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
  std::string path(const std::string& name) const { return (dir / name).string(); }
};

// One triad-node process of the scratch's config, its output in `<name>.log`.
class node_process {
public:
  node_process(const scratch& s, const std::string& name, std::vector<std::string> args,
               const std::string& config = "node.toml") {
    args.insert(args.begin(), {binary("triad-node"), "--config", s.path(config), "--port", "0"});
    auto p = triad::child_process::start(std::move(args), s.path(name + ".log"));
    if (!p)
      BOOST_FAIL(p.error().message);
    process_.emplace(std::move(*p));
  }
  // Kills it (SIGKILL: no drain, no goodbye to its peers).
  void kill() { process_->kill(SIGKILL); }
  // Stops it as an operator does (SIGTERM: it drains, then exits); returns once it ended.
  void stop() { process_->kill(SIGTERM); }
  // Sends SIGTERM; whether it ended within `limit` (killed if not).
  bool stops_within(std::chrono::seconds limit) {
    ::kill(process_->pid(), SIGTERM);
    const auto until = std::chrono::steady_clock::now() + limit;
    while (process_->running() && std::chrono::steady_clock::now() < until)
      std::this_thread::sleep_for(50ms);
    return !process_->running();
  }
  // Its output so far.
  std::string log() const { return process_->log(); }
  // Group 1 of `pattern` in its output, once there.
  std::string wait_for(const std::string& pattern) {
    auto got = process_->wait_for(pattern, 60s);
    if (!got)
      BOOST_FAIL(got.error().message << "\n" << process_->log());
    return *got;
  }
  // Its HTTP port, once it serves.
  unsigned http_port() { return std::stoul(wait_for("on http://127\\.0\\.0\\.1:([0-9]+)")); }
  // A device node's control port, once published.
  unsigned cluster_port() { return std::stoul(wait_for("published on 127\\.0\\.0\\.1:([0-9]+)")); }

private:
  std::optional<triad::child_process> process_;
};

// GET `path` of 127.0.0.1:`port` (the body; empty when it fails).
std::string http_get(unsigned port, const std::string& path) {
  auto body = triad::load::http_get("http://127.0.0.1:" + std::to_string(port) + path);
  return body ? *body : std::string{};
}

// POSTs `body` (JSON) to `path` of 127.0.0.1:`port`: the response's body (empty when it fails
// or is not 200).
std::string http_post(unsigned port, const std::string& path, const std::string& body) {
  namespace http = boost::beast::http;
  boost::asio::io_context io;
  boost::asio::ip::tcp::socket socket{io};
  boost::system::error_code ec;
  socket.connect({boost::asio::ip::make_address("127.0.0.1"), static_cast<unsigned short>(port)},
                 ec);
  if (ec)
    return {};
  http::request<http::string_body> req{http::verb::post, path, 11};
  req.set(http::field::host, "127.0.0.1");
  req.set(http::field::content_type, "application/json");
  req.body() = body;
  req.prepare_payload();
  http::write(socket, req, ec);
  boost::beast::flat_buffer buffer;
  http::response<http::string_body> res;
  if (!ec)
    http::read(socket, buffer, res, ec);
  return !ec && res.result_int() == 200 ? res.body() : std::string{};
}

// The answer of the node serving HTTP on `port` to `prompt`, greedy, `tokens` long at most.
std::string greedy_answer(unsigned port, const std::string& prompt, int tokens) {
  const auto models = json::parse(http_get(port, "/v1/models"));
  const auto model = models.at("data").as_array().at(0).at("id").as_string();
  json::object body{{"model", model},
                    {"messages", json::array{json::object{{"role", "user"}, {"content", prompt}}}},
                    {"max_tokens", tokens},
                    {"temperature", 0}};
  const auto out = http_post(port, "/v1/chat/completions", json::serialize(body));
  BOOST_REQUIRE_MESSAGE(!out.empty(), "no answer from port " << port);
  return std::string{
      json::parse(out).at("choices").as_array().at(0).at("message").at("content").as_string()};
}

// The value of the sample `series` (exactly as written, labels included) in Prometheus text; -1
// when it is not there.
double sample(const std::string& text, const std::string& series) {
  return triad::load::metric_sample(text, series).value_or(-1);
}

// Waits up to `limit` for the front's `series` to read `value`.
bool wait_metric(unsigned port, const std::string& series, double value,
                 std::chrono::seconds limit = 30s) {
  const auto until = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < until) {
    if (sample(http_get(port, "/metrics"), series) == value)
      return true;
    std::this_thread::sleep_for(100ms);
  }
  return false;
}

// triad-load's agent sessions with two hosted tool calls (`command` in the shell tool) each,
// against the node serving HTTP on `port`, its report in `report`.
std::string agent_load(unsigned port, int sessions, int tokens, const std::string& report,
                       const std::string& command = "echo ran") {
  return binary("triad-load") + " --url http://127.0.0.1:" + std::to_string(port) +
         "/v1 --workload agent --requests " + std::to_string(sessions) +
         " --concurrency 6 --turns 1 --tool-calls fixed:2 --output-tokens fixed:" +
         std::to_string(tokens) + " --hosted-tool shell --hosted-tool-args '{\"command\": \"" +
         command + "\"}' --json " + report + " 2>&1";
}

// A front, a prefill node and two decode nodes, the front joined to all three.
struct cluster {
  scratch s;
  node_process prefill{s, "p1", {"--role", "prefill", "--cluster-port", "0", "--node-name", "p1"}};
  node_process decode1{s, "d1", {"--role", "decode", "--cluster-port", "0", "--node-name", "d1"}};
  node_process decode2{s, "d2", {"--role", "decode", "--cluster-port", "0", "--node-name", "d2"}};
  unsigned d1_port = decode1.cluster_port();
  unsigned d2_port = decode2.cluster_port();
  std::string peers = "127.0.0.1:" + std::to_string(prefill.cluster_port()) +
                      ",127.0.0.1:" + std::to_string(d1_port) +
                      ",127.0.0.1:" + std::to_string(d2_port);
  node_process front{s, "front", {"--role", "front", "--peers", peers}};
  unsigned port = front.http_port();
  cluster() {
    BOOST_REQUIRE_MESSAGE(wait_metric(port, "triad_cluster_peers_up", 3),
                          "the front did not join its three peers: " << http_get(port, "/metrics"));
  }
  // agent_load against the front, its report in the scratch directory.
  std::string load(int sessions, int tokens, const std::string& report,
                   const std::string& command = "echo ran") const {
    return agent_load(port, sessions, tokens, s.path(report), command);
  }
  // Runs `load_command` in the background; `done` is written with its exit status at its end.
  void load_in_background(const std::string& load_command, const std::string& output,
                          const std::string& done) const {
    auto cmd = "(timeout 180 " + load_command + " > " + output + "; echo $? > " + done +
               ") > /dev/null 2>&1 &"; // nothing of it holds run_command's pipe
    BOOST_REQUIRE(run_command(cmd).status == 0);
  }
  // The first decode node (0: decode1, 1: decode2) seen with its decode0's `gauge` at `least`,
  // within a minute; -1 when none is.
  int first_decode_node(const std::string& gauge, double least) {
    const unsigned http[2] = {decode1.http_port(), decode2.http_port()};
    const auto series = gauge + "{device=\"decode0\"}";
    const auto until = std::chrono::steady_clock::now() + 60s;
    while (std::chrono::steady_clock::now() < until) {
      for (int i = 0; i < 2; ++i)
        if (sample(http_get(http[i], "/metrics"), series) >= least)
          return i;
      std::this_thread::sleep_for(5ms);
    }
    return -1;
  }
  // Waits up to `limit` for the background load's `done` file.
  static bool wait_done(const std::string& done, std::chrono::seconds limit = 170s) {
    const auto until = std::chrono::steady_clock::now() + limit;
    while (!fs::exists(done) && std::chrono::steady_clock::now() < until)
      std::this_thread::sleep_for(100ms);
    return fs::exists(done);
  }
};

double device_tokens(unsigned port, const std::string& device) {
  return sample(http_get(port, "/metrics"), "triad_device_tokens_total{device=\"" + device + "\"}");
}

} // namespace

BOOST_AUTO_TEST_SUITE(cluster_nodes)

BOOST_AUTO_TEST_CASE(agent_sessions_run_through_a_front_on_prefill_and_decode_nodes_over_tls) {
  cluster c;
  BOOST_TEST(slurp(c.s.path("d1.log")).find("(TLS)") != std::string::npos);
  auto r = run_command("timeout 120 " + c.load(12, 16, "run.json"));
  BOOST_REQUIRE_MESSAGE(r.status == 0, r.out);
  auto m = json::parse(slurp(c.s.path("run.json"))).at("metrics").as_object();
  BOOST_TEST(m.at("calls").as_int64() == 12);
  BOOST_TEST(m.at("calls_ok").as_int64() == 12, r.out);
  BOOST_TEST(m.at("server_tool_calls").as_int64() == 24);
  // The prompts were computed on the prefill node, the answers on the decode nodes.
  BOOST_TEST(device_tokens(c.prefill.http_port(), "prefill0") > 0);
  BOOST_TEST(device_tokens(c.decode1.http_port(), "decode0") +
                 device_tokens(c.decode2.http_port(), "decode0") >=
             12 * 16);
  // The front runs no device of its own.
  BOOST_TEST(device_tokens(c.port, "decode0") == -1);
  // The KV went from the prefill node to the decode nodes over the KV wire (UCX over TCP), not
  // through the front: the prefill node held each prompt's KV, the decode nodes fetched it.
  const auto p = http_get(c.prefill.http_port(), "/metrics");
  const auto d1 = http_get(c.decode1.http_port(), "/metrics");
  const auto d2 = http_get(c.decode2.http_port(), "/metrics");
  const auto held = sample(p, "triad_cluster_kv_held_total");
  BOOST_TEST(held >= 12, p);
  BOOST_TEST(sample(p, "triad_cluster_kv_wire_sent_bytes_total") > 0, p);
  BOOST_TEST(sample(d1, "triad_cluster_kv_wire_fetches_total") +
                     sample(d2, "triad_cluster_kv_wire_fetches_total") ==
                 held,
             d1 << d2);
  BOOST_TEST(sample(d1, "triad_cluster_kv_wire_fetch_failures_total") +
                     sample(d2, "triad_cluster_kv_wire_fetch_failures_total") ==
                 0,
             slurp(c.s.path("d1.log")) << slurp(c.s.path("d2.log")));
  BOOST_TEST(sample(d1, "triad_cluster_kv_wire_fetched_bytes_total") +
                     sample(d2, "triad_cluster_kv_wire_fetched_bytes_total") ==
                 sample(p, "triad_cluster_kv_wire_sent_bytes_total"),
             d1 << d2);
  BOOST_TEST(sample(p, "triad_cluster_kv_held_bytes") == 0, p); // nothing left waiting
}

// A front with devices of its own (`front_config`) and one device node of `role` as its peer:
// twelve agent sessions through the front, every one answered; then the KV of every hand-off
// went from the node that ran the prefill device to the one that ran the decode device over the
// KV wire: held there, fetched once each without a failure, the same bytes, nothing left held.
// `peer_config`: the peer's config file ("node.toml": sim devices, KV over TCP). `in_place`: all
// of the KV was fetched by copying it out of the holder's shared memory.
void hand_offs_cross_the_kv_wire(const scratch& s, const std::string& role,
                                 const std::string& front_config,
                                 const std::string& peer_config = "node.toml",
                                 bool in_place = false) {
  node_process peer{
      s, "peer", {"--role", role, "--cluster-port", "0", "--node-name", "peer"}, peer_config};
  node_process front{
      s, "front", {"--peers", "127.0.0.1:" + std::to_string(peer.cluster_port())}, front_config};
  const auto port = front.http_port();
  BOOST_REQUIRE_MESSAGE(wait_metric(port, "triad_cluster_peers_up", 1),
                        "the front did not join its peer: " << front.log());
  auto r = run_command("timeout 120 " + agent_load(port, 12, 16, s.path("run.json")));
  BOOST_REQUIRE_MESSAGE(r.status == 0, r.out);
  auto m = json::parse(slurp(s.path("run.json"))).at("metrics").as_object();
  BOOST_TEST(m.at("calls_ok").as_int64() == 12, r.out);
  const bool front_prefills = role == "decode";
  const auto f = http_get(port, "/metrics");
  const auto p = http_get(peer.http_port(), "/metrics");
  const auto& holder = front_prefills ? f : p;
  const auto& fetcher = front_prefills ? p : f;
  BOOST_TEST(sample(holder, "triad_device_tokens_total{device=\"prefill0\"}") > 0, holder);
  BOOST_TEST(sample(fetcher, "triad_device_tokens_total{device=\"decode0\"}") >= 12 * 16, fetcher);
  const auto held = sample(holder, "triad_cluster_kv_held_total");
  BOOST_TEST_MESSAGE((front_prefills ? "the front" : "the prefill node")
                     << " held " << held << " KV; "
                     << (front_prefills ? "the decode node" : "the front") << " fetched "
                     << sample(fetcher, "triad_cluster_kv_wire_fetched_bytes_total") << " bytes");
  BOOST_TEST(held >= 12, holder);
  BOOST_TEST(sample(fetcher, "triad_cluster_kv_wire_fetches_total") == held, fetcher);
  BOOST_TEST(sample(fetcher, "triad_cluster_kv_wire_fetch_failures_total") == 0, front.log()
                                                                                     << peer.log());
  BOOST_TEST(sample(fetcher, "triad_cluster_kv_wire_fetched_bytes_total") ==
                 sample(holder, "triad_cluster_kv_wire_sent_bytes_total"),
             holder << fetcher);
  BOOST_TEST(sample(holder, "triad_cluster_kv_held_bytes") == 0, holder); // nothing left held
  // A prefill node streams each hand-off into its KV store and holds the stream: the decode
  // device fetches its pages and attaches them. A front with peers hands its own devices' KV
  // over as bytes (held in its exchange).
  const auto handed =
      sample(fetcher, "triad_device_kv_handoff_fetched_tokens_total{device=\"decode0\"}");
  if (front_prefills)
    BOOST_TEST(handed == 0, fetcher);
  else
    BOOST_TEST(handed > 0, fetcher);
  const auto copied_in_place = sample(fetcher, "triad_cluster_kv_wire_in_place_bytes_total");
  if (in_place)
    BOOST_TEST(copied_in_place == sample(fetcher, "triad_cluster_kv_wire_fetched_bytes_total"),
               fetcher);
  else
    BOOST_TEST(copied_in_place == 0, fetcher);
}

// A front with a prefill device of its own (a whole node with a decode node as its peer): the
// KV its prefill device hands to the decode node waits in the front's exchange and crosses
// over the KV wire; the import order carries the reference, not the bytes.
BOOST_AUTO_TEST_CASE(a_front_with_its_own_prefill_device_sends_its_kv_over_the_kv_wire) {
  hand_offs_cross_the_kv_wire(scratch{}, "decode", "prefill.toml");
}

// A front with a decode device of its own and a prefill node as its peer: the prefill node holds
// each prompt's KV and the front's own device fetches it over the KV wire (through the front's
// fetcher) before it admits the import; the bytes do not come through the control messages.
BOOST_AUTO_TEST_CASE(a_front_with_its_own_decode_device_fetches_its_kv_over_the_kv_wire) {
  hand_offs_cross_the_kv_wire(scratch{}, "prefill", "decode.toml");
}

// Nodes of one machine on a shared-memory KV wire, cpu devices computing the tiny model (its KV
// of a prompt is hundreds of KiB): the front's prefill device's KV waits in the front's shared
// memory, and the decode node copies every byte of it out in place.
BOOST_AUTO_TEST_CASE(nodes_of_one_machine_copy_held_kv_out_of_shared_memory_in_place) {
  scratch s;
  const std::string cpu = "kv_wire = \"shared_memory\"\n[model]\npreset = \"tiny\"\n";
  auto device = [](const std::string& name, const std::string& role) {
    return "[[devices]]\nname = \"" + name + "\"\nbackend = \"cpu\"\nrole = \"" + role +
           "\"\nmemory_mib = 128\ncompute_cores = 1\n";
  };
  std::ofstream{s.dir / "cpu_prefill.toml"} << s.base << cpu << device("prefill0", "prefill");
  std::ofstream{s.dir / "cpu_decode.toml"} << s.base << cpu << device("decode0", "decode");
  hand_offs_cross_the_kv_wire(s, "decode", "cpu_prefill.toml", "cpu_decode.toml", true);
}

// A front, a prefill node and a decode node, cpu devices computing the tiny model: the prefill
// node streams each prompt's KV into its KV store, its exchange holds the stream, and the
// decode node fetches the pages over the KV wire and attaches them: the greedy answer is the
// one a single node gives (both devices in one process), and the decode device computed none of
// the prompt's tokens the pages hold.
BOOST_AUTO_TEST_CASE(a_prefill_nodes_store_pages_cross_to_the_decode_node_and_answer_alike) {
  scratch s;
  const std::string model = "[model]\npreset = \"tiny\"\n";
  auto device = [](const std::string& name, const std::string& role) {
    return "[[devices]]\nname = \"" + name + "\"\nbackend = \"cpu\"\nrole = \"" + role +
           "\"\nmemory_mib = 128\ncompute_cores = 1\n";
  };
  std::ofstream{s.dir / "front.toml"} << s.base << model;
  std::ofstream{s.dir / "cpu_prefill.toml"} << s.base << model << device("prefill0", "prefill");
  std::ofstream{s.dir / "cpu_decode.toml"} << s.base << model << device("decode0", "decode");
  std::ofstream{s.dir / "whole.toml"} << s.base << model << device("prefill0", "prefill")
                                      << device("decode0", "decode");
  const std::string prompt = "Count the pages of KV that cross from one node to the next, and "
                             "say what each one holds, once and in order, please.";
  std::string alone;
  {
    node_process whole{s, "whole", {}, "whole.toml"};
    alone = greedy_answer(whole.http_port(), prompt, 24);
  }
  BOOST_TEST_MESSAGE("one node's answer: " << alone);
  BOOST_REQUIRE(!alone.empty());
  node_process p1{s,
                  "p1",
                  {"--role", "prefill", "--cluster-port", "0", "--node-name", "p1"},
                  "cpu_prefill.toml"};
  node_process d1{
      s, "d1", {"--role", "decode", "--cluster-port", "0", "--node-name", "d1"}, "cpu_decode.toml"};
  const std::string peers = "127.0.0.1:" + std::to_string(p1.cluster_port()) +
                            ",127.0.0.1:" + std::to_string(d1.cluster_port());
  node_process front{s, "front", {"--role", "front", "--peers", peers}, "front.toml"};
  const auto port = front.http_port();
  BOOST_REQUIRE_MESSAGE(wait_metric(port, "triad_cluster_peers_up", 2),
                        "the front did not join its peers: " << front.log());
  BOOST_TEST(greedy_answer(port, prompt, 24) == alone);
  const auto p = http_get(p1.http_port(), "/metrics");
  const auto d = http_get(d1.http_port(), "/metrics");
  const std::string dev = "{device=\"decode0\"}";
  BOOST_TEST(sample(p, "triad_cluster_kv_held_total") == 1, p);
  BOOST_TEST(sample(d, "triad_cluster_kv_wire_kept_fetches_total") == 1, d);
  BOOST_TEST(sample(d, "triad_cluster_kv_wire_fetch_failures_total") == 0, d1.log());
  BOOST_TEST(sample(d, "triad_device_kv_kept_elsewhere_total" + dev) == 0, d1.log());
  // Every full page of the prompt and its partial last one: all but the token past them.
  const auto handed = sample(d, "triad_device_kv_handoff_fetched_tokens_total" + dev);
  const auto prefilled = sample(p, "triad_device_tokens_total{device=\"prefill0\"}");
  BOOST_TEST_MESSAGE("the prefill node computed " << prefilled << " tokens; the decode node "
                                                  << "attached " << handed << " of them");
  BOOST_TEST(handed > 0, d);
  BOOST_TEST(handed == prefilled, p << d);
  BOOST_TEST(sample(d, "triad_cluster_kv_wire_fetched_bytes_total") ==
                 sample(p, "triad_cluster_kv_wire_sent_bytes_total"),
             p << d);
  BOOST_TEST(sample(p, "triad_cluster_kv_held_bytes") == 0, p); // the stream let go once fetched
}

// A front, two prefill nodes and a decode node (cpu devices), one request per device at a time:
// a prompt computed on the first prefill node leaves its pages in that node's store (its
// hand-off's stream, sealed); prompts that continue it and land on the second prefill node (the
// first one is busy) fetch those pages from the first node's store, as the router's reply
// names it, instead of computing them; every answer is the one a single node gives.
BOOST_AUTO_TEST_CASE(a_prompts_pages_in_another_prefill_nodes_store_are_fetched_not_computed) {
  scratch s;
  const std::string model = "[model]\npreset = \"tiny\"\n";
  auto device = [](const std::string& name, const std::string& role) {
    return "[[devices]]\nname = \"" + name + "\"\nbackend = \"cpu\"\nrole = \"" + role +
           "\"\nmemory_mib = 128\ncompute_cores = 1\n";
  };
  std::ofstream{s.dir / "front.toml"} << s.base << model << "[orchestration]\ndevice_slots = 1\n";
  std::ofstream{s.dir / "cpu_prefill.toml"} << s.base << model << device("prefill0", "prefill");
  std::ofstream{s.dir / "cpu_decode.toml"} << s.base << model << device("decode0", "decode");
  std::ofstream{s.dir / "whole.toml"} << s.base << model << device("prefill0", "prefill")
                                      << device("decode0", "decode");
  const std::string start = "A long shared start that every prompt of this case begins with, so "
                            "that its pages are worth fetching from the node that has them: ";
  std::vector<std::string> prompts{start + "first."};
  for (const char* end : {"one more", "two more", "three more", "four more"})
    prompts.push_back(start + "first. And then " + end + ".");
  std::vector<std::string> alone;
  {
    node_process whole{s, "whole", {}, "whole.toml"};
    for (const auto& p : prompts)
      alone.push_back(greedy_answer(whole.http_port(), p, 8));
  }
  node_process p1{s,
                  "p1",
                  {"--role", "prefill", "--cluster-port", "0", "--node-name", "p1"},
                  "cpu_prefill.toml"};
  node_process p2{s,
                  "p2",
                  {"--role", "prefill", "--cluster-port", "0", "--node-name", "p2"},
                  "cpu_prefill.toml"};
  node_process d1{
      s, "d1", {"--role", "decode", "--cluster-port", "0", "--node-name", "d1"}, "cpu_decode.toml"};
  const std::string peers = "127.0.0.1:" + std::to_string(p1.cluster_port()) +
                            ",127.0.0.1:" + std::to_string(p2.cluster_port()) +
                            ",127.0.0.1:" + std::to_string(d1.cluster_port());
  node_process front{s, "front", {"--role", "front", "--peers", peers}, "front.toml"};
  const auto port = front.http_port();
  BOOST_REQUIRE_MESSAGE(wait_metric(port, "triad_cluster_peers_up", 3),
                        "the front did not join its peers: " << front.log());
  BOOST_TEST(greedy_answer(port, prompts[0], 8) == alone[0]); // on either prefill node
  std::vector<std::future<std::string>> answers;
  for (std::size_t i = 1; i < prompts.size(); ++i)
    answers.push_back(
        std::async(std::launch::async, [&, i] { return greedy_answer(port, prompts[i], 8); }));
  for (std::size_t i = 1; i < prompts.size(); ++i)
    BOOST_TEST(answers[i - 1].get() == alone[i], "prompt " << i);
  const auto m1 = http_get(p1.http_port(), "/metrics");
  const auto m2 = http_get(p2.http_port(), "/metrics");
  const std::string dev = "{device=\"prefill0\"}";
  auto both = [&](const std::string& name) { return sample(m1, name) + sample(m2, name); };
  const auto fetched = both("triad_device_kv_remote_prefix_tokens_total" + dev);
  BOOST_TEST_MESSAGE("the prefill nodes attached "
                     << sample(m1, "triad_device_kv_remote_prefix_tokens_total" + dev)
                     << " (p1) and "
                     << sample(m2, "triad_device_kv_remote_prefix_tokens_total" + dev)
                     << " (p2) prompt tokens from the other's store in "
                     << both("triad_cluster_kv_wire_prefix_fetches_total")
                     << " fetches; p1 computed " << sample(m1, "triad_device_tokens_total" + dev)
                     << " tokens, p2 " << sample(m2, "triad_device_tokens_total" + dev));
  BOOST_TEST(both("triad_cluster_kv_wire_prefix_fetches_total") > 0, m1 << m2);
  BOOST_TEST(fetched > 0, m1 << m2 << p1.log() << p2.log());
  BOOST_TEST(both("triad_cluster_kv_wire_fetch_failures_total") == 0, p1.log() << p2.log());
}

// A front with a prefill device (and so a KV store) of its own that demotes each request's KV
// at its tool calls, and two decode nodes: the decode device that computed a request's KV keeps
// it in its node's store, and the request resumes on a device of that store (the router prefers
// it), which reads the blocks back: no resume lands on the other node, where the tokens would be
// computed again.
BOOST_AUTO_TEST_CASE(a_demoted_request_resumes_on_the_decode_node_whose_store_keeps_its_kv) {
  scratch s;
  fs::copy_file(s.dir / "prefill.toml", s.dir / "front.toml");
  std::ofstream{s.dir / "front.toml", std::ios::app} << "[orchestration]\nkv = \"demote\"\n";
  node_process d1{
      s, "d1", {"--role", "decode", "--cluster-port", "0", "--node-name", "d1"}, "decode.toml"};
  node_process d2{
      s, "d2", {"--role", "decode", "--cluster-port", "0", "--node-name", "d2"}, "decode.toml"};
  const auto d1_port = d1.cluster_port();
  const auto d2_port = d2.cluster_port();
  const std::string peers =
      "127.0.0.1:" + std::to_string(d1_port) + ",127.0.0.1:" + std::to_string(d2_port);
  node_process front{s, "front", {"--peers", peers}, "front.toml"};
  const auto port = front.http_port();
  BOOST_REQUIRE_MESSAGE(wait_metric(port, "triad_cluster_peers_up", 2),
                        "the front did not join its peers: " << front.log());
  auto r = run_command("timeout 120 " + agent_load(port, 12, 16, s.path("run.json")));
  BOOST_REQUIRE_MESSAGE(r.status == 0, r.out);
  auto m = json::parse(slurp(s.path("run.json"))).at("metrics").as_object();
  BOOST_TEST(m.at("calls_ok").as_int64() == 12, r.out);
  const auto m1 = http_get(d1.http_port(), "/metrics");
  const auto m2 = http_get(d2.http_port(), "/metrics");
  auto both = [&](const std::string& name) { return sample(m1, name) + sample(m2, name); };
  const std::string dev = "{device=\"decode0\"}";
  // Two tool calls a session: each resume read its blocks back from the store that kept them.
  BOOST_TEST(both("triad_device_kv_tier_tokens_total" + dev) > 0, m1 << m2);
  BOOST_TEST(both("triad_device_kv_kept_elsewhere_total" + dev) == 0, m1 << m2);
  BOOST_TEST_MESSAGE("tokens read back from the store: d1 "
                     << sample(m1, "triad_device_kv_tier_tokens_total" + dev) << ", d2 "
                     << sample(m2, "triad_device_kv_tier_tokens_total" + dev));
  // The front's requests let go of each demotion's blocks (at the next one, or at their end)
  // through the device that kept them: the pins ended in the decode nodes' stores, not at
  // their time (2 x the tool deadline and 10 s, longer than this run).
  BOOST_TEST(both("triad_kv_pins_ended_total") > 0, m1 << m2);
  BOOST_TEST(both("triad_kv_pin_expiries_total") == 0, m1 << m2);
  BOOST_TEST_MESSAGE("pins ended by their requests: d1 "
                     << sample(m1, "triad_kv_pins_ended_total") << ", d2 "
                     << sample(m2, "triad_kv_pins_ended_total"));
}

// A whole node (its own prefill and decode device, its own KV store) demoting each request's
// KV at its tool calls, with a decode node as its peer, one request per device at a time: a
// resume whose store's device is busy goes to the other, which fetches the kept blocks from
// the store that keeps them over the KV wire (that node's exchange reads them from its store):
// none is computed again, and some crossed.
BOOST_AUTO_TEST_CASE(kept_blocks_of_a_demotion_cross_to_a_device_of_another_node) {
  scratch s;
  fs::copy_file(s.dir / "node.toml", s.dir / "front.toml");
  std::ofstream{s.dir / "front.toml", std::ios::app}
      << "[orchestration]\nkv = \"demote\"\ndevice_slots = 1\n";
  node_process d1{
      s, "d1", {"--role", "decode", "--cluster-port", "0", "--node-name", "d1"}, "decode.toml"};
  node_process front{
      s, "front", {"--peers", "127.0.0.1:" + std::to_string(d1.cluster_port())}, "front.toml"};
  const auto port = front.http_port();
  BOOST_REQUIRE_MESSAGE(wait_metric(port, "triad_cluster_peers_up", 1),
                        "the front did not join its peer: " << front.log());
  auto r = run_command("timeout 120 " + agent_load(port, 12, 16, s.path("run.json")));
  BOOST_REQUIRE_MESSAGE(r.status == 0, r.out);
  auto m = json::parse(slurp(s.path("run.json"))).at("metrics").as_object();
  BOOST_TEST(m.at("calls_ok").as_int64() == 12, r.out);
  const auto f = http_get(port, "/metrics");
  const auto d = http_get(d1.http_port(), "/metrics");
  const std::string dev = "{device=\"decode0\"}";
  auto both = [&](const std::string& name) { return sample(f, name) + sample(d, name); };
  const auto crossed = both("triad_cluster_kv_wire_kept_fetches_total");
  BOOST_TEST_MESSAGE("kept blocks fetched from the other node: the front "
                     << sample(f, "triad_cluster_kv_wire_kept_fetches_total") << ", d1 "
                     << sample(d, "triad_cluster_kv_wire_kept_fetches_total"));
  BOOST_TEST(both("triad_device_kv_kept_elsewhere_total" + dev) == 0, f << d);
  BOOST_TEST(both("triad_cluster_kv_wire_fetch_failures_total") == 0, front.log() << d1.log());
  BOOST_TEST(crossed > 0, f << d);
  // The fetched blocks were attached: their tokens came from another node's store.
  BOOST_TEST(both("triad_device_kv_kept_fetched_tokens_total" + dev) > 0, f << d);
  // Nodes that served kept blocks stop as operators stop them (their exchange's thread read
  // the store through a scoped actor of the cluster's system, which must not hold it up).
  BOOST_TEST(d1.stops_within(30s), d1.log());
  BOOST_TEST(front.stops_within(30s), front.log());
}

BOOST_AUTO_TEST_CASE(a_decode_node_killed_under_load_leaves_no_request_hanging_and_rejoins) {
  cluster c;
  // The load in the background; a decode node dies while it decodes for it.
  const auto report = c.s.path("load.txt");
  const auto done = c.s.path("load.done");
  // Long answers (the tiny model on simulated H200s decodes fast), so a node holds some at once.
  c.load_in_background(c.load(48, 1024, "run.json"), report, done);
  // The victim: the first decode node seen decoding two sequences at once (the router may
  // prefer either).
  const int victim = c.first_decode_node("triad_device_running", 2);
  BOOST_REQUIRE_MESSAGE(victim >= 0, "no decode node got decode work");
  (victim == 0 ? c.decode1 : c.decode2).kill();
  // The front notices at once (its connection closes) and routes to the other only.
  BOOST_TEST(wait_metric(c.port, "triad_cluster_peers_up", 2, 10s));
  // triad-load ends: every request was answered or failed, none hangs.
  BOOST_REQUIRE_MESSAGE(cluster::wait_done(done), "triad-load still runs: " << slurp(report));
  const auto out = slurp(report);
  auto m = json::parse(slurp(c.s.path("run.json"))).at("metrics").as_object();
  BOOST_TEST(m.at("calls").as_int64() == 48, out);
  std::int64_t failed = 0;
  for (const auto& [kind, n] : m.at("errors").as_object())
    failed += n.as_int64();
  BOOST_TEST(m.at("calls_ok").as_int64() + failed == 48, out);
  BOOST_TEST_MESSAGE("after the kill: " << m.at("calls_ok").as_int64() << " of 48 completed, "
                                        << failed << " failed with an error");
  const auto metrics = http_get(c.port, "/metrics");
  BOOST_TEST(sample(metrics, "triad_cluster_peers_lost_total") == 1, metrics);
  // The sequences the victim held moved to the other (device_failure = "retry", the default).
  BOOST_TEST(sample(metrics, "triad_request_device_retries_total") >= 1, metrics);
  // The node comes back on its port and joins again.
  node_process again{c.s,
                     "d1-again",
                     {"--role", "decode", "--cluster-port",
                      std::to_string(victim == 0 ? c.d1_port : c.d2_port), "--node-name",
                      victim == 0 ? "d1" : "d2"}};
  again.cluster_port();
  BOOST_TEST(wait_metric(c.port, "triad_cluster_peers_up", 3, 30s));
  auto r = run_command("timeout 60 " + c.load(6, 8, "after.json"));
  BOOST_TEST(r.status == 0, r.out);
}

BOOST_AUTO_TEST_CASE(a_draining_decode_node_moves_the_sequences_parked_there_off_and_leaves) {
  cluster c;
  node_process* decode[2] = {&c.decode1, &c.decode2};
  // Tool calls of a second: meanwhile each session's sequence waits parked on its decode node
  // (kv = "pin", the default).
  const auto report = c.s.path("load.txt");
  const auto done = c.s.path("load.done");
  c.load_in_background(c.load(12, 16, "run.json", "sleep 1; echo ran"), report, done);
  const int victim = c.first_decode_node("triad_device_parked", 1);
  BOOST_REQUIRE_MESSAGE(victim >= 0, "no sequence was parked on a decode node");
  // The operator stops it (SIGTERM): it drains, the front moving what is parked there off.
  decode[victim]->stop();
  const auto log = decode[victim]->log();
  BOOST_TEST(log.find("stopped (every request answered)") != std::string::npos, log);
  BOOST_REQUIRE_MESSAGE(cluster::wait_done(done), "triad-load still runs: " << slurp(report));
  auto m = json::parse(slurp(c.s.path("run.json"))).at("metrics").as_object();
  // Every session completed: nothing failed, nothing was computed again after a failure.
  BOOST_TEST(m.at("calls_ok").as_int64() == 12, slurp(report));
  BOOST_TEST(m.at("server_tool_calls").as_int64() == 24);
  const auto metrics = http_get(c.port, "/metrics");
  BOOST_TEST(sample(metrics, "triad_request_kv_moved_off_total") >= 1, metrics);
  BOOST_TEST_MESSAGE("the drain moved the KV of "
                     << sample(metrics, "triad_request_kv_moved_off_total")
                     << " parked sequences off the node");
  BOOST_TEST(sample(metrics, "triad_request_device_retries_total") == 0, metrics);
  // The moved-off KV crossed over the KV wire, not in the control messages: the draining node
  // held it until the front fetched it, and the front held it for the decode node each session
  // resumed on, which fetched it from there.
  const auto moved = sample(metrics, "triad_request_kv_moved_off_total");
  BOOST_TEST(sample(metrics, "triad_cluster_kv_wire_fetches_total") == moved, metrics);
  BOOST_TEST(sample(metrics, "triad_cluster_kv_wire_fetch_failures_total") == 0, metrics);
  BOOST_TEST(sample(metrics, "triad_cluster_kv_held_total") >= moved, metrics);
  BOOST_TEST(sample(metrics, "triad_cluster_kv_held_bytes") == 0, metrics);
  BOOST_TEST(sample(metrics, "triad_cluster_peers_drained_total") == 1, metrics);
  BOOST_TEST(sample(metrics, "triad_cluster_peers_lost_total") == 0, metrics);
  BOOST_TEST(sample(metrics, "triad_cluster_peers_up") == 2, metrics);
}

BOOST_AUTO_TEST_CASE(a_front_without_peers_and_an_open_device_node_without_tls_are_refused) {
  scratch s;
  auto front = run_command("timeout 30 " + binary("triad-node") + " --config " +
                           s.path("node.toml") + " --role front --port 0 2>&1");
  BOOST_TEST(front.status != 0);
  BOOST_TEST(front.out.find("role = \"front\" needs peers") != std::string::npos, front.out);
  std::ofstream{s.path("open.toml")} << "[cluster]\nlisten = \"0.0.0.0\"\n";
  auto open = run_command("timeout 30 " + binary("triad-node") + " --config " +
                          s.path("open.toml") + " --role decode --port 0 2>&1");
  BOOST_TEST(open.status == 2);
  BOOST_TEST(open.out.find("[cluster].tls is off") != std::string::npos, open.out);
}

BOOST_AUTO_TEST_CASE(a_front_is_ready_once_a_device_node_has_joined) {
  scratch s;
  node_process decode{s, "d1", {"--role", "decode", "--cluster-port", "0", "--node-name", "d1"}};
  const auto peer = "127.0.0.1:" + std::to_string(decode.cluster_port());
  // A front whose peer is not there: not ready, and a request is refused with the reason.
  node_process alone{s, "alone", {"--role", "front", "--peers", "127.0.0.1:1"}};
  const auto alone_port = std::to_string(alone.http_port());
  auto ready = triad::load::http_get("http://127.0.0.1:" + alone_port + "/ready");
  BOOST_REQUIRE(!ready);
  BOOST_TEST(ready.error().message.find("HTTP 503") != std::string::npos, ready.error().message);
  auto r =
      run_command("timeout 30 " + binary("triad-load") + " --url http://127.0.0.1:" + alone_port +
                  "/v1 --requests 1 --no-script --output-tokens fixed:4 2>&1");
  BOOST_TEST(r.status != 124, r.out); // answered, not held
  BOOST_TEST(r.out.find("errors: {\"http_503:no_device\":1}") != std::string::npos, r.out);
  // A front whose peer is there: ready once it joined.
  node_process front{s, "front", {"--role", "front", "--peers", peer}};
  const auto url = "http://127.0.0.1:" + std::to_string(front.http_port()) + "/ready";
  const auto until = std::chrono::steady_clock::now() + 30s;
  while (!triad::load::http_get(url) && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(50ms);
  BOOST_TEST(triad::load::http_get(url).has_value());
}

BOOST_AUTO_TEST_SUITE_END()
