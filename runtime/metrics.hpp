#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "runtime/error.hpp"

namespace triad {

/// A label set as (name, value) pairs; the first registration of a family fixes the rendered order.
using labels = std::vector<std::pair<std::string, std::string>>;

/// The kind of a metric family, as written on its `# TYPE` line.
enum class metric_type {
  counter,   ///< only goes up
  gauge,     ///< goes up and down
  histogram, ///< observations counted into cumulative buckets, with their sum and count
};

/// Returns "counter", "gauge" or "histogram".
std::string_view to_string(metric_type type) noexcept;

/// The histogram bucket bounds for durations in seconds, from defaults::metrics::duration_buckets.
std::vector<double> default_duration_buckets();

class metrics_registry;

/// A monotonically increasing value; lock-free, owned by a metrics_registry.
class counter {
public:
  /// Not copyable: callers share the registry's one instance by pointer.
  counter(const counter&) = delete;
  /// Not copyable: callers share the registry's one instance by pointer.
  counter& operator=(const counter&) = delete;

  /// Adds `amount`; negative and NaN amounts are ignored, since a counter never goes down.
  void inc(double amount = 1.0) noexcept;
  /// Raises the total to `total` when that is more (a counter that mirrors a total kept
  /// elsewhere, e.g. a process's CPU seconds read at scrape time); never lowers it.
  void advance_to(double total) noexcept;
  /// The current total.
  double value() const noexcept { return value_.load(std::memory_order_relaxed); }

private:
  friend class metrics_registry;
  counter() = default;

  std::atomic<double> value_{0.0};
};

/// A value that can go up and down; lock-free, owned by a metrics_registry.
class gauge {
public:
  /// Not copyable: callers share the registry's one instance by pointer.
  gauge(const gauge&) = delete;
  /// Not copyable: callers share the registry's one instance by pointer.
  gauge& operator=(const gauge&) = delete;

  /// Replaces the value.
  void set(double value) noexcept { value_.store(value, std::memory_order_relaxed); }
  /// Adds `amount` (which may be negative).
  void inc(double amount = 1.0) noexcept { value_.fetch_add(amount, std::memory_order_relaxed); }
  /// Subtracts `amount`.
  void dec(double amount = 1.0) noexcept { value_.fetch_sub(amount, std::memory_order_relaxed); }
  /// The current value.
  double value() const noexcept { return value_.load(std::memory_order_relaxed); }

private:
  friend class metrics_registry;
  gauge() = default;

  std::atomic<double> value_{0.0};
};

/// Counts observations into buckets with inclusive upper bounds; lock-free, owned by a registry.
class histogram {
public:
  /// Not copyable: callers share the registry's one instance by pointer.
  histogram(const histogram&) = delete;
  /// Not copyable: callers share the registry's one instance by pointer.
  histogram& operator=(const histogram&) = delete;

  /// Records one observation; values above the last bound, +Inf and NaN land in the +Inf bucket.
  void observe(double value) noexcept;
  /// Records `value(x)` for each x in `xs`, as observe() would one by one, but touching each
  /// bucket once per run of values in it and the sum once: a device records its steps per job.
  template<class Range, class Value>
  void observe_each(const Range& xs, Value value) noexcept {
    double total = 0;
    std::size_t run_index = 0;
    std::uint64_t run = 0;
    for (const auto& x : xs) {
      double v = value(x);
      // A value in the bucket of the one before needs no search (a job's steps often share
      // their batch size and token count, and their times differ by little).
      auto index = run > 0 && holds(run_index, v) ? run_index : bucket_of(v);
      if (run > 0 && index != run_index) {
        buckets_[run_index].fetch_add(run, std::memory_order_relaxed);
        run = 0;
      }
      run_index = index;
      ++run;
      total += v;
    }
    if (run > 0) {
      buckets_[run_index].fetch_add(run, std::memory_order_relaxed);
      sum_.fetch_add(total, std::memory_order_relaxed);
    }
  }
  /// Observations kept by one owner (an actor, one thread at a time) and added to the
  /// histogram at once by flush(): a request's inter-token gaps cost a plain increment each,
  /// not two atomic ones.
  class tally {
  public:
    /// A tally for `h` (null: observations are dropped).
    explicit tally(histogram* h)
        : h_(h) {}
    /// Flushes what is left.
    ~tally() { flush(); }
    /// Not copyable: two copies would flush the same observations twice.
    tally(const tally&) = delete;
    /// Not copyable: two copies would flush the same observations twice.
    tally& operator=(const tally&) = delete;
    /// Records one observation locally.
    void observe(double value);
    /// Adds the observations so far to the histogram and starts afresh.
    void flush() noexcept;

