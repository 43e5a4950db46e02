#include "runtime/metrics.hpp"

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <iterator>
#include <variant>

#include "runtime/defaults.hpp"

namespace triad {

namespace {

constexpr std::string_view name_prefix = "triad_";
// The standard process metrics' prefix, as Prometheus client libraries name them
// (process_cpu_seconds_total, process_resident_memory_bytes, ...).
constexpr std::string_view process_prefix = "process_";
constexpr std::array<std::string_view, 3> histogram_suffixes = {"_bucket", "_sum", "_count"};

bool is_name_start(char c, bool allow_colon) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || (allow_colon && c == ':');
}

bool is_name_char(char c, bool allow_colon) {
  return is_name_start(c, allow_colon) || (c >= '0' && c <= '9');
}

// Index of the first character that breaks the name grammar, or npos when the name is valid.
std::size_t invalid_char_at(std::string_view name, bool allow_colon) {
  for (std::size_t i = 0; i < name.size(); ++i) {
    bool ok = i == 0 ? is_name_start(name[i], allow_colon) : is_name_char(name[i], allow_colon);
    if (!ok) {
      return i;
    }
  }
  return std::string_view::npos;
}

std::string quoted(std::string_view text) {
  std::string out = "\"";
  for (char c : text) {
    if (c == '\n') {
      out += "\\n";
    } else if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else {
      out += c;
    }
  }
  out += '"';
  return out;
}

std::string names_text(const std::vector<std::string>& names) {
  std::string out = "{";
  for (std::size_t i = 0; i < names.size(); ++i) {
    out += i == 0 ? "" : ", ";
    out += names[i];
  }
  out += '}';
  return out;
}

// Non-finite values as the format spells them; integers below 2^53 (exact in a double) as
// integers; other values as the shortest digits that round-trip, in plain notation for
// 1e-4 <= |value| < 1e21 (so bucket bounds read "0.0001", not "1e-04") and with an exponent
// outside that range.
std::string format_value(double value) {
  if (std::isnan(value)) {
    return "NaN";
  }
  if (std::isinf(value)) {
    return value > 0 ? "+Inf" : "-Inf";
  }
  if (std::fabs(value) < 9007199254740992.0 && value == std::trunc(value)) {
    return std::to_string(static_cast<long long>(value));
  }
  double magnitude = std::fabs(value);
  auto format = magnitude >= 1e-4 && magnitude < 1e21 ? std::chars_format::fixed
                                                      : std::chars_format::scientific;
  std::array<char, 128> buf{};
  auto res = std::to_chars(buf.data(), buf.data() + buf.size(), value, format);
  return std::string(buf.data(), res.ptr);
}

std::string bounds_text(const std::vector<double>& bounds) {
  std::string out = "[";
  for (std::size_t i = 0; i < bounds.size(); ++i) {
    out += i == 0 ? "" : ", ";
    out += format_value(bounds[i]);
  }
  out += ']';
  return out;
}

void append_help(std::string& out, std::string_view help) {
  for (char c : help) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
}

void append_label_value(std::string& out, std::string_view value) {
  for (char c : value) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
}

// name{l1="v1",...[,le="bound"]} value
void append_sample(std::string& out, std::string_view name,
                   const std::vector<std::string>& label_names,
                   const std::vector<std::string>& label_values, const std::string* le,
                   std::string_view value) {
  out += name;
  if (!label_names.empty() || le != nullptr) {
    out += '{';
    for (std::size_t i = 0; i < label_names.size(); ++i) {
      out += i == 0 ? "" : ",";
      out += label_names[i];
      out += "=\"";
      append_label_value(out, label_values[i]);
      out += '"';
    }
    if (le != nullptr) {
      out += label_names.empty() ? "le=\"" : ",le=\"";
      out += *le;
      out += '"';
    }
    out += '}';
  }
  out += ' ';
  out += value;
  out += '\n';
}

std::vector<std::string> sample_names(metric_type type, std::string_view name) {
  if (type != metric_type::histogram) {
    return {std::string(name)};
  }
  std::vector<std::string> out;
  for (auto suffix : histogram_suffixes) {
    out.push_back(std::string(name) + std::string(suffix));
  }
  return out;
}

expected<void> check_name(std::string_view name) {
  if (!name.starts_with(name_prefix) && !name.starts_with(process_prefix)) {
    return make_error(errc::invalid_argument,
                      "metric name " + quoted(name) +
                          " must start with \"triad_\" (or \"process_\" for the standard "
                          "process metrics)");
  }
  if (auto at = invalid_char_at(name, true); at != std::string_view::npos) {
    return make_error(errc::invalid_argument, "metric name " + quoted(name) + " has " +
                                                  quoted(name.substr(at, 1)) + " at offset " +
                                                  std::to_string(at) +
                                                  "; names must match [a-zA-Z_:][a-zA-Z0-9_:]*");
  }
  return {};
}

expected<void> check_labels(metric_type type, std::string_view name, const labels& lbls) {
  for (std::size_t i = 0; i < lbls.size(); ++i) {
    const std::string& label = lbls[i].first;
    std::string where = "metric " + quoted(name) + ": label name " + quoted(label);
    if (label.empty()) {
      return make_error(errc::invalid_argument,
                        where + " is empty; label names must match [a-zA-Z_][a-zA-Z0-9_]*");
    }
    if (auto at = invalid_char_at(label, false); at != std::string_view::npos) {
      return make_error(errc::invalid_argument,
                        where + " has " + quoted(std::string_view(label).substr(at, 1)) +
                            " at offset " + std::to_string(at) +
                            "; label names must match [a-zA-Z_][a-zA-Z0-9_]*");
    }
    if (label.starts_with("__")) {
      return make_error(errc::invalid_argument,
                        where + " starts with \"__\", which is reserved for Prometheus");
    }
    if (type == metric_type::histogram && label == "le") {
      return make_error(errc::invalid_argument,
                        where + " is reserved for histogram buckets; choose another name");
    }
    for (std::size_t j = 0; j < i; ++j) {
      if (lbls[j].first == label) {
        return make_error(errc::invalid_argument,
                          where + " is given twice; each label name may appear once");
      }
    }
  }
  return {};
}

expected<void> check_bounds(std::string_view name, const std::vector<double>& bounds) {
  for (std::size_t i = 0; i < bounds.size(); ++i) {
    if (!std::isfinite(bounds[i])) {
      return make_error(errc::invalid_argument,
                        "histogram " + quoted(name) + ": bucket bound " + std::to_string(i) +
                            " is " + format_value(bounds[i]) +
                            "; bounds must be finite (the +Inf bucket is implicit)");
    }
    if (i > 0 && !(bounds[i] > bounds[i - 1])) {
      return make_error(errc::invalid_argument,
                        "histogram " + quoted(name) + ": bucket bound " + std::to_string(i) +
                            " is " + format_value(bounds[i]) + " after " +
                            format_value(bounds[i - 1]) + "; bounds must be strictly increasing");
    }
  }
  return {};
}

} // namespace

