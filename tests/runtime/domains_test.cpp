#include <atomic>
#include <filesystem>
#include <fstream>
#include <future>
#include <string>
#include <thread>

#include <sched.h>

#include <boost/test/unit_test.hpp>
#include <caf/all.hpp>

#include "actors/node_config.hpp"
#include "runtime/domains.hpp"
#include "tests/printers.hpp"
#include "tests/runtime/test_support.hpp"

namespace {

struct two_domains {
  two_domains() {
    auto t = triad::topology::load_synthetic("pack:1 numa:2 core:2 pu:1");
    BOOST_REQUIRE(t.has_value());
    topo = std::make_unique<triad::topology>(std::move(t).value());
    triad::node_config config;
    config.tools.cores = 1;
    auto p = triad::make_plan(topo->info(), config);
    BOOST_REQUIRE(p.has_value());
    auto s = triad::domain_set::start(*topo, *p, config.scheduler, false);
    BOOST_REQUIRE_MESSAGE(s.has_value(), (s ? "" : s.error().message));
    set = std::move(s).value();
  }
  std::unique_ptr<triad::topology> topo;
  std::unique_ptr<triad::domain_set> set;
};

// Where the handlers of an actor ran: executions on its home domain and elsewhere.
struct run_counts {
  std::atomic<int> home{0};
  std::atomic<int> off_home{0};
  void record(int expected) {
    (triad::current_domain() == expected ? home : off_home).fetch_add(1);
  }
};

template<class Self>
caf::behavior echo(Self*, run_counts* counts, int home) {
  return {[=](int x) {
    counts->record(home);
    return x;
  }};
}

// Sends `rounds` requests one after another and records where each response ran.
class round_tripper : public triad::homed_actor {
public:
  round_tripper(caf::actor_config& cfg, caf::actor target, int rounds, run_counts* counts, int home,
                std::promise<void>* done)
      : triad::homed_actor(cfg)
      , target_(std::move(target))
      , left_(rounds)
      , counts_(counts)
      , home_(home)
      , done_(done) {}

  caf::behavior make_behavior() override {
    step();
    return {[](int) {}};
  }

private:
  void step() {
    if (left_-- == 0) {
      done_->set_value();
      quit();
      return;
    }
    request(target_, caf::infinite, left_).then([this](int) {
      counts_->record(home_);
      step();
    });
  }

  caf::actor target_;
  int left_;
  run_counts* counts_;
  int home_;
  std::promise<void>* done_;
};

// Where the handlers of a round-trip run executed, read after it finished.
struct placement_counts {
  int server_home = 0;
  int server_off_home = 0;
  int client_home = 0;
  int client_off_home = 0;
};

// Runs 2000 round trips from a homed client in domain 0 to an `Echo` server in domain 1.
template<class Echo>
placement_counts round_trips_across(triad::domain_set& set) {
  auto d0 = set.find(0u);
  auto d1 = set.find(1u);
  BOOST_REQUIRE(d0 && d1);
  run_counts server, client;
  std::promise<void> done;
  auto target = (*d1)->spawn(echo<Echo>, &server, 1);
  (*d0)->spawn<round_tripper>(target, 2000, &client, 0, &done);
  BOOST_REQUIRE(done.get_future().wait_for(std::chrono::seconds{60}) == std::future_status::ready);
  return {server.home.load(), server.off_home.load(), client.home.load(), client.off_home.load()};
}

} // namespace

BOOST_AUTO_TEST_SUITE(domains)

BOOST_FIXTURE_TEST_CASE(homed_actors_never_run_off_their_home_domain, two_domains) {
  auto counts = round_trips_across<triad::homed_actor>(*set);
  BOOST_TEST(counts.server_home == 2000);
  BOOST_TEST(counts.server_off_home == 0);
  BOOST_TEST(counts.client_home == 2000);
  BOOST_TEST(counts.client_off_home == 0);
}

// The control for the test above: plain CAF actors do run on the sender's domain, which is
// what the homed mixin prevents.
BOOST_FIXTURE_TEST_CASE(plain_caf_actors_run_on_the_senders_domain, two_domains) {
  auto counts = round_trips_across<caf::event_based_actor>(*set);
  BOOST_TEST(counts.server_off_home > 0);
}

