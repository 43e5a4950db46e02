#include "bench/oi_cf_report.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "devices/oi_cf.hpp"
#include "devices/sim/profile.hpp"

namespace triad::bench {

namespace {

constexpr double width = 560, height = 420, left = 70, bottom = 50, top = 30, right = 20;

// Plot coordinates of a value on a log axis of `cells` cells from `edge(0)`.
double along(double v, double low, std::size_t cells, double length) {
  const double decades = static_cast<double>(cells) / oi_cf_grid::per_decade;
  const double at = std::log10(std::max(v, low) / low) / decades;
  return std::clamp(at, 0.0, 1.0) * length;
}

std::string number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g", v);
  return buf;
}

std::string bytes(double v) {
  const char* units[] = {"B", "KB", "MB", "GB", "TB", "PB"};
  int u = 0;
  while (v >= 1000 && u < 5)
    v /= 1000, ++u;
  return number(v) + " " + units[u];
}

std::string escape(const std::string& s) {
  std::string out;
  for (char c : s)
    out += c == '<' ? "&lt;" : c == '>' ? "&gt;" : c == '&' ? "&amp;" : std::string(1, c);
  return out;
}

void panel_svg(std::ostringstream& html, const oi_cf_panel& p) {
  const double w = width - left - right, h = height - top - bottom;
  auto x = [&](double oi) { return left + along(oi, oi_cf_grid::oi_low, oi_cf_grid::oi_cells, w); };
  auto y = [&](double cf) {
    return top + h - along(cf, oi_cf_grid::cf_low, oi_cf_grid::cf_cells, h);
  };
  std::uint64_t total = 0, most = 0;
  for (auto n : p.steps)
    total += n, most = std::max(most, n);
  html << "<h2>" << escape(p.setting) << ": " << escape(p.role) << " pool, " << p.devices << " x "
       << escape(p.profile)
       << (p.tensor_parallel > 1 ? " x" + std::to_string(p.tensor_parallel) : "") << "</h2>\n<p>"
       << total << " modelled steps.</p>\n";
  html << "<svg width='" << width << "' height='" << height
       << "' xmlns='http://www.w3.org/2000/svg'"
       << " font-family='sans-serif' font-size='11'>\n";
  html << "<rect x='" << left << "' y='" << top << "' width='" << w << "' height='" << h
       << "' fill='#fafafa' stroke='#999'/>\n";
  // Cells, shaded by log(steps).
  for (std::size_t i = 0; i < oi_cf_grid::oi_cells && most > 0; ++i)
    for (std::size_t j = 0; j < oi_cf_grid::cf_cells; ++j) {
      const auto n =
          p.steps.size() == oi_cf_grid::cells ? p.steps[i * oi_cf_grid::cf_cells + j] : 0;
      if (n == 0)
        continue;
      const double shade =
          0.15 + 0.85 * std::log1p(static_cast<double>(n)) / std::log1p(static_cast<double>(most));
      const double x0 = x(oi_cf_grid::oi_edge(i)), x1 = x(oi_cf_grid::oi_edge(i + 1));
      const double y0 = y(oi_cf_grid::cf_edge(j + 1)), y1 = y(oi_cf_grid::cf_edge(j));
      html << "<rect x='" << x0 << "' y='" << y0 << "' width='" << x1 - x0 << "' height='"
           << y1 - y0 << "' fill='#1f5fbf' fill-opacity='" << number(shade) << "'><title>OI "
           << number(oi_cf_grid::oi_edge(i)) << "-" << number(oi_cf_grid::oi_edge(i + 1))
           << " FLOP/B, CF " << bytes(oi_cf_grid::cf_edge(j)) << "-"
           << bytes(oi_cf_grid::cf_edge(j + 1)) << ": " << n << " steps</title></rect>\n";
    }
  // Axes: a tick a decade.
  for (std::size_t i = 0; i <= oi_cf_grid::oi_cells; i += oi_cf_grid::per_decade)
    html << "<text x='" << x(oi_cf_grid::oi_edge(i)) << "' y='" << top + h + 16
         << "' text-anchor='middle'>" << number(oi_cf_grid::oi_edge(i)) << "</text>\n";
  for (std::size_t j = 0; j <= oi_cf_grid::cf_cells; j += oi_cf_grid::per_decade)
    html << "<text x='" << left - 6 << "' y='" << y(oi_cf_grid::cf_edge(j)) + 4
         << "' text-anchor='end'>" << bytes(oi_cf_grid::cf_edge(j)) << "</text>\n";
  html << "<text x='" << left + w / 2 << "' y='" << height - 10
       << "' text-anchor='middle'>operational intensity (FLOP per byte moved)</text>\n"
       << "<text x='14' y='" << top + h / 2 << "' transform='rotate(-90 14 " << top + h / 2
       << ")' text-anchor='middle'>capacity footprint (bytes resident)</text>\n";
  // The device group's ridge and capacity walls.
  auto one = builtin_profile(p.profile);
  if (!one)
    return html << "</svg>\n<p>profile " << escape(p.profile) << ": " << escape(one.error().message)
                << "</p>\n",
           void();
  auto group = tensor_parallel_group(*one, p.tensor_parallel);
  if (!group || group->tiers.empty())
    return html << "</svg>\n", void();
  const double ridge = group->peak_flops / group->memory_bandwidth();
  html << "<line x1='" << x(ridge) << "' y1='" << top << "' x2='" << x(ridge) << "' y2='" << top + h
       << "' stroke='#c03' stroke-dasharray='5,3'/><text x='" << x(ridge) + 4 << "' y='" << top + 12
       << "' fill='#c03'>ridge " << number(ridge) << " FLOP/B</text>\n";
  auto wall = [&](double cf, const std::string& label) {
    html << "<line x1='" << left << "' y1='" << y(cf) << "' x2='" << left + w << "' y2='" << y(cf)
         << "' stroke='#083' stroke-dasharray='5,3'/><text x='" << left + 4 << "' y='" << y(cf) - 4
         << "' fill='#083'>" << escape(label) << " " << bytes(cf) << "</text>\n";
  };
  wall(static_cast<double>(group->tiers.front().bytes), group->tiers.front().name);
  if (group->tiers.size() > 1)
    wall(static_cast<double>(group->memory_bytes()), "all tiers");
  html << "</svg>\n";
}

} // namespace

expected<void> write_oi_cf_report(const std::string& path, const std::string& title,
                                  const std::vector<oi_cf_panel>& panels) {
  std::ostringstream html;
  html << "<!doctype html>\n<html><head><meta charset='utf-8'><title>" << escape(title)
       << "</title></head><body style='font-family:sans-serif'>\n<h1>" << escape(title)
       << "</h1>\n<p>SIMULATED (roofline sim devices). Each panel: a pool's modelled steps on the "
          "plane of operational intensity against capacity footprint (arXiv 2601.22001), a "
          "cell's shade by its step count (log). Red: the group's roofline ridge (peak FLOP/s "
          "over its fastest tier's bandwidth; steps left of it are memory-bound). Green: the "
          "capacity walls (the fastest tier's bytes; all tiers').</p>\n";
  for (const auto& p : panels)
    panel_svg(html, p);
  if (panels.empty())
    html << "<p>No modelled steps: no sim device ran.</p>\n";
  html << "</body></html>\n";
  std::ofstream out{path, std::ios::binary | std::ios::trunc};
  if (!out)
    return make_error(errc::io_error, "cannot write the OI/CF report " + path);
  out << html.str();
  if (!out.flush())
    return make_error(errc::io_error, "cannot write the OI/CF report " + path);
  return {};
}

} // namespace triad::bench