std::string_view to_string(metric_type type) noexcept {
  switch (type) {
  case metric_type::counter:
    return "counter";
  case metric_type::gauge:
    return "gauge";
  case metric_type::histogram:
    return "histogram";
  }
  return "unknown";
}

std::vector<double> default_duration_buckets() {
  return {std::begin(defaults::metrics::duration_buckets),
          std::end(defaults::metrics::duration_buckets)};
}

void counter::inc(double amount) noexcept {
  if (amount > 0) {
    value_.fetch_add(amount, std::memory_order_relaxed);
  }
}

void counter::advance_to(double total) noexcept {
  auto now = value_.load(std::memory_order_relaxed);
  while (total > now && !value_.compare_exchange_weak(now, total, std::memory_order_relaxed)) {
  }
}

void histogram::tally::observe(double value) {
  if (h_ == nullptr)
    return;
  if (counts_.empty())
    counts_.resize(h_->bounds_.size() + 1);
  ++counts_[h_->bucket_of(value)];
  sum_ += value;
  ++n_;
}

void histogram::tally::flush() noexcept {
  if (h_ == nullptr || n_ == 0)
    return;
  for (std::size_t i = 0; i < counts_.size(); ++i)
    if (counts_[i] != 0) {
      h_->buckets_[i].fetch_add(counts_[i], std::memory_order_relaxed);
      counts_[i] = 0;
    }
  h_->sum_.fetch_add(sum_, std::memory_order_relaxed);
  sum_ = 0;
  n_ = 0;
}

histogram::histogram(std::vector<double> bounds)
    : bounds_(std::move(bounds))
    , buckets_(std::make_unique<std::atomic<std::uint64_t>[]>(bounds_.size() + 1)) {}

