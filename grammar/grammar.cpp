#include "grammar/grammar.hpp"

#include <algorithm>
#include <cstdio>

namespace triad::grammar {

namespace {

// A byte set as a character class: [a-z0-9_], [^"\\], or one quoted byte.
std::string class_text(const byte_set& s) {
  auto show = [](unsigned c) {
    if (c >= 0x21 && c < 0x7f && c != '[' && c != ']' && c != '^' && c != '-' && c != '\\' &&
        c != '"')
      return std::string(1, static_cast<char>(c));
    char buf[8];
    std::snprintf(buf, sizeof buf, "\\x%02x", c);
    return std::string{buf};
  };
  // Appends, not `"lit" + std::string`: GCC 12 warns falsely (-Wrestrict) on that at -O3.
  std::string out;
  if (s.count() == 1) {
    for (unsigned c = 0; c < 256; ++c)
      if (s[c]) {
        out += '\'';
        out += show(c);
        out += '\'';
      }
    return out;
  }
  const bool negate = s.count() > 128;
  out += negate ? "[^" : "[";
  for (unsigned c = 0; c < 256;) {
    if (s[c] == negate) {
      ++c;
      continue;
    }
    unsigned e = c;
    while (e + 1 < 256 && s[e + 1] != negate)
      ++e;
    out += show(c);
    if (e > c + 1)
      out += '-';
    if (e > c)
      out += show(e);
    c = e + 1;
  }
  out += ']';
  return out;
}

} // namespace

std::string grammar::to_string() const {
  std::string out;
  for (const auto& r : rules_) {
    out += r.name + " ::=";
    for (std::size_t a = 0; a < r.alternatives.size(); ++a) {
      out += a == 0 ? " " : " | ";
      if (r.alternatives[a].empty())
        out += "\"\"";
      for (std::size_t i = 0; i < r.alternatives[a].size(); ++i) {
        const auto& e = r.alternatives[a][i];
        if (i > 0)
          out += ' ';
        out += e.what == element::kind::rule ? rules_[e.index].name : class_text(sets_[e.index]);
      }
    }
    out += '\n';
  }
  return out;
}

std::uint32_t grammar_builder::declare(std::string name) {
  g_.rules_.push_back(rule{std::move(name), {}});
  return static_cast<std::uint32_t>(g_.rules_.size() - 1);
}

void grammar_builder::add(std::uint32_t r, sequence alternative) {
  elements_ += alternative.size() + 1;
  g_.rules_[r].alternatives.push_back(std::move(alternative));
}

bool grammar_builder::productive(std::uint32_t r) const {
  // The least fixpoint: a rule is productive when one alternative has only bytes and
  // productive rules.
  const auto& rules = g_.rules_;
  std::vector<bool> yes(rules.size(), false);
  for (bool changed = true; changed;) {
    changed = false;
    for (std::size_t i = 0; i < rules.size(); ++i) {
      if (yes[i])
        continue;
      for (const auto& alt : rules[i].alternatives)
        if (std::all_of(alt.begin(), alt.end(), [&](const element& e) {
              return e.what == element::kind::bytes || yes[e.index];
            })) {
          yes[i] = changed = true;
          break;
        }
    }
  }
  return yes[r];
}

element grammar_builder::bytes(const byte_set& set) {
  auto it = std::find(g_.sets_.begin(), g_.sets_.end(), set);
  if (it == g_.sets_.end()) {
    g_.sets_.push_back(set);
    it = g_.sets_.end() - 1;
  }
  return {element::kind::bytes, static_cast<std::uint32_t>(it - g_.sets_.begin())};
}

element grammar_builder::byte(unsigned char c) {
  byte_set s;
  s.set(c);
  return bytes(s);
}

sequence grammar_builder::literal(std::string_view text) {
  sequence out;
  out.reserve(text.size());
  for (char c : text)
    out.push_back(byte(static_cast<unsigned char>(c)));
  return out;
}

element grammar_builder::repeat(const element& e, std::size_t min, std::size_t max, bool unbounded,
                                std::string name) {
  // The tail after the required `min`: `max - min` nested optionals, or a loop.
  std::uint32_t tail = declare(name + "_tail");
  if (unbounded) {
    add(tail, {e, ref(tail)});
    add(tail, {});
  } else {
    // opt_k ::= e opt_{k-1} | "" with opt_0 ::= "".
    add(tail, {});
    for (std::size_t k = min; k < max; ++k) {
      std::uint32_t next = declare(name + "_upto" + std::to_string(max - k));
      add(next, {e, ref(tail)});
      add(next, {});
      tail = next;
    }
  }
  std::uint32_t r = declare(std::move(name));
  sequence all(min, e);
  all.push_back(ref(tail));
  add(r, std::move(all));
  return ref(r);
}

element grammar_builder::optional(const element& e, std::string name) {
  std::uint32_t r = declare(std::move(name));
  add(r, {e});
  add(r, {});
  return ref(r);
}

element grammar_builder::choice(std::vector<sequence> alternatives, std::string name) {
  std::uint32_t r = declare(std::move(name));
  for (auto& a : alternatives)
    add(r, std::move(a));
  return ref(r);
}

grammar grammar_builder::finish() {
  grammar out = std::move(g_);
  g_ = grammar{};
  elements_ = 0;
  return out;
}

} // namespace triad::grammar