BOOST_FIXTURE_TEST_CASE(domains_are_found_by_id_name_and_role, two_domains) {
  BOOST_TEST((*set->find("orchestration"))->id() == 0u);
  BOOST_TEST((*set->find("tools"))->id() == 1u);
  BOOST_TEST((*set->find("domain1"))->id() == 1u);
  auto missing = set->find("domain9");
  BOOST_REQUIRE(!missing);
  BOOST_TEST(missing.error().message.find("domain9") != std::string::npos);
  BOOST_TEST(missing.error().message.find("domain0, domain1") != std::string::npos);
  BOOST_TEST(!set->find(7u));
  BOOST_TEST(!set->find("device:nope"));
}

BOOST_FIXTURE_TEST_CASE(spawn_in_a_named_domain_runs_there, two_domains) {
  run_counts counts;
  auto target = set->spawn_in<caf::event_based_actor>("tools");
  BOOST_REQUIRE(target.has_value());
  auto echo1 = (*set->find("tools"))->spawn(echo<triad::homed_actor>, &counts, 1);
  caf::scoped_actor self{set->orchestration().system()};
  for (int i = 0; i < 10; ++i)
    self->request(echo1, caf::infinite, i)
        .receive([&](int x) { BOOST_TEST(x == i); }, [&](caf::error&) { BOOST_FAIL("no reply"); });
  BOOST_TEST(counts.home.load() == 10);
  BOOST_TEST(counts.off_home.load() == 0);
}

BOOST_FIXTURE_TEST_CASE(stop_exits_every_spawned_actor_and_joins, two_domains) {
  std::atomic<int> exited{0};
  for (auto& d : set->all()) {
    for (int i = 0; i < 5; ++i) {
      auto a = d->spawn([](triad::homed_actor*) -> caf::behavior { return {[](int) {}}; });
      caf::actor_cast<caf::abstract_actor*>(a)->attach_functor(
          [&](const caf::error&) { ++exited; });
    }
  }
  BOOST_TEST(set->stop(std::chrono::seconds{10}) == 0u);
  BOOST_TEST(exited.load() == 10);
  // Stopping twice is harmless.
  BOOST_TEST(set->stop() == 0u);
}

BOOST_FIXTURE_TEST_CASE(finished_actors_are_not_kept_for_stop, two_domains) {
  // A node spawns actors per request; the list stop() works from must not keep every one
  // (each kept address would keep its actor's memory until the node stops).
  auto& d = set->orchestration();
  auto baseline = d.system().registry().running();
  for (int batch = 0; batch < 10; ++batch) {
    for (int i = 0; i < 500; ++i)
      d.spawn([](triad::homed_actor* self) -> caf::behavior {
        self->quit();
        return {[](int) {}};
      });
    while (d.system().registry().running() > baseline)
      std::this_thread::sleep_for(std::chrono::milliseconds{1});
  }
  BOOST_TEST(d.tracked() <= triad::defaults::scheduler::tracked_prune_min);
  BOOST_TEST(set->stop(std::chrono::seconds{10}) == 0u);
}

BOOST_FIXTURE_TEST_CASE(an_actor_spawning_into_another_domain_does_not_block_its_shutdown,
                        two_domains) {
  // CAF 0.17's spawn leaves the spawning thread holding the target system's logger; a domain
  // thread that kept it would make the target's shutdown wait forever (ctest's timeout fails
  // this case then).
  auto& orch = set->orchestration();
  triad::domain* other = nullptr;
  for (auto& d : set->all())
    if (d.get() != &orch)
      other = d.get();
  BOOST_REQUIRE(other != nullptr);
  auto spawner = orch.spawn([other](triad::homed_actor*) -> caf::behavior {
    return {[other](int n) {
      for (int i = 0; i < n; ++i)
        other->spawn([](triad::homed_actor*) -> caf::behavior { return {[](int) {}}; });
      return n;
    }};
  });
  {
    caf::scoped_actor self{orch.system()};
    for (int round = 0; round < 20; ++round)
      self->request(spawner, caf::infinite, 5)
          .receive([](int) {}, [](caf::error&) { BOOST_FAIL("no reply"); });
  }
  BOOST_TEST(set->stop(std::chrono::seconds{10}) == 0u);
}