std::size_t histogram::bucket_of(double value) const noexcept {
  // lower_bound finds the first bound >= value: buckets are inclusive ("le"). NaN compares false
  // against every bound, so it is sent to the +Inf bucket explicitly.
  if (std::isnan(value))
    return bounds_.size();
  return static_cast<std::size_t>(std::lower_bound(bounds_.begin(), bounds_.end(), value) -
                                  bounds_.begin());
}

void histogram::observe(double value) noexcept {
  buckets_[bucket_of(value)].fetch_add(1, std::memory_order_relaxed);
  sum_.fetch_add(value, std::memory_order_relaxed);
}

std::vector<std::uint64_t> histogram::cumulative_counts() const {
  std::vector<std::uint64_t> out(bounds_.size() + 1);
  std::uint64_t running = 0;
  for (std::size_t i = 0; i < out.size(); ++i) {
    running += buckets_[i].load(std::memory_order_relaxed);
    out[i] = running;
  }
  return out;
}

std::uint64_t histogram::count() const noexcept {
  std::uint64_t total = 0;
  for (std::size_t i = 0; i <= bounds_.size(); ++i) {
    total += buckets_[i].load(std::memory_order_relaxed);
  }
  return total;
}

struct metrics_registry::child {
  std::vector<std::string> label_values; // in the family's label-name order
  std::variant<std::unique_ptr<counter>, std::unique_ptr<gauge>, std::unique_ptr<histogram>> metric;
};

struct metrics_registry::family {
  std::string name;
  std::string help;
  metric_type type = metric_type::counter;
  std::vector<std::string> label_names; // order of the first registration, used for rendering
  std::vector<double> bounds;           // histograms only
  std::vector<std::unique_ptr<child>> children;         // creation order
  std::map<std::vector<std::string>, child*> by_values; // label values -> child
};

metrics_registry::metrics_registry() = default;
metrics_registry::~metrics_registry() = default;

expected<counter*> metrics_registry::add_counter(std::string_view name, std::string_view help,
                                                 const labels& lbls) {
  auto found = add(metric_type::counter, name, help, {}, lbls);
  if (!found) {
    return found.error();
  }
  return std::get<std::unique_ptr<counter>>((*found)->metric).get();
}

expected<gauge*> metrics_registry::add_gauge(std::string_view name, std::string_view help,
                                             const labels& lbls) {
  auto found = add(metric_type::gauge, name, help, {}, lbls);
  if (!found) {
    return found.error();
  }
  return std::get<std::unique_ptr<gauge>>((*found)->metric).get();
}

expected<histogram*> metrics_registry::add_histogram(std::string_view name, std::string_view help,
                                                     std::vector<double> bounds,
                                                     const labels& lbls) {
  auto found = add(metric_type::histogram, name, help, std::move(bounds), lbls);
  if (!found) {
    return found.error();
  }
  return std::get<std::unique_ptr<histogram>>((*found)->metric).get();
}

