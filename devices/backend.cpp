#include "devices/backend.hpp"

#include <unordered_set>

namespace triad {

expected<void> check_step(std::span<const step_item> items, const model_shape& shape,
                          const backend& b) {
  if (items.empty())
    return make_error(errc::invalid_argument, "step: no items");
  std::unordered_set<seq_id> seen;
  for (const auto& item : items) {
    if (item.tokens.empty())
      return make_error(errc::invalid_argument,
                        "step: sequence " + std::to_string(item.seq) + " has no tokens");
    if (!seen.insert(item.seq).second)
      return make_error(errc::invalid_argument,
                        "step: sequence " + std::to_string(item.seq) + " appears twice");
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

} // namespace triad
