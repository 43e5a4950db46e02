#include "load/trace.hpp"

#include <cmath>
#include <fstream>

#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>
#include <boost/json/value.hpp>

#include "runtime/json_text.hpp"

namespace triad::load {

namespace json = boost::json;

namespace {

std::string shown(const json::value& v) {
  return json_excerpt(v, 40);
}

constexpr auto whole = json_whole;

} // namespace

trace parse_mooncake(std::istream& in, std::size_t block_tokens) {
  trace out;
  std::string line;
  std::size_t number = 0;
  while (std::getline(in, line)) {
    ++number;
    if (line.find_first_not_of(" \t\r") == std::string::npos)
      continue;
    ++out.lines;
    auto problem = [&](std::string reason) { out.problems.push_back({number, std::move(reason)}); };
    boost::system::error_code ec;
    auto doc = json::parse(line, ec);
    if (ec) {
      problem("not valid JSON: " + ec.message());
      continue;
    }
    const auto* o = doc.if_object();
    if (o == nullptr) {
      problem("expected a JSON object, got " + shown(doc));
      continue;
    }
    trace_entry e;
    e.line = number;
    const auto* ts = o->if_contains("timestamp");
    if (ts == nullptr || !(ts->is_number()) || ts->to_number<double>() < 0 ||
        !std::isfinite(ts->to_number<double>())) {
      problem(ts == nullptr ? "timestamp: missing"
                            : "timestamp: expected a number >= 0, got " + shown(*ts));
      continue;
    }
    e.timestamp_ms = ts->to_number<double>();
    bool ok = true;
    for (auto [key, field] : {std::pair{"input_length", &e.input_length},
                              std::pair{"output_length", &e.output_length}}) {
      const auto* v = o->if_contains(key);
      std::int64_t n = 0;
      if (v == nullptr || !whole(*v, n) || n < 1 || n > 10'000'000) {
        problem(std::string{key} + (v == nullptr
                                        ? ": missing"
                                        : ": expected an integer 1..10000000, got " + shown(*v)));
        ok = false;
        break;
      }
      *field = static_cast<std::uint32_t>(n);
    }
    if (!ok)
      continue;
    if (const auto* ids = o->if_contains("hash_ids"); ids != nullptr && !ids->is_null()) {
      if (!ids->is_array()) {
        problem("hash_ids: expected an array of integers, got " + shown(*ids));
        continue;
      }
      auto limit = (e.input_length + block_tokens - 1) / block_tokens;
      if (ids->get_array().size() > limit) {
        problem("hash_ids: " + std::to_string(ids->get_array().size()) + " ids for input_length " +
                std::to_string(e.input_length) + " (at most " + std::to_string(limit) +
                " blocks of " + std::to_string(block_tokens) + ")");
        continue;
      }
      for (const auto& id : ids->get_array()) {
        std::int64_t n = 0;
        if (!whole(id, n) || n < 0) {
          problem("hash_ids: expected integers >= 0, got " + shown(id));
          ok = false;
          break;
        }
        e.hash_ids.push_back(static_cast<std::uint64_t>(n));
      }
      if (!ok)
        continue;
    }
    out.entries.push_back(std::move(e));
  }
  return out;
}

expected<trace> read_mooncake(const std::filesystem::path& path, std::size_t block_tokens) {
  std::ifstream in{path};
  if (!in)
    return make_error(errc::not_found, "trace " + path.string() + ": cannot be opened");
  return parse_mooncake(in, block_tokens);
}

std::string filler_text(std::uint64_t seed, std::size_t n) {
  std::string out(n, ' ');
  std::uint64_t x = seed * 0x9e3779b97f4a7c15ull + 0x7472696164ull;
  for (std::size_t i = 0; i < n; ++i) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 29;
    out[i] = static_cast<char>('a' + (x >> 40) % 26);
    if (i % 6 == 5)
      out[i] = ' ';
  }
  return out;
}

std::string trace_prompt(const trace_entry& e, std::size_t request_index,
                         std::size_t block_tokens) {
  std::string out;
  out.reserve(e.input_length);
  for (auto id : e.hash_ids) {
    if (out.size() >= e.input_length)
      break;
    out += filler_text(id, std::min<std::size_t>(block_tokens, e.input_length - out.size()));
  }
  if (out.size() < e.input_length)
    out += filler_text(0x5eed'0000'0000ull + request_index, e.input_length - out.size());
  return out;
}

} // namespace triad::load