expected<metrics_registry::child*> metrics_registry::add(metric_type type, std::string_view name,
                                                         std::string_view help,
                                                         std::vector<double> bounds,
                                                         const labels& lbls) {
  if (auto ok = check_name(name); !ok) {
    return ok.error();
  }
  if (auto ok = check_labels(type, name, lbls); !ok) {
    return ok.error();
  }
  if (auto ok = check_bounds(name, bounds); !ok) {
    return ok.error();
  }

  std::vector<std::string> given_names;
  for (const auto& [label, value] : lbls) {
    given_names.push_back(label);
  }

  std::lock_guard lock(mutex_);
  family* fam = nullptr;
  if (auto it = by_name_.find(name); it != by_name_.end()) {
    fam = it->second;
    std::string where = "metric " + quoted(name) + " is already registered";
    if (fam->type != type) {
      return make_error(errc::invalid_argument,
                        where + " as a " + std::string(to_string(fam->type)) + ", not a " +
                            std::string(to_string(type)) + "; one name has one type");
    }
    if (fam->help != help) {
      return make_error(errc::invalid_argument, where + " with help " + quoted(fam->help) +
                                                    ", not " + quoted(help) +
                                                    "; one name has one help text");
    }
    auto sorted_family = fam->label_names;
    auto sorted_given = given_names;
    std::sort(sorted_family.begin(), sorted_family.end());
    std::sort(sorted_given.begin(), sorted_given.end());
    if (sorted_family != sorted_given) {
      return make_error(errc::invalid_argument, where + " with label names " +
                                                    names_text(fam->label_names) + ", not " +
                                                    names_text(given_names) +
                                                    "; every metric of a family has the same "
                                                    "label names");
    }
    if (fam->bounds != bounds) {
      return make_error(errc::invalid_argument,
                        where + " with buckets " + bounds_text(fam->bounds) + ", not " +
                            bounds_text(bounds) + "; one histogram has one set of buckets");
    }
  } else {
    auto produced = sample_names(type, name);
    for (const auto& sample : produced) {
      if (auto clash = samples_.find(sample); clash != samples_.end()) {
        return make_error(errc::invalid_argument,
                          "metric " + quoted(name) + " would expose samples named " +
                              quoted(sample) + ", which metric " + quoted(clash->second) +
                              " already exposes; sample names must be unique");
      }
    }
    auto created = std::make_unique<family>();
    created->name = std::string(name);
    created->help = std::string(help);
    created->type = type;
    created->label_names = given_names;
    created->bounds = bounds;
    fam = created.get();
    families_.push_back(std::move(created));
    by_name_.emplace(fam->name, fam);
    for (auto& sample : produced) {
      samples_.emplace(std::move(sample), fam->name);
    }
  }

  // Label values in the family's order, whatever order this call gave them in.
  std::vector<std::string> values;
  values.reserve(fam->label_names.size());
  for (const auto& label : fam->label_names) {
    for (const auto& [given, value] : lbls) {
      if (given == label) {
        values.push_back(value);
        break;
      }
    }
  }
  if (auto it = fam->by_values.find(values); it != fam->by_values.end()) {
    return it->second;
  }
  auto created = std::make_unique<child>();
  created->label_values = values;
  switch (type) {
  case metric_type::counter:
    created->metric = std::unique_ptr<counter>(new counter());
    break;
  case metric_type::gauge:
    created->metric = std::unique_ptr<gauge>(new gauge());
    break;
  case metric_type::histogram:
    created->metric = std::unique_ptr<histogram>(new histogram(fam->bounds));
    break;
  }
  child* out = created.get();
  fam->children.push_back(std::move(created));
  fam->by_values.emplace(std::move(values), out);
  return out;
}

void metrics_registry::add_collector(std::function<void()> refresh) {
  std::lock_guard lock(mutex_);
  collectors_.push_back(std::move(refresh));
}

std::string metrics_registry::render() const {
  std::vector<std::function<void()>> collectors;
  {
    std::lock_guard lock(mutex_);
    collectors = collectors_;
  }
  for (const auto& refresh : collectors)
    refresh();
  std::lock_guard lock(mutex_);
  std::string out;
  for (const auto& fam : families_) {
    if (fam->children.empty()) {
      continue;
    }
    out += "# HELP ";
    out += fam->name;
    if (!fam->help.empty()) {
      out += ' ';
      append_help(out, fam->help);
    }
    out += "\n# TYPE ";
    out += fam->name;
    out += ' ';
    out += to_string(fam->type);
    out += '\n';

    std::vector<std::string> les;
    if (fam->type == metric_type::histogram) {
      for (double bound : fam->bounds) {
        les.push_back(format_value(bound));
      }
      les.push_back("+Inf");
    }
    for (const auto& ch : fam->children) {
      if (const auto* c = std::get_if<std::unique_ptr<counter>>(&ch->metric)) {
        append_sample(out, fam->name, fam->label_names, ch->label_values, nullptr,
                      format_value((*c)->value()));
      } else if (const auto* g = std::get_if<std::unique_ptr<gauge>>(&ch->metric)) {
        append_sample(out, fam->name, fam->label_names, ch->label_values, nullptr,
                      format_value((*g)->value()));
      } else if (const auto* h = std::get_if<std::unique_ptr<histogram>>(&ch->metric)) {
        // One snapshot of the buckets, so the +Inf bucket and _count always agree.
        auto counts = (*h)->cumulative_counts();
        double sum = (*h)->sum();
        std::string bucket_name = fam->name + "_bucket";
        for (std::size_t i = 0; i < counts.size(); ++i) {
          append_sample(out, bucket_name, fam->label_names, ch->label_values, &les[i],
                        std::to_string(counts[i]));
        }
        append_sample(out, fam->name + "_sum", fam->label_names, ch->label_values, nullptr,
                      format_value(sum));
        append_sample(out, fam->name + "_count", fam->label_names, ch->label_values, nullptr,
                      std::to_string(counts.back()));
      }
    }
  }
  return out;
}

} // namespace triad
