#include <boost/test/unit_test.hpp>

#include "devices/oi_cf.hpp"

using triad::oi_cf_grid;

BOOST_AUTO_TEST_SUITE(oi_cf)

BOOST_AUTO_TEST_CASE(a_step_falls_in_the_cell_whose_edges_hold_it) {
  // A decode step of llama3-70b: about 2 FLOP/byte, 150 GB resident.
  const auto c = oi_cf_grid::cell(2.0, 150e9);
  const auto i = c / oi_cf_grid::cf_cells, j = c % oi_cf_grid::cf_cells;
  BOOST_TEST(oi_cf_grid::oi_edge(i) <= 2.0);
  BOOST_TEST(oi_cf_grid::oi_edge(i + 1) > 2.0);
  BOOST_TEST(oi_cf_grid::cf_edge(j) <= 150e9);
  BOOST_TEST(oi_cf_grid::cf_edge(j + 1) > 150e9);
}

BOOST_AUTO_TEST_CASE(cells_are_quarter_decades_from_the_lower_edges) {
  BOOST_TEST(oi_cf_grid::cell(0.1, 1e8) == 0u);
  BOOST_TEST(oi_cf_grid::cell(1.0, 1e8) == 4u * oi_cf_grid::cf_cells); // a decade up in OI
  BOOST_TEST(oi_cf_grid::cell(0.1, 1e9) == 4u);                        // a decade up in CF
  BOOST_TEST(oi_cf_grid::oi_edge(oi_cf_grid::oi_cells) == 1e5, boost::test_tools::tolerance(1e-9));
  BOOST_TEST(oi_cf_grid::cf_edge(oi_cf_grid::cf_cells) == 1e15, boost::test_tools::tolerance(1e-9));
}

BOOST_AUTO_TEST_CASE(values_past_either_end_count_in_the_edge_cells) {
  BOOST_TEST(oi_cf_grid::cell(0.0, 0.0) == 0u);
  BOOST_TEST(oi_cf_grid::cell(1e9, 1e20) == oi_cf_grid::cells - 1);
  BOOST_TEST(oi_cf_grid::cell(-1.0, 1e20) == oi_cf_grid::cf_cells - 1);
}

BOOST_AUTO_TEST_SUITE_END()
