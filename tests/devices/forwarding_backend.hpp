#pragma once

#include <memory>
#include <stdexcept>
#include <string>

#include "devices/backend.hpp"

namespace triad::test {

/// A backend that passes every call to `inner`: tests derive from it and override the calls
/// they change (a step that fails, a step that waits for the test).
class forwarding_backend : public backend {
public:
  /// Wraps `inner`.
  explicit forwarding_backend(std::unique_ptr<backend> inner)
      : inner_(std::move(inner)) {}
  const model_shape& shape() const noexcept override { return inner_->shape(); }
  std::string kernel() const override { return inner_->kernel(); }
  expected<step_output> step(std::span<const step_item> items) override {
    return inner_->step(items);
  }
  expected<std::vector<std::byte>> export_kv(seq_id s) const override {
    return inner_->export_kv(s);
  }
  expected<void> import_kv(seq_id s, std::span<const std::byte> b) override {
    return inner_->import_kv(s, b);
  }
  void free(seq_id s) override { inner_->free(s); }
  std::size_t attach_prefix(seq_id s, std::span<const token> t) override {
    return inner_->attach_prefix(s, t);
  }
  void publish(seq_id s, std::span<const token> t) override { inner_->publish(s, t); }
  std::size_t length(seq_id s) const noexcept override { return inner_->length(s); }
  kv_usage kv() const noexcept override { return inner_->kv(); }
  std::size_t page_payload_bytes() const noexcept override { return inner_->page_payload_bytes(); }
  void capture_evictions(std::vector<kv_page>* sink) override { inner_->capture_evictions(sink); }
  expected<void> append_pages(seq_id s, std::span<const kv_page> pages) override {
    return inner_->append_pages(s, pages);
  }
  expected<std::vector<kv_page>> export_pages(seq_id s, std::span<const token> tokens,
                                              std::size_t from_page = 0) const override {
    return inner_->export_pages(s, tokens, from_page);
  }
  std::vector<page_range> stream_groups() const override { return inner_->stream_groups(); }
  std::vector<std::span<std::byte>> page_memory(seq_id s) override {
    return inner_->page_memory(s);
  }
  expected<void> reserve_kv(seq_id s, std::size_t length) override {
    return inner_->reserve_kv(s, length);
  }
  double stream_group_seconds(std::size_t pages) const override {
    return inner_->stream_group_seconds(pages);
  }
  bool import_cheaper(std::size_t context, std::size_t tokens) const override {
    return inner_->import_cheaper(context, tokens);
  }

protected:
  std::unique_ptr<backend> inner_; ///< the backend doing the work
};

/// A backend whose steps fail (an io_error with `message`) from the `after`-th on, or throw
/// when `throws` is set: a device breaking mid-session, or a driver-thread fault.
class failing_backend final : public forwarding_backend {
public:
  /// Wraps `inner`.
  failing_backend(std::unique_ptr<backend> inner, int after, bool throws = false,
                  std::string message = "injected: the device stopped answering")
      : forwarding_backend(std::move(inner))
      , after_(after)
      , throws_(throws)
      , message_(std::move(message)) {}
  expected<step_output> step(std::span<const step_item> items) override {
    if (steps_++ >= after_) {
      if (throws_)
        throw std::runtime_error{"driver fault"};
      return make_error(errc::io_error, message_);
    }
    return inner_->step(items);
  }

private:
  int after_;
  bool throws_;
  std::string message_;
  int steps_ = 0;
};

} // namespace triad::test
