#include <cmath>

#include <boost/test/unit_test.hpp>

#include "load/stats.hpp"

BOOST_AUTO_TEST_SUITE(stats)

// Expected values worked by hand with numpy's "linear" definition: h = q (n - 1).
BOOST_AUTO_TEST_CASE(quantiles_interpolate_between_the_closest_ranks) {
  std::vector<double> x = {1, 2.5, 3, 7, 15, 20, 35, 40, 50, 100};
  BOOST_TEST(triad::load::quantile(x, 0.0) == 1.0);
  BOOST_TEST(triad::load::quantile(x, 0.25) == 4.0, boost::test_tools::tolerance(1e-12));
  BOOST_TEST(triad::load::quantile(x, 0.5) == 17.5, boost::test_tools::tolerance(1e-12));
  BOOST_TEST(triad::load::quantile(x, 0.9) == 55.0, boost::test_tools::tolerance(1e-12));
  BOOST_TEST(triad::load::quantile(x, 0.95) == 77.5, boost::test_tools::tolerance(1e-12));
  BOOST_TEST(triad::load::quantile(x, 0.99) == 95.5, boost::test_tools::tolerance(1e-12));
  BOOST_TEST(triad::load::quantile(x, 1.0) == 100.0);
  BOOST_TEST(std::isnan(triad::load::quantile({}, 0.5)));
  BOOST_TEST(triad::load::quantile({42}, 0.99) == 42.0);
}

BOOST_AUTO_TEST_CASE(a_summary_sorts_and_reports_every_percentile) {
  std::vector<double> x;
  for (int i = 1000; i >= 1; --i) // 1..1000, given in reverse
    x.push_back(i);
  auto d = triad::load::summarize(x);
  BOOST_TEST(d.count == 1000u);
  BOOST_TEST(d.min == 1.0);
  BOOST_TEST(d.max == 1000.0);
  BOOST_TEST(d.mean == 500.5, boost::test_tools::tolerance(1e-12));
  BOOST_TEST(d.p50 == 500.5, boost::test_tools::tolerance(1e-12));
  BOOST_TEST(d.p99 == 990.01, boost::test_tools::tolerance(1e-12));
  BOOST_TEST(d.p999 == 999.001, boost::test_tools::tolerance(1e-12));
  auto j = triad::load::to_json(d, 1e3);
  BOOST_TEST(j.at("p50").as_double() == 500500.0, boost::test_tools::tolerance(1e-9));
  BOOST_TEST(triad::load::summarize({}).count == 0u);
}

BOOST_AUTO_TEST_SUITE_END()
