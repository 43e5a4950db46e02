// Embeds a triad node, registers a custom tool, runs one agent session and prints its events.
// The node is the embedded default (one cpu prefill and one cpu decode device running the
// `tiny` preset with random weights), so the agent's words are scripted: every token is still
// computed on the devices, only its choice is forced, and the tool calls are real.
//
//   triad-example-agent-session [--calls N]

#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <string>

#include <CLI/CLI.hpp>
#include <boost/json.hpp>

#include "actors/chat.hpp"
#include "actors/node.hpp"
#include "runtime/main_guard.hpp"
#include "tools/registry.hpp"

namespace json = boost::json;

namespace {

int run(int argc, char** argv) {
  CLI::App app{"triad example: an agent session with a custom tool on an embedded node"};
  int calls = 2;
  app.add_option("--calls", calls, "tool calls the agent makes")->check(CLI::Range(0, 16));
  CLI11_PARSE(app, argc, argv);

  // A custom tool: counts the words of a text.
  auto tools = std::make_shared<triad::tool_registry>();
  auto added =
      tools->add({"word_count", "Counts the words of a text.",
                  json::parse(R"({"type": "object", "required": ["text"],
                       "properties": {"text": {"type": "string", "maxLength": 10000}}})")
                      .as_object()},
                 [](const json::object& args) -> triad::expected<triad::tool_output> {
                   std::string text{args.at("text").as_string()};
                   std::size_t words = 0;
                   bool in_word = false;
                   for (char c : text) {
                     bool letter = c != ' ' && c != '\n' && c != '\t';
                     words += letter && !in_word;
                     in_word = letter;
                   }
                   return triad::tool_output{std::to_string(words) + " words", {{"words", words}}};
                 });
  if (!added) {
    std::fprintf(stderr, "example: %s\n", added.error().message.c_str());
    return 1;
  }

  auto config = triad::default_config();
  for (auto& d : config.devices)
    d.memory_mib = 256;
  triad::node_options options;
  options.tools = tools;
  config.orchestration.kv = triad::kv_policy::pin; // the default; "discard" and "demote" too
  auto node = triad::node::start(config, options);
  if (!node) {
    std::fprintf(stderr, "example: the node did not start: %s\n", node.error().message.c_str());
    return 1;
  }
  for (const auto& d : (*node)->placement().devices)
    std::printf("device %s: domain %u, driver core %u\n", d.name.c_str(), d.domain, d.driver_core);

  triad::chat_request request;
  request.session = "example";
  request.messages = {{"system", "You are a helpful agent."},
                      {"user", "How many words are in the README's first line?"}};
  triad::generation_script script;
  for (int i = 0; i < calls; ++i)
    script.turns.push_back(
        {12, triad::tool_call_text{"word_count", R"({"text": "triad serves agents fast"})"}});
  script.turns.push_back({16, std::nullopt});
  request.script = script;
  request.max_tokens = triad::script_length(script);

  std::mutex m;
  std::condition_variable cv;
  bool ended = false, ok = false;
  std::string text;
  (*node)->submit(request, [&](const triad::request_event& e) {
    std::lock_guard<std::mutex> guard{m};
    switch (e.kind) {
    case triad::request_event::token:
      text += e.text;
      return;
    case triad::request_event::tool_call:
      std::printf("text: %s\ntool call: %s %s\n", text.c_str(), e.tool_name.c_str(),
                  e.arguments_json.c_str());
      text.clear();
      return;
    case triad::request_event::tool_result:
      std::printf("tool result: %s\n", e.tool_output.c_str());
      return;
    case triad::request_event::state:
      std::printf("[%s]\n", std::string{to_string(e.entered)}.c_str());
      return;
    case triad::request_event::tool_call_delta: // the whole call follows
      return;
    case triad::request_event::done:
      std::printf("text: %s\ndone (%s): %llu prompt tokens, %llu generated, %llu prefilled, "
                  "%u tool calls, %.3f s (first token %.3f s, tools %.3f s)\n",
                  text.c_str(), std::string{to_string(e.finish)}.c_str(),
                  static_cast<unsigned long long>(e.usage.prompt_tokens),
                  static_cast<unsigned long long>(e.usage.completion_tokens),
                  static_cast<unsigned long long>(e.usage.prefill_tokens), e.usage.tool_calls,
                  e.usage.total_s, e.usage.ttft_s, e.usage.tool_s);
      ok = e.usage.tool_calls == static_cast<std::uint32_t>(calls);
      break;
    case triad::request_event::error:
      std::printf("error: %s\n", e.message.c_str());
      break;
    }
    ended = true;
    cv.notify_all();
  });
  std::unique_lock<std::mutex> lock{m};
  cv.wait(lock, [&] { return ended; });
  lock.unlock();
  (*node)->stop();
  return ok ? 0 : 1;
}

} // namespace

int main(int argc, char** argv) {
  return triad::guarded_main("agent_session", argc, argv, run);
}
