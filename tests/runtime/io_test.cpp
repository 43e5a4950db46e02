#include <cerrno>
#include <string>
#include <thread>

#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <boost/test/unit_test.hpp>

#include "runtime/io.hpp"

namespace {

// A pipe whose ends close with the test.
struct test_pipe {
  test_pipe() { BOOST_REQUIRE(::pipe(fds) == 0); }
  ~test_pipe() {
    for (int fd : fds)
      if (fd >= 0)
        ::close(fd);
  }
  void close_read_end() {
    ::close(fds[0]);
    fds[0] = -1;
  }
  int fds[2] = {-1, -1};
};

bool sigpipe_pending() {
  sigset_t pending;
  sigemptyset(&pending);
  sigpending(&pending);
  return sigismember(&pending, SIGPIPE) == 1;
}

} // namespace

BOOST_AUTO_TEST_SUITE(io)

BOOST_AUTO_TEST_CASE(every_byte_goes_through_a_pipe_larger_than_its_buffer) {
  test_pipe p;
  std::string sent(1 << 20, 'x'); // more than a pipe holds: the writes come back short
  for (std::size_t i = 0; i < sent.size(); ++i)
    sent[i] = static_cast<char>('a' + i % 26);
  std::string got(sent.size(), '\0');
  bool read_ok = false;
  std::thread reader{[&] { read_ok = triad::read_all(p.fds[0], got.data(), got.size()); }};
  BOOST_TEST(triad::write_all(p.fds[1], sent.data(), sent.size()));
  reader.join();
  BOOST_TEST(read_ok);
  BOOST_TEST((got == sent));
}

BOOST_AUTO_TEST_CASE(writing_to_a_pipe_whose_reader_has_gone_fails_with_epipe_not_a_signal) {
  // With SIGPIPE's default action this test process would end here.
  test_pipe p;
  p.close_read_end();
  std::string data = "to a server that exited";
  errno = 0;
  BOOST_TEST(!triad::write_all(p.fds[1], data.data(), data.size()));
  BOOST_TEST(errno == EPIPE);
  BOOST_TEST(!sigpipe_pending()); // the write's signal was taken, not left for later
  errno = 0;
  BOOST_TEST(triad::write_no_sigpipe(p.fds[1], data.data(), data.size()) == -1);
  BOOST_TEST(errno == EPIPE);
  // The thread's signal mask is as it was: SIGPIPE not blocked.
  sigset_t mask;
  pthread_sigmask(SIG_SETMASK, nullptr, &mask);
  BOOST_TEST(sigismember(&mask, SIGPIPE) == 0);
}

BOOST_AUTO_TEST_SUITE_END()