BOOST_AUTO_TEST_CASE(a_domain_runs_the_plans_worker_count_unless_the_config_sets_one) {
  auto t = triad::topology::load_synthetic("numa:1 core:2 pu:1");
  BOOST_REQUIRE(t.has_value());
  triad::node_config config;
  config.tools.cores = 1;
  triad::device_config a, b;
  a.name = "a";
  b.name = "b";
  config.devices = {a, b}; // a driver on each core: the plan gives one worker
  auto p = triad::make_plan(t->info(), config);
  BOOST_REQUIRE(p.has_value());
  BOOST_REQUIRE(p->domains[0].worker_threads == 1u);
  auto workers = [&](std::size_t threads_per_domain) {
    auto sched = config.scheduler;
    sched.threads_per_domain = threads_per_domain;
    auto s = triad::domain_set::start(*t, *p, sched, false);
    BOOST_REQUIRE_MESSAGE(s.has_value(), (s ? "" : s.error().message));
    auto n = (*s)->orchestration().system().scheduler().num_workers();
    (*s)->stop(std::chrono::seconds{10});
    return n;
  };
  BOOST_TEST(workers(0) == 1u); // the plan's
  BOOST_TEST(workers(2) == 2u); // the config's
}

BOOST_AUTO_TEST_CASE(actors_bouncing_messages_do_not_starve_others_on_their_worker) {
  // One worker: two actors hand a message back and forth without end, each hand-off waking the
  // other on the same worker. A message to a third actor must still be served.
  triad::scheduler_config sched;
  sched.threads_per_domain = 1;
  triad::domain d{0, {0}, nullptr, sched};
  auto running = std::make_shared<std::atomic<bool>>(true);
  auto bouncer = [running](triad::homed_actor* self) -> caf::behavior {
    return {[self, running](caf::actor& peer) {
      if (running->load())
        self->send(peer, caf::actor_cast<caf::actor>(self));
    }};
  };
  auto a = d.spawn(bouncer);
  auto b = d.spawn(bouncer);
  caf::anon_send(a, b);
  std::promise<void> served;
  auto third = d.spawn([&served](triad::homed_actor*) -> caf::behavior {
    return {[&served](int) { served.set_value(); }};
  });
  caf::anon_send(third, 1);
  auto ok = served.get_future().wait_for(std::chrono::seconds{20}) == std::future_status::ready;
  running->store(false);
  BOOST_TEST(ok);
  BOOST_TEST(d.stop(std::chrono::seconds{5}) == 0u);
}

BOOST_AUTO_TEST_CASE(a_domain_spreads_independent_actors_over_its_workers) {
  // Two workers, two actors that each block their worker until both have started: served one
  // after the other on one worker, they would wait forever.
  triad::scheduler_config sched;
  sched.threads_per_domain = 2;
  triad::domain d{0, {0, 1}, nullptr, sched};
  auto started = std::make_shared<std::atomic<int>>(0);
  auto told = std::make_shared<std::atomic<bool>>(false);
  auto both = std::make_shared<std::promise<bool>>();
  auto waiter = [started, told, both](triad::homed_actor*) -> caf::behavior {
    return {[started, told, both](int) {
      started->fetch_add(1);
      // Gives up after 20 s; the test waits 10 s, so serving them in turn fails it.
      auto until = std::chrono::steady_clock::now() + std::chrono::seconds{20};
      while (started->load() < 2 && std::chrono::steady_clock::now() < until)
        std::this_thread::yield();
      if (started->load() == 2 && !told->exchange(true))
        both->set_value(true);
    }};
  };
  auto x = d.spawn(waiter);
  auto y = d.spawn(waiter);
  caf::anon_send(x, 1);
  caf::anon_send(y, 1);
  auto got = both->get_future();
  BOOST_TEST((got.wait_for(std::chrono::seconds{10}) == std::future_status::ready && got.get()));
  BOOST_TEST(d.stop(std::chrono::seconds{30}) == 0u);
}

// Sets a promise when destroyed: tells the test that an actor's memory was released.
struct on_release {
  std::shared_ptr<std::promise<void>> released;
  ~on_release() {
    if (released)
      released->set_value();
  }
};

