#pragma once

#include <caf/event_based_actor.hpp>
#include <caf/execution_unit.hpp>
#include <caf/mailbox_element.hpp>
#include <caf/typed_event_based_actor.hpp>

namespace triad {

/// Keeps an actor on its home domain. CAF 0.17 schedules a receiver woken by an actor of
/// another actor system on the sender's worker (`exec_later` on the sender's execution unit);
/// this mixin drops such a foreign execution unit so the home system's scheduler runs it.
template<class Base>
class homed : public Base {
public:
  using Base::Base;

  /// Enqueues a message, scheduling the actor on its own system when the sender is foreign.
  void enqueue(caf::mailbox_element_ptr what, caf::execution_unit* host) override {
    if (host != nullptr && &host->system() != &this->home_system())
      host = nullptr;
    Base::enqueue(std::move(what), host);
  }
  using Base::enqueue;
};

/// A dynamically typed event-based actor that stays on its home domain.
using homed_actor = homed<caf::event_based_actor>;

/// A statically typed event-based actor that stays on its home domain.
template<class... Sigs>
using homed_typed_actor = homed<caf::typed_event_based_actor<Sigs...>>;

} // namespace triad
