// Escapes tried through a running node: a client's scripted calls to the hosted shell and
// file_read try to read host files, write outside the sandbox, hold memory, processes and disk,
// block on a FIFO, reach the network, read the node's environment, signal or trace host
// processes, mount, and leave processes behind. Every one must be contained, and the node must
// answer a plain request after each.

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <boost/json/serialize.hpp>
#include <boost/test/unit_test.hpp>

#include "actors/chat.hpp"
#include "actors/node.hpp"
#include "tests/actors/support.hpp"
#include "tests/tools/test_support.hpp"
#include "tools/builtin.hpp"

namespace fs = std::filesystem;
using namespace std::chrono_literals;

namespace {

// A node hosting shell and file_read over a fresh tools root (which holds a FIFO), and a
// marker file on the host outside it.
struct escape_fixture {
  fs::path root = fs::temp_directory_path() / ("triad-escape-root-" + std::to_string(::getpid()));
  fs::path outside =
      fs::temp_directory_path() / ("triad-escape-outside-" + std::to_string(::getpid()));
  const std::string secret = "host-secret-" + std::to_string(::getpid());
  std::unique_ptr<triad::node> node;

  escape_fixture() {
    fs::create_directories(root);
    fs::create_directories(outside);
    std::ofstream{outside / "secret.txt"} << secret << "\n";
    std::ofstream{root / "notes.txt"} << "notes\n";
    BOOST_REQUIRE(::mkfifo((root / "pipe").c_str(), 0644) == 0);
    ::setenv("TRIAD_ESCAPE_MARKER", secret.c_str(), 1);
    auto tools = std::make_shared<triad::tool_registry>();
    auto hosted = triad::add_hosted_tools(*tools, {"shell", "file_read"}, root);
    BOOST_REQUIRE_MESSAGE(hosted.has_value(), (hosted ? "" : hosted.error().message));
    auto config = triad::default_config();
    config.topology.bind_threads = false;
    for (auto& d : config.devices)
      d.memory_mib = 256;
    triad::node_options opts;
    opts.tools = tools;
    auto n = triad::node::start(config, opts);
    BOOST_REQUIRE_MESSAGE(n.has_value(), (n ? "" : n.error().message));
    node = std::move(*n);
  }
  ~escape_fixture() {
    node.reset();
    ::unsetenv("TRIAD_ESCAPE_MARKER");
    std::error_code ec;
    fs::remove_all(root, ec);
    fs::remove_all(outside, ec);
  }

  // Runs one call of `tool` with `arguments` through the node; returns the tool's result as
  // the model saw it. Then checks that the node still answers a plain request.
  std::string call(const std::string& tool, const boost::json::object& arguments) {
    triad::chat_request r;
    r.messages = {{"user", "Try it."}};
    triad::generation_script s;
    s.turns.push_back({2, triad::tool_call_text{tool, boost::json::serialize(arguments)}});
    s.turns.push_back({2, std::nullopt});
    r.max_tokens = triad::script_length(s) + 64;
    r.script = s;
    triad::test::recorder rec;
    node->submit(std::move(r), rec.callback());
    const auto& end = rec.wait();
    BOOST_TEST_MESSAGE(tool << " " << boost::json::serialize(arguments) << " -> "
                            << (end.kind == triad::request_event::done ? "done" : "error") << " "
                            << end.message);
    std::string result;
    for (const auto& e : rec.events)
      if (e.kind == triad::request_event::tool_result)
        result = e.tool_output;
    BOOST_TEST_MESSAGE("result: " << result.substr(0, 1500));
    serving();
    return result;
  }
  std::string shell(const std::string& command) { return call("shell", {{"command", command}}); }

