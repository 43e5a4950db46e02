#pragma once

#include <algorithm>
#include <cstddef>
#include <functional>
#include <map>
#include <utility>
#include <vector>

#include <caf/actor.hpp>

#include "kvstore/defaults.hpp"
#include "kvstore/detail/block_actor.hpp"
#include "runtime/domains.hpp"

namespace triad::detail {

/// The size of the batch that follows one of `size` copies in the same turn: twice as many, up
/// to `max`.
constexpr std::size_t next_move_batch(std::size_t size, std::size_t max) noexcept {
  return std::min(size * 2, max);
}

/// Groups the copies a store queues in one turn by destination (its domain) into batches for
/// that domain's mover. A destination's first batch of a turn goes out at `first` copies, so
/// its mover starts at once while the store still prepares the rest; each next batch of the
/// turn is twice as large, up to `max`. The turn's end (end_turn) hands out what is left and
/// starts the sizes again. Pure: it only queues and decides; the caller sends.
template<class Key, class Copy>
class move_batcher {
public:
  /// What add() decided.
  struct added {
    /// The first copy since the last end_turn: the caller arranges for end_turn to run at the
    /// end of this turn.
    bool opened_turn = false;
    /// A full batch for the copy's destination, to send now; empty while it fills.
    std::vector<Copy> batch;
  };

  /// Batches of `first` copies first, doubling up to `max` (both at least 1).
  explicit move_batcher(std::size_t first = defaults::kvstore::first_move_batch_blocks,
                        std::size_t max = defaults::kvstore::move_batch_blocks)
      : first_(std::max<std::size_t>(first, 1))
      , max_(std::max<std::size_t>(max, 1)) {}

  /// Queues `copy` for `key`'s destination.
  added add(const Key& key, Copy copy) {
    added out;
    out.opened_turn = !open_;
    open_ = true;
    auto [it, fresh] = boxes_.try_emplace(key);
    auto& box = it->second;
    if (fresh)
      box.limit = first_;
    box.copies.push_back(std::move(copy));
    if (box.copies.size() >= box.limit) {
      box.limit = next_move_batch(box.limit, max_);
      out.batch = std::move(box.copies);
      box.copies.clear();
    }
    return out;
  }

  /// Ends the turn: every destination's queued copies (none empty, in key order), and the
  /// batch sizes start again at `first`.
  std::vector<std::pair<Key, std::vector<Copy>>> end_turn() {
    open_ = false;
    std::vector<std::pair<Key, std::vector<Copy>>> out;
    for (auto& [key, box] : boxes_)
      if (!box.copies.empty())
        out.emplace_back(key, std::move(box.copies));
    boxes_.clear();
    return out;
  }

  /// Drops every queued copy unsent (the store is exiting).
  void clear() {
    boxes_.clear();
    open_ = false;
  }

private:
  struct box {
    std::vector<Copy> copies;
    std::size_t limit = 0;
  };

  std::size_t first_;
  std::size_t max_;
  std::map<Key, box> boxes_;
  bool open_ = false;
};

/// A copy waiting for its batch: block `id`'s new actor and location, the source, and what
/// runs with the outcome.
struct pending_copy {
  caf::actor actor;                        ///< stands for the block once filled
  block_id id = 0;                         ///< the block
  block_location where;                    ///< its new place
  move_order order;                        ///< where its bytes come from
  std::function<void(pull_result)> finish; ///< runs once with the copy's outcome
};

/// A batch as its mover takes it, and the continuations of its copies, in the same order.
struct move_batch {
  std::vector<pull_item> items;                           ///< the mover's message
  std::vector<std::function<void(pull_result)>> finishes; ///< one per item
};

/// Splits `copies` into the mover's items and the store's continuations.
move_batch make_move_batch(std::vector<pending_copy> copies);

/// The movers of every domain a store copies into: one per worker of the domain (up to
/// `movers_per_domain`), spawned on first use and taken in turn, so the batches of a long
/// transfer are copied by as many cores as the domain has.
class mover_pool {
public:
  /// The mover for the next batch into `d`.
  const caf::actor& next(domain& d);
  /// Every mover spawned so far.
  std::vector<caf::actor> all() const;
  /// Forgets every mover (the caller has told them to exit).
  void clear() { movers_.clear(); }

private:
  struct domain_movers {
    std::vector<caf::actor> all;
    std::size_t next = 0; // the next batch's
  };
  std::map<domain*, domain_movers> movers_;
};

} // namespace triad::detail
