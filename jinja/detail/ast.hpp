#pragma once

#include <memory>
#include <string>
#include <vector>

#include "jinja/value.hpp"

namespace triad::jinja::detail {

/// An expression node.
struct expr {
  /// Node kinds.
  enum class kind {
    literal,  ///< `lit`
    name,     ///< `name`
    list,     ///< `args` as a list literal (also tuples)
    dict,     ///< `keys` / `args` pairs
    attr,     ///< `args[0].name`
    index,    ///< `args[0][args[1]]`
    slice,    ///< `args[0][args[1]:args[2]:args[3]]` (null parts absent)
    call,     ///< `args[0](args[1..], kwargs)`
    filter,   ///< `args[0] | name(args[1..], kwargs)`
    test,     ///< `args[0] is [not] name(args[1..])`
    unary,    ///< `op args[0]`: "not", "-", "+"
    binary,   ///< `args[0] op args[1]`
    ternary,  ///< `args[0] if args[1] else args[2]` (args[2] may be null)
  };
  kind k = kind::literal;
  value lit;                                   ///< literal
  std::string name;                            ///< name, attribute, filter, test or operator
  bool negated = false;                        ///< `is not`
  std::vector<std::unique_ptr<expr>> args;     ///< operands (null for absent slice parts)
  std::vector<std::string> keys;               ///< dict literal keys are expressions in args;
                                               ///< kwargs names here, values in kwargs
  std::vector<std::unique_ptr<expr>> kwargs;   ///< keyword argument values
  int line = 0;                                ///< where it starts
};

/// A statement node.
struct stmt {
  /// Node kinds.
  enum class kind { text, output, if_, for_, set, set_block, macro, break_, continue_ };
  kind k = kind::text;
  std::string text;                              ///< text
  std::unique_ptr<expr> e;                       ///< output / set value / for iterable
  std::vector<std::unique_ptr<expr>> conditions; ///< if: one per branch (else has none)
  std::vector<std::vector<std::unique_ptr<stmt>>> branches; ///< if branches, for body/else
  std::vector<std::string> targets;              ///< for / set names (tuple unpacking)
  std::unique_ptr<expr> target_object;           ///< set ns.attr: the object (attr in name)
  std::string name;                              ///< macro name, set attribute
  std::unique_ptr<expr> filter;                  ///< for ... if condition
  std::vector<std::string> params;               ///< macro parameters
  std::vector<std::unique_ptr<expr>> defaults;   ///< macro defaults (null: none)
  int line = 0;                                  ///< where it starts
};

/// A parsed template.
struct program {
  std::vector<std::unique_ptr<stmt>> body; ///< top-level statements
};

/// Parses a template source (after @huggingface/jinja's preprocessing).
expected<std::unique_ptr<program>> parse_program(std::string_view source);

} // namespace triad::jinja::detail
