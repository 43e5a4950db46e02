#include "actors/session.hpp"

#include <caf/all.hpp>

#include "runtime/homed_actor.hpp"

namespace triad {

namespace {

using turn_end_atom = caf::atom_constant<caf::atom("turnend")>;

// What a turn produced, gathered by its callback on the request's thread and handed to the
// session with the final event.
struct turn_record {
  std::vector<chat_message> messages; // the user's message, assistant text, tool results
  std::string text;                   // assistant text since the last tool result
};

} // namespace
} // namespace triad

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(triad::request_event)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(std::shared_ptr<triad::turn_record>)

namespace triad {

namespace {

class session_actor : public homed_actor {
public:
  session_actor(caf::actor_config& cfg, session_options options, submit_function submit)
      : homed_actor(cfg)
      , options_(std::move(options))
      , submit_(std::move(submit)) {
    info_.name = options_.name;
    info_.history = options_.preamble;
  }

  caf::behavior make_behavior() override {
    return {
        [this](turn_atom, turn_request& turn,
               request_callback& on_event) -> caf::result<std::uint64_t> {
          return start_turn(std::move(turn), std::move(on_event));
        },
        [this](turn_end_atom, request_event& last, std::shared_ptr<turn_record>& record) {
          end_turn(last, *record);
        },
        [this](session_info_atom) {
          auto out = info_;
          out.context_tokens = prior_ ? prior_->tokens.size() : 0;
          out.cached_tokens = !prior_ ? 0 : prior_->kv ? prior_->kv->tokens : prior_->stored_tokens;
          return out;
        },
    };
  }

private:
  caf::error refuse(std::string why) {
    return caf::make_error(caf::sec::runtime_error, "session " + options_.name + ": " + why);
  }

  caf::result<std::uint64_t> start_turn(turn_request turn, request_callback on_event) {
    if (info_.busy)
      return refuse("busy: a turn is running; one turn at a time");
    if (info_.turns >= options_.max_turns)
      return refuse("turn limit reached (" + std::to_string(options_.max_turns) + " turns)");
    auto context = prior_ ? prior_->tokens.size() : 0;
    if (context >= options_.max_tokens)
      return refuse("token limit reached: the conversation has " + std::to_string(context) +
                    " tokens, the limit is " + std::to_string(options_.max_tokens));
    chat_request req;
    req.session = options_.name;
    if (prior_) {
      req.messages = {turn.message};
      req.prior = prior_;
    } else {
      req.messages = options_.preamble;
      req.messages.push_back(turn.message);
    }
    req.keep_kv = options_.keep_kv;
    req.max_tokens = turn.max_tokens;
    req.max_tool_calls = turn.max_tool_calls;
    req.sampling = turn.sampling;
    req.script = std::move(turn.script);
    auto record = std::make_shared<turn_record>();
    record->messages.push_back(turn.message);
    auto self = caf::actor_cast<caf::actor>(this);
    // Runs on the request actor's thread: gathers the turn's messages, reports the end here.
    auto wrapped = [self, record, cb = std::move(on_event)](const request_event& ev) {
      switch (ev.kind) {
      case request_event::token:
        record->text += ev.text;
        break;
      case request_event::tool_result:
        record->messages.push_back({"assistant", std::move(record->text)});
        record->text.clear();
        record->messages.push_back({"tool", ev.tool_output});
        break;
      case request_event::done:
      case request_event::error:
        if (!record->text.empty())
          record->messages.push_back({"assistant", std::move(record->text)});
        caf::anon_send(self, turn_end_atom::value, ev, record);
        break;
      default:
        break;
      }
      if (cb)
        cb(ev);
    };
    info_.busy = true;
    auto handle = submit_(std::move(req), std::move(wrapped));
    if (handle.id == 0) {
      info_.busy = false; // refused at once (the error event went to the callback)
      return refuse("the node refused the turn (it is draining)");
    }
    return handle.id;
  }

  void end_turn(const request_event& last, const turn_record& record) {
    info_.busy = false;
    const auto& u = last.usage;
    info_.prefill_tokens += u.prefill_tokens;
    info_.completion_tokens += u.completion_tokens;
    info_.tool_calls += u.tool_calls;
    info_.device_s += std::max(0.0, u.total_s - u.queued_s - u.tool_s);
    if (last.kind != request_event::done)
      return; // the conversation stays where the last completed turn left it
    ++info_.turns;
    info_.history.insert(info_.history.end(), record.messages.begin(), record.messages.end());
    prior_ = last.conversation;
  }

  session_options options_;
  submit_function submit_;
  session_info info_;
  std::shared_ptr<const conversation_state> prior_; // where the last completed turn ended
};

} // namespace

caf::actor spawn_session(domain& home, session_options options, submit_function submit) {
  return home.spawn<session_actor>(std::move(options), std::move(submit));
}

} // namespace triad