// The voluntary context switches of this process's thread named `name` (the first one found),
// from /proc/self/task/*/status; -1 if there is none.
long voluntary_switches_of(const std::string& name) {
  for (const auto& task : std::filesystem::directory_iterator{"/proc/self/task"}) {
    std::ifstream comm{task.path() / "comm"};
    std::string n;
    std::getline(comm, n);
    if (n != name)
      continue;
    std::ifstream status{task.path() / "status"};
    for (std::string line; std::getline(status, line);)
      if (line.rfind("voluntary_ctxt_switches:", 0) == 0)
        return std::stol(line.substr(line.find(':') + 1));
  }
  return -1;
}

// Waits an hour for a message, or ends on an int; tells `released` when its memory goes.
class patient_actor : public triad::homed_actor {
public:
  patient_actor(caf::actor_config& cfg, std::shared_ptr<std::promise<void>> released)
      : triad::homed_actor(cfg)
      , guard_{std::move(released)} {}

  caf::behavior make_behavior() override {
    return {[this](int) { quit(); }, caf::after(std::chrono::seconds{3600}) >> [] {}};
  }

private:
  on_release guard_;
};

BOOST_AUTO_TEST_CASE(an_ending_actor_with_a_pending_timeout_is_released) {
  // A receive timeout an hour away keeps a reference to its actor in the clock thread's
  // schedule; when the actor ends, the clock must be told, or the actor's memory stays taken
  // for that hour.
  triad::scheduler_config sched;
  sched.threads_per_domain = 1;
  triad::domain d{0, {0}, nullptr, sched};
  auto released = std::make_shared<std::promise<void>>();
  auto done = released->get_future();
  auto a = d.spawn<patient_actor>(released);
  caf::anon_send(a, 1);
  a = nullptr;
  BOOST_TEST((done.wait_for(std::chrono::seconds{10}) == std::future_status::ready));
  BOOST_TEST(d.stop(std::chrono::seconds{5}) == 0u);
}

BOOST_AUTO_TEST_CASE(actors_without_timeouts_end_without_waking_the_clock_thread) {
  // A request actor lives for one LLM call and sets no timeout; its end must not cost a
  // wake-up of CAF's clock thread (CAF 0.17 sends every ending actor's cancellation there).
  triad::scheduler_config sched;
  sched.threads_per_domain = 1;
  triad::domain d{0, {0}, nullptr, sched};
  auto before = voluntary_switches_of("caf.clock");
  BOOST_REQUIRE(before >= 0);
  constexpr int actors = 200;
  for (int i = 0; i < actors; ++i) {
    auto released = std::make_shared<std::promise<void>>();
    auto done = released->get_future();
    auto a = d.spawn([released](triad::homed_actor* self) -> caf::behavior {
      auto guard = std::make_shared<on_release>(released);
      return {[self, guard](int) { self->quit(); }};
    });
    caf::anon_send(a, 1);
    a = nullptr;
    BOOST_REQUIRE((done.wait_for(std::chrono::seconds{10}) == std::future_status::ready));
  }
  auto woken = voluntary_switches_of("caf.clock") - before;
  BOOST_TEST_MESSAGE("clock thread woken " << woken << " times for " << actors << " actors");
  BOOST_TEST(woken < actors / 10);
  BOOST_TEST(d.stop(std::chrono::seconds{5}) == 0u);
}

BOOST_AUTO_TEST_CASE(threads_bind_to_the_domain_cpus_on_this_machine) {
  auto topo = triad::topology::load_machine();
  BOOST_REQUIRE(topo.has_value());
  std::vector<unsigned> cpus{topo->info().domains.front().cpus.front()};
  triad::scheduler_config sched;
  sched.threads_per_domain = 1;
  triad::domain d{topo->info().domains.front().id, cpus, &*topo, sched};
  BOOST_TEST(d.bound());
  auto probe = d.spawn([](triad::homed_actor*) -> caf::behavior {
    return {[](int) { return triad::test::this_thread_cpus(); }};
  });
  {
    caf::scoped_actor self{d.system()};
    self->request(probe, caf::infinite, 0)
        .receive(
            [&](const std::vector<int>& got) {
              BOOST_TEST(got == std::vector<int>{static_cast<int>(cpus.front())});
            },
            [&](caf::error&) { BOOST_FAIL("no reply"); });
  }
  BOOST_TEST(d.bind_failures() == 0u);
  BOOST_TEST(d.stop(std::chrono::seconds{5}) == 0u);
}

BOOST_AUTO_TEST_SUITE_END()
