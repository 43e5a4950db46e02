#include "cluster/detail/wire.hpp"

#include <cstring>
#include <span>

#include "grammar/automaton.hpp"
#include "runtime/checksum.hpp"

namespace triad::detail {

constraint_wire to_wire(const std::shared_ptr<grammar::token_constraint>& c) {
  constraint_wire w;
  if (!c)
    return w;
  auto origin = c->where_from();
  w.present = true;
  w.budget = origin.budget;
  w.free_until_call = origin.free_until_call;
  w.advanced = std::move(origin.advanced);
  const auto& g = *origin.rules;
  for (const auto& r : g.rules()) {
    w.rule_names.push_back(r.name);
    auto& alts = w.rules.emplace_back();
    for (const auto& seq : r.alternatives) {
      auto& out = alts.emplace_back();
      for (const auto& e : seq)
        out.push_back(e.index << 1 | (e.what == grammar::element::kind::rule ? 1u : 0u));
    }
  }
  w.sets.resize(g.sets().size() * 32);
  for (std::size_t i = 0; i < g.sets().size(); ++i)
    for (std::size_t b = 0; b < 256; ++b)
      if (g.sets()[i][b])
        w.sets[i * 32 + b / 8] = static_cast<char>(w.sets[i * 32 + b / 8] | (1 << (b % 8)));
  return w;
}

namespace {

// The data's hash: the key its grammar is kept under.
std::string wire_key(const constraint_wire& w) {
  std::string text = w.sets;
  for (std::size_t i = 0; i < w.rules.size(); ++i) {
    text += w.rule_names[i];
    text.push_back('\0');
    for (const auto& alt : w.rules[i]) {
      text.append(reinterpret_cast<const char*>(alt.data()), alt.size() * sizeof(std::uint32_t));
      text.push_back('|');
    }
    text.push_back(';');
  }
  auto sum = block_checksum(std::as_bytes(std::span{text}));
  return "cluster:" + std::to_string(sum) + ":" + std::to_string(text.size());
}

expected<std::shared_ptr<const grammar::grammar>> rebuild(const constraint_wire& w) {
  if (w.rules.empty() || w.rule_names.size() != w.rules.size() || w.sets.size() % 32 != 0)
    return make_error(errc::invalid_argument, "a constraint's grammar arrived malformed");
  grammar::grammar_builder b;
  for (const auto& name : w.rule_names)
    b.declare(name);
  std::vector<grammar::element> sets;
  for (std::size_t i = 0; i < w.sets.size() / 32; ++i) {
    grammar::byte_set set;
    for (std::size_t bit = 0; bit < 256; ++bit)
      set[bit] = (static_cast<unsigned char>(w.sets[i * 32 + bit / 8]) >> (bit % 8)) & 1u;
    sets.push_back(b.bytes(set));
  }
  for (std::size_t r = 0; r < w.rules.size(); ++r) {
    for (const auto& alt : w.rules[r]) {
      grammar::sequence seq;
      for (auto e : alt) {
        const auto index = e >> 1;
        if ((e & 1u) != 0) {
          if (index >= w.rules.size())
            return make_error(errc::invalid_argument, "a constraint's rule refers past its rules");
          seq.push_back(grammar::grammar_builder::ref(index));
        } else {
          if (index >= sets.size())
            return make_error(errc::invalid_argument, "a constraint's rule refers past its sets");
          seq.push_back(sets[index]);
        }
      }
      b.add(static_cast<std::uint32_t>(r), std::move(seq));
    }
  }
  return std::make_shared<const grammar::grammar>(b.finish());
}

} // namespace

expected<std::shared_ptr<grammar::token_constraint>>
from_wire(const constraint_wire& w, grammar::grammar_cache* cache,
          const std::shared_ptr<const grammar::token_index>& vocabulary) {
  if (!w.present)
    return std::shared_ptr<grammar::token_constraint>{};
  if (!vocabulary)
    return make_error(errc::unsupported, "a constrained sequence came to a node without the "
                                         "model's vocabulary");
  std::shared_ptr<const grammar::grammar> rules;
  const auto key = cache ? wire_key(w) : std::string{};
  if (cache)
    rules = cache->find(key);
  if (!rules) {
    auto built = rebuild(w);
    if (!built)
      return built.error();
    rules = cache ? cache->keep(key, std::move(*built)) : std::move(*built);
  }
  auto masks = cache ? cache->masks(rules, vocabulary)
                     : std::make_shared<grammar::mask_cache>(
                           std::make_shared<grammar::automaton>(rules), vocabulary);
  auto c = std::make_shared<grammar::token_constraint>(std::move(masks), w.budget);
  if (w.free_until_call)
    c->free_until_call();
  for (auto t : w.advanced)
    if (!c->advance(t))
      return make_error(errc::invalid_argument, "a constraint's grammar refused token " +
                                                    std::to_string(t) + " it had moved on by");
  return c;
}

std::string cluster_app_identifier() {
  return "triad-cluster/" + std::to_string(cluster_protocol);
}

void speak_cluster_protocol(caf::actor_system_config& cfg) {
  cfg.set("middleman.app-identifiers", std::vector<std::string>{cluster_app_identifier()});
  cfg.add_message_type<generate_request>("triad.generate_request");
  cfg.add_message_type<admission>("triad.admission");
  cfg.add_message_type<device_event>("triad.device_event");
  cfg.add_message_type<kv_blob>("triad.kv_blob");
  cfg.add_message_type<kv_kept>("triad.kv_kept");
  cfg.add_message_type<device_stats>("triad.device_stats");
  cfg.add_message_type<std::vector<token>>("triad.tokens");
  cfg.add_message_type<std::vector<std::uint64_t>>("triad.block_ids");
  cfg.add_message_type<constraint_wire>("triad.constraint_wire");
  cfg.add_message_type<node_hello>("triad.node_hello");
}

} // namespace triad::detail