  private:
    histogram* h_;
    std::vector<std::uint64_t> counts_; // per bucket, allocated at the first observation
    double sum_ = 0;
    std::uint64_t n_ = 0;
  };

  /// The finite bucket upper bounds, strictly increasing (the +Inf bucket is implicit).
  std::span<const double> bounds() const noexcept { return bounds_; }
  /// Cumulative counts, one per bound plus a last one for +Inf that equals the total count.
  std::vector<std::uint64_t> cumulative_counts() const;
  /// Number of observations so far.
  std::uint64_t count() const noexcept;
  /// Sum of all observations so far.
  double sum() const noexcept { return sum_.load(std::memory_order_relaxed); }

private:
  friend class metrics_registry;
  explicit histogram(std::vector<double> bounds);
  // The index of the bucket `value` falls in (bounds_.size() for +Inf and NaN).
  std::size_t bucket_of(double value) const noexcept;
  // Whether bucket `i` is the one `value` falls in, in constant time: at most its bound and above
  // the bound before (the +Inf bucket: above the last bound, or NaN; every value when none).
  bool holds(std::size_t i, double value) const noexcept {
    if (i == bounds_.size())
      return bounds_.empty() || !(value <= bounds_.back());
    return value <= bounds_[i] && (i == 0 || value > bounds_[i - 1]);
  }

  std::vector<double> bounds_;
  std::unique_ptr<std::atomic<std::uint64_t>[]> buckets_; // non-cumulative, bounds_.size() + 1
  std::atomic<double> sum_{0.0};
};

/// Thread-safe set of metric families, rendered in the Prometheus text format 0.0.4.
/// Metrics it hands out live as long as the registry; families render in registration order.
class metrics_registry {
public:
  /// The HTTP Content-Type of render()'s output.
  static constexpr std::string_view content_type = "text/plain; version=0.0.4; charset=utf-8";

  /// An empty registry.
  metrics_registry();
  /// Destroys every metric handed out; pointers to them must not be used afterwards.
  ~metrics_registry();
  /// Not copyable: handed-out pointers refer to this registry's metrics.
  metrics_registry(const metrics_registry&) = delete;
  /// Not copyable: handed-out pointers refer to this registry's metrics.
  metrics_registry& operator=(const metrics_registry&) = delete;

  /// The counter `name` with `lbls`, created on first use; the same name and labels (in any
  /// order) give the same counter. Fails on invalid names or a conflict with an earlier family.
  expected<counter*> add_counter(std::string_view name, std::string_view help,
                                 const labels& lbls = {});
  /// The gauge `name` with `lbls`, created on first use; same rules as add_counter.
  expected<gauge*> add_gauge(std::string_view name, std::string_view help, const labels& lbls = {});
  /// The histogram `name` with `lbls`, created on first use; `bounds` must be finite and strictly
  /// increasing and equal to the family's first registration; label `le` is reserved.
  expected<histogram*> add_histogram(std::string_view name, std::string_view help,
                                     std::vector<double> bounds, const labels& lbls = {});

  /// Runs `refresh` at the start of every render(), before the families are read: metrics
  /// whose values live elsewhere (the process's CPU and memory, threads' CPU) are read then,
  /// not kept up to date all the time. It runs on the rendering thread, without the registry's
  /// lock held, so it may add and set metrics; it must outlive the registry's last render.
  void add_collector(std::function<void()> refresh);

  /// All families that have at least one metric, in the Prometheus text format 0.0.4.
  std::string render() const;

private:
  struct family;
  struct child;

  expected<child*> add(metric_type type, std::string_view name, std::string_view help,
                       std::vector<double> bounds, const labels& lbls);

  mutable std::mutex mutex_;
  std::vector<std::function<void()>> collectors_;           // run by render() before it locks
  std::vector<std::unique_ptr<family>> families_;           // registration order
  std::map<std::string, family*, std::less<>> by_name_;     // family name -> family
  std::map<std::string, std::string, std::less<>> samples_; // sample name -> owning family name
};

/// Adds the standard process metrics as the Prometheus client libraries export them
/// (process_cpu_seconds_total, process_resident_memory_bytes, process_virtual_memory_bytes,
/// process_open_fds, process_max_fds, process_threads, process_start_time_seconds) and the CPU of
/// each domain's threads by role (triad_thread_cpu_seconds_total), read from /proc at each render.
expected<void> add_process_metrics(metrics_registry& registry);

} // namespace triad
