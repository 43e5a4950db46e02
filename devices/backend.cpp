#include "devices/backend.hpp"

#include <algorithm>
#include <vector>

namespace triad {

expected<void> check_step(std::span<const step_item> items, const model_shape& shape,
                          const backend& b) {
  if (items.empty())
    return make_error(errc::invalid_argument, "step: no items");
  // Each sequence once: sorted ids in the thread's buffer (no allocation per step).
  thread_local std::vector<seq_id> ids;
  ids.clear();
  for (const auto& item : items)
    ids.push_back(item.seq);
  std::sort(ids.begin(), ids.end());
  if (auto twice = std::adjacent_find(ids.begin(), ids.end()); twice != ids.end())
    return make_error(errc::invalid_argument,
                      "step: sequence " + std::to_string(*twice) + " appears twice");
  for (const auto& item : items) {
    if (item.tokens.empty())
      return make_error(errc::invalid_argument,
                        "step: sequence " + std::to_string(item.seq) + " has no tokens");
    for (auto t : item.tokens)
      if (t < 0 || static_cast<unsigned>(t) >= shape.vocab)
        return make_error(errc::invalid_argument, "step: token " + std::to_string(t) +
                                                      " outside the vocabulary 0.." +
                                                      std::to_string(shape.vocab - 1));
    auto new_length = b.length(item.seq) + item.tokens.size();
    if (new_length > shape.max_context)
      return make_error(errc::invalid_argument, "step: sequence " + std::to_string(item.seq) +
                                                    " would reach " + std::to_string(new_length) +
                                                    " tokens; model '" + shape.name + "' allows " +
                                                    std::to_string(shape.max_context));
  }
  return {};
}

namespace {

class failed_backend final : public backend {
public:
  failed_backend(model_shape shape, std::size_t page_tokens, error why)
      : shape_(std::move(shape))
      , why_(std::move(why)) {
    // Room is reported so that work is admitted and answered with the error at its first step
    // (a device with no room would leave work waiting for room that never comes).
    kv_.page_tokens = page_tokens == 0 ? 1 : page_tokens;
    kv_.pages_total = std::size_t{1} << 20;
  }

  const model_shape& shape() const noexcept override { return shape_; }
  std::string kernel() const override { return "failed: " + why_.message; }
  expected<step_output> step(std::span<const step_item>) override { return why_; }
  expected<std::vector<std::byte>> export_kv(seq_id) const override { return why_; }
  expected<void> import_kv(seq_id, std::span<const std::byte>) override { return why_; }
  void free(seq_id) override {}
  std::size_t attach_prefix(seq_id, std::span<const token>) override { return 0; }
  void publish(seq_id, std::span<const token>) override {}
  std::size_t length(seq_id) const noexcept override { return 0; }
  kv_usage kv() const noexcept override { return kv_; }

private:
  model_shape shape_;
  error why_;
  kv_usage kv_;
};

} // namespace

std::unique_ptr<backend> make_failed_backend(model_shape shape, std::size_t page_tokens,
                                             error why) {
  return std::make_unique<failed_backend>(std::move(shape), page_tokens, std::move(why));
}

} // namespace triad