  // A plain request is answered.
  void serving() {
    triad::chat_request r;
    r.messages = {{"user", "Still there?"}};
    r.max_tokens = 3;
    triad::test::recorder rec;
    node->submit(std::move(r), rec.callback());
    BOOST_TEST(rec.wait().kind == triad::request_event::done);
  }
};

bool contains(const std::string& text, const std::string& what) {
  return text.find(what) != std::string::npos;
}

// Host processes whose command line contains `what`.
int host_processes_with(const std::string& what) {
  int found = 0;
  for (const auto& entry : fs::directory_iterator{"/proc"}) {
    auto name = entry.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos)
      continue;
    std::ifstream in{entry.path() / "cmdline"};
    std::string cmd((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::replace(cmd.begin(), cmd.end(), '\0', ' ');
    found += contains(cmd, what);
  }
  return found;
}

} // namespace

BOOST_FIXTURE_TEST_SUITE(escapes, escape_fixture)

BOOST_AUTO_TEST_CASE(host_files_cannot_be_read) {
  auto out = shell(
      "cat " + (outside / "secret.txt").string() +
      "; cat /etc/passwd; ls / /etc; cat /etc/hostname /etc/shadow; ls /home /root /var /opt /srv");
  BOOST_TEST(!contains(out, secret));
  BOOST_TEST(!contains(out, "daemon:"));       // the host's passwd has it, the sandbox's not
  BOOST_TEST(contains(out, "nobody:x:65534")); // the sandbox's own
  BOOST_TEST(contains(out, "No such file or directory"));
  auto via_read =
      call("file_read", {{"path", "../" + outside.filename().string() + "/secret.txt"}});
  BOOST_TEST(!contains(via_read, secret));
}

BOOST_AUTO_TEST_CASE(only_a_minimal_usr_is_there) {
  // Programs and libraries; nothing the operator installed or documented.
  auto out = shell("ls /usr; ls /usr/local /usr/share /usr/src 2>&1 | head -3");
  BOOST_TEST(contains(out, "bin\n"));
  BOOST_TEST(contains(out, "lib\n"));
  BOOST_TEST(!contains(out, "share\n"));
  BOOST_TEST(!contains(out, "local\n"));
  BOOST_TEST(contains(out, "No such file or directory"));
}

BOOST_AUTO_TEST_CASE(nothing_outside_work_and_tmp_is_writable) {
  const std::string marker = "triad-escape-" + std::to_string(::getpid());
  auto out = shell("for d in / /usr /usr/bin /etc /dev /proc; do echo x > $d/" + marker +
                   " && echo WROTE $d; done; mkdir -p /run/lock && echo x > /run/lock/" + marker +
                   " && echo WROTE /run/lock; echo x > /work/ok && echo work-ok");
  BOOST_TEST(!contains(out, "WROTE"));
  BOOST_TEST(contains(out, "work-ok"));
  for (const char* d : {"/", "/usr", "/usr/bin", "/etc", "/run/lock", "/tmp", "/var/tmp"})
    BOOST_TEST(!fs::exists(fs::path{d} / marker), d);
}

BOOST_AUTO_TEST_CASE(the_work_directory_is_a_capped_tmpfs_off_the_host_disk) {
  auto out = shell("for i in 1 2 3 4 5 6; do head -c 15M /dev/zero > f$i || echo FULL; done; "
                   "du -sm /work | cut -f1; grep ' /work ' /proc/self/mountinfo");
  BOOST_TEST(contains(out, "No space left on device"));
  BOOST_TEST(contains(out, "tmpfs"));
  BOOST_TEST(!contains(out, root.string()));
}

BOOST_AUTO_TEST_CASE(mountinfo_shows_no_host_path) {
  auto out = shell("cat /proc/self/mountinfo");
  BOOST_TEST(contains(out, " / ")); // it was read
  BOOST_TEST(!contains(out, root.string()));
  BOOST_TEST(!contains(out, fs::temp_directory_path().string() + "/triad"));
  BOOST_TEST(!contains(out, "/home"));
}

BOOST_AUTO_TEST_CASE(the_memory_of_a_call_is_capped_in_total) {
  // Four processes of 700 MiB each: within the per-process address space, past the call's
  // total.
  auto out = shell("for i in 1 2 3 4; do (head -c 700M /dev/zero | tail > /dev/null; "
                   "echo tail$i=$?) & done; wait; cat /proc/self/cgroup");
  if (contains(out, "tail1=0") && contains(out, "tail2=0") && contains(out, "tail3=0") &&
      contains(out, "tail4=0"))
    BOOST_ERROR("four 700 MiB processes all ran: no total memory cap (see the warnings)");
}

BOOST_AUTO_TEST_CASE(processes_of_a_call_are_capped) {
  // 200 background processes: forks fail past pids.max 64 (or RLIMIT_NPROC 32 as root).
  auto out = shell("for ((i=0;i<200;i++)); do sleep 5 & done; echo spawned-all");
  BOOST_TEST(!contains(out, "spawned-all"));
  BOOST_TEST(contains(out, "Resource temporarily unavailable"));
}

BOOST_AUTO_TEST_CASE(a_fifo_does_not_block_file_read) {
  auto start = std::chrono::steady_clock::now();
  auto out = call("file_read", {{"path", "pipe"}});
  BOOST_TEST(contains(out, "FIFO"));
  BOOST_TEST((std::chrono::steady_clock::now() - start < 10s));
}

BOOST_AUTO_TEST_CASE(the_network_is_unreachable_even_on_loopback) {
  triad::test::loopback_listener listener;
  auto out = shell("exec 3<>/dev/tcp/127.0.0.1/" + std::to_string(listener.port) +
                   " && echo CONNECTED; exec 4<>/dev/tcp/1.1.1.1/80 && echo CONNECTED");
  BOOST_TEST(!contains(out, "CONNECTED"));
}

BOOST_AUTO_TEST_CASE(the_nodes_environment_is_not_visible) {
  auto out = shell("env; cat /proc/1/environ");
  BOOST_TEST(!contains(out, secret));
  BOOST_TEST(!contains(out, "TRIAD_ESCAPE_MARKER"));
  BOOST_TEST(contains(out, "PATH="));
}

BOOST_AUTO_TEST_CASE(host_processes_cannot_be_signalled_or_traced) {
  const auto me = std::to_string(::getpid());
  auto out = shell("kill -9 " + me + " && echo KILLED; kill -9 -1; ls /proc/" + me +
                   " && echo SEEN; ls /proc | grep -c '^[0-9]'");
  BOOST_TEST(::kill(::getpid(), 0) == 0);
  BOOST_TEST(!contains(out, "KILLED"));
  BOOST_TEST(!contains(out, "SEEN"));
}

BOOST_AUTO_TEST_CASE(mounts_and_new_namespaces_are_refused) {
  auto out = shell("mkdir -p /work/m; mount -t tmpfs none /work/m && echo MOUNTED; "
                   "unshare -r true && echo UNSHARED; unshare -m true && echo UNSHARED");
  BOOST_TEST(!contains(out, "MOUNTED"));
  BOOST_TEST(!contains(out, "UNSHARED"));
}

BOOST_AUTO_TEST_CASE(no_process_outlives_its_call) {
  auto out = shell("(sleep 301 &); setsid sleep 302 & disown; nohup sleep 303 >/dev/null 2>&1 & "
                   "echo started");
  BOOST_TEST(contains(out, "started"));
  std::this_thread::sleep_for(300ms);
  BOOST_TEST(host_processes_with("sleep 301") == 0);
  BOOST_TEST(host_processes_with("sleep 302") == 0);
  BOOST_TEST(host_processes_with("sleep 303") == 0);
}

BOOST_AUTO_TEST_SUITE_END()
