#include "jinja/template.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <ctime>
#include <limits>
#include <unordered_map>

#include "jinja/detail/ast.hpp"
#include "runtime/utf8.hpp"

namespace triad::jinja {

namespace {

using detail::expr;
using detail::stmt;

// Variables of one scope; lookups walk to the parents.
struct frame {
  std::unordered_map<std::string, value> vars;
  frame* parent = nullptr;

  const value* find(const std::string& name) const {
    for (const frame* f = this; f != nullptr; f = f->parent)
      if (auto it = f->vars.find(name); it != f->vars.end())
        return &it->second;
    return nullptr;
  }
};

enum class flow { normal, break_, continue_ };

std::string kind_name(const value& v) {
  switch (v.k) {
  case value::kind::undefined: return "undefined";
  case value::kind::none: return "none";
  case value::kind::boolean: return "bool";
  case value::kind::integer: return "integer";
  case value::kind::number: return "float";
  case value::kind::string: return "string";
  case value::kind::list: return "list";
  case value::kind::dict: return "dict";
  case value::kind::callable: return "function";
  }
  return "value";
}

error type_error(int line, const std::string& what) {
  return make_error(errc::invalid_argument, "template line " + std::to_string(line) + ": " + what);
}

bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

// The byte length of the JavaScript whitespace character (String.prototype.trim's set: ASCII
// spaces and line ends, U+00A0, U+1680, U+2000-U+200A, U+2028, U+2029, U+202F, U+205F, U+3000,
// U+FEFF) starting at byte `i`; 0 when there is none.
std::size_t js_space_at(const std::string& s, std::size_t i) {
  const auto c = static_cast<unsigned char>(s[i]);
  if (c < 0x80)
    return is_space(static_cast<char>(c)) ? 1 : 0;
  std::size_t len = (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : 0;
  if (len == 0 || i + len > s.size())
    return 0;
  std::uint32_t cp = c & (len == 2 ? 0x1f : 0x0f);
  for (std::size_t k = 1; k < len; ++k) {
    const auto b = static_cast<unsigned char>(s[i + k]);
    if ((b & 0xc0) != 0x80)
      return 0;
    cp = (cp << 6) | (b & 0x3f);
  }
  const bool space = cp == 0xa0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200a) ||
                     cp == 0x2028 || cp == 0x2029 || cp == 0x202f || cp == 0x205f ||
                     cp == 0x3000 || cp == 0xfeff;
  return space ? len : 0;
}

// JavaScript's trim / trimStart / trimEnd, which @huggingface/jinja's strip, lstrip, rstrip and
// trim are (characters named as arguments are ignored, as there).
std::string strip(const std::string& s, const value&, bool left, bool right) {
  std::size_t a = 0, b = s.size();
  if (left)
    while (a < b) {
      auto n = js_space_at(s, a);
      if (n == 0)
        break;
      a += n;
    }
  if (right)
    while (b > a) {
      std::size_t start = b - 1;
      while (start > a && (static_cast<unsigned char>(s[start]) & 0xc0) == 0x80 && b - start < 4)
        --start;
      auto n = js_space_at(s, start);
      if (n == 0 || start + n != b)
        break;
      b = start;
    }
  return s.substr(a, b - a);
}

// The items a for loop or filter walks: a list's elements, a dict's keys, a string's chars.
expected<array> iterate(const value& v, int line) {
  if (v.is_list())
    return *v.items;
  if (v.is_dict()) {
    array out;
    for (const auto& [k, e] : *v.members)
      out.push_back(value::string(k));
    return out;
  }
  if (v.is_string()) {
    array out;
    for (std::size_t i = 0; i < v.s.size();) {
      auto c = static_cast<unsigned char>(v.s[i]);
      // A stray continuation or invalid lead byte is a character of its own.
      std::size_t len = utf8_length(c);
      out.push_back(value::string(v.s.substr(i, len)));
      i += len;
    }
    return out;
  }
  if (v.is_undefined() || v.is_none())
    return array{};
  return type_error(line, "cannot iterate over a " + kind_name(v));
}

value arg(const std::vector<value>& args, const kwargs& kw, std::size_t i, std::string_view name) {
  if (i < args.size())
    return args[i];
  for (const auto& [k, v] : kw)
    if (k == name)
      return v;
  return {};
}

// What one render may spend: hostile templates end with an error instead of exhausting the
// stack, the memory or the time of the process.
struct budget {
  static constexpr int max_depth = 64;                 // nested macro calls and set blocks
  static constexpr std::size_t max_output = 16u << 20; // bytes of any rendered text
  static constexpr std::uint64_t max_steps = 10'000'000; // statements and loop iterations
  int depth = 0;
  std::uint64_t steps = 0;
  frame* globals = nullptr; // the template's top-level variables (macros close over them)
};

class renderer {
public:
  renderer(std::string& out, budget& limits)
      : out_(out)
      , budget_(limits) {}

  expected<flow> run(const std::vector<std::unique_ptr<stmt>>& body, frame& f) {
    for (const auto& s : body) {
      if (++budget_.steps > budget::max_steps)
        return type_error(s->line, "the template runs more than " +
                                       std::to_string(budget::max_steps) + " steps");
      auto r = exec(*s, f);
      if (!r || *r != flow::normal)
        return r;
      if (out_.size() > budget::max_output)
        return type_error(s->line, "the template renders more than " +
                                       std::to_string(budget::max_output) + " bytes");
    }
    return flow::normal;
  }

private:
  expected<flow> exec(const stmt& s, frame& f) {
    switch (s.k) {
    case stmt::kind::text:
      out_ += s.text;
      return flow::normal;
    case stmt::kind::output: {
      auto v = eval(*s.e, f);
      if (!v)
        return v.error();
      out_ += to_output(*v);
      return flow::normal;
    }
    case stmt::kind::if_:
      for (std::size_t i = 0; i < s.branches.size(); ++i) {
        if (i < s.conditions.size()) {
          auto c = eval(*s.conditions[i], f);
          if (!c)
            return c.error();
          if (!c->truthy())
            continue;
        }
        return run(s.branches[i], f);
      }
      return flow::normal;
    case stmt::kind::for_:
      return exec_for(s, f);
    case stmt::kind::set: {
      auto v = eval(*s.e, f);
      if (!v)
        return v.error();
      return assign(s, f, std::move(*v));
    }
    case stmt::kind::set_block: {
      std::string captured;
      if (++budget_.depth > budget::max_depth)
        return type_error(s.line, "blocks nest deeper than " + std::to_string(budget::max_depth));
      renderer inner{captured, budget_};
      auto r = inner.run(s.branches[0], f);
      --budget_.depth;
      if (!r)
        return r.error();
      return assign(s, f, value::string(std::move(captured)));
    }
    case stmt::kind::macro: {
      // A macro sees the template's top-level variables and its arguments (it is called after
      // the scope it was written in may be gone); it renders with the caller's budget.
      const stmt* m = &s;
      budget* limits = &budget_;
      f.vars[s.name] = value::callable(
          [m, limits](std::vector<value> args, kwargs kw) -> expected<value> {
            if (limits->depth + 1 > budget::max_depth)
              return type_error(m->line, "macro calls nest deeper than " +
                                             std::to_string(budget::max_depth));
            ++limits->depth;
            frame local;
            local.parent = limits->globals;
            std::string captured;
            renderer inner{captured, *limits};
            for (std::size_t i = 0; i < m->params.size(); ++i) {
              value v = arg(args, kw, i, m->params[i]);
              if (v.is_undefined() && m->defaults[i]) {
                auto d = inner.eval(*m->defaults[i], local);
                if (!d) {
                  --limits->depth;
                  return d.error();
                }
                v = std::move(*d);
              }
              local.vars[m->params[i]] = std::move(v);
            }
            auto r = inner.run(m->branches[0], local);
            --limits->depth;
            if (!r)
              return r.error();
            return value::string(std::move(captured));
          });
      return flow::normal;
    }
    case stmt::kind::break_:
      return flow::break_;
    case stmt::kind::continue_:
      return flow::continue_;
    }
    return flow::normal;
  }

  expected<flow> assign(const stmt& s, frame& f, value v) {
    if (s.target_object) {
      auto obj = eval(*s.target_object, f);
      if (!obj)
        return obj.error();
      if (!obj->is_dict())
        return type_error(s.line, "cannot set attribute '" + s.name + "' of a " + kind_name(*obj));
      obj->set(s.name, std::move(v));
      return flow::normal;
    }
    if (s.targets.size() == 1) {
      f.vars[s.targets[0]] = std::move(v);
      return flow::normal;
    }
    auto items = iterate(v, s.line);
    if (!items)
      return items.error();
    if (items->size() != s.targets.size())
      return type_error(s.line, "cannot unpack " + std::to_string(items->size()) + " values into " +
                                    std::to_string(s.targets.size()) + " names");
    for (std::size_t i = 0; i < items->size(); ++i)
      f.vars[s.targets[i]] = (*items)[i];
    return flow::normal;
  }

  expected<flow> exec_for(const stmt& s, frame& f) {
    auto iterable = eval(*s.e, f);
    if (!iterable)
      return iterable.error();
    auto all = iterate(*iterable, s.line);
    if (!all)
      return all.error();
    frame local;
    local.parent = &f;
    auto bind = [&](const value& item) -> expected<void> {
      if (s.targets.size() == 1) {
        local.vars[s.targets[0]] = item;
        return {};
      }
      auto parts = iterate(item, s.line);
      if (!parts)
        return parts.error();
      if (parts->size() != s.targets.size())
        return type_error(s.line, "cannot unpack " + std::to_string(parts->size()) +
                                      " values into " + std::to_string(s.targets.size()) + " names");
      for (std::size_t i = 0; i < parts->size(); ++i)
        local.vars[s.targets[i]] = (*parts)[i];
      return {};
    };
    array items;
    if (s.filter) {
      for (const auto& item : *all) {
        if (auto ok = bind(item); !ok)
          return ok.error();
        auto keep = eval(*s.filter, local);
        if (!keep)
          return keep.error();
        if (keep->truthy())
          items.push_back(item);
      }
    } else {
      items = std::move(*all);
    }
    // As @huggingface/jinja: an iteration that breaks or continues loses its output, and the
    // else block runs when no iteration ran to its end.
    bool none_completed = true;
    const auto n = static_cast<std::int64_t>(items.size());
    for (std::int64_t i = 0; i < n; ++i) {
      if (auto ok = bind(items[static_cast<std::size_t>(i)]); !ok)
        return ok.error();
      object loop{{"index", value::integer(i + 1)},
                  {"index0", value::integer(i)},
                  {"revindex", value::integer(n - i)},
                  {"revindex0", value::integer(n - i - 1)},
                  {"first", value::boolean(i == 0)},
                  {"last", value::boolean(i == n - 1)},
                  {"length", value::integer(n)},
                  {"previtem", i > 0 ? items[static_cast<std::size_t>(i - 1)] : value{}},
                  {"nextitem", i + 1 < n ? items[static_cast<std::size_t>(i + 1)] : value{}}};
      local.vars["loop"] = value::dict(std::move(loop));
      const std::size_t mark = out_.size();
      auto r = run(s.branches[0], local);
      if (!r)
        return r.error();
      if (*r != flow::normal)
        out_.resize(mark);
      if (*r == flow::break_)
        break;
      if (*r == flow::continue_)
        continue;
      none_completed = false;
    }
    if (none_completed && s.branches.size() > 1)
      return run(s.branches[1], f);
    return flow::normal;
  }

  // -- expressions --

  expected<value> eval(const expr& e, frame& f) {
    switch (e.k) {
    case expr::kind::literal:
      return e.lit;
    case expr::kind::name: {
      if (const auto* v = f.find(e.name))
        return *v;
      return global(e.name);
    }
    case expr::kind::list: {
      array out;
      for (const auto& a : e.args) {
        auto v = eval(*a, f);
        if (!v)
          return v;
        out.push_back(std::move(*v));
      }
      return value::list(std::move(out));
    }
    case expr::kind::dict: {
      auto out = value::dict();
      for (std::size_t i = 0; i + 1 < e.args.size(); i += 2) {
        auto k = eval(*e.args[i], f);
        if (!k)
          return k;
        auto v = eval(*e.args[i + 1], f);
        if (!v)
          return v;
        out.set(to_output(*k), std::move(*v));
      }
      return out;
    }
    case expr::kind::attr: {
      auto obj = eval(*e.args[0], f);
      if (!obj)
        return obj;
      return member(*obj, e.name, e.line);
    }
    case expr::kind::index: {
      auto obj = eval(*e.args[0], f);
      if (!obj)
        return obj;
      auto key = eval(*e.args[1], f);
      if (!key)
        return key;
      if (key->is_string())
        return member(*obj, key->s, e.line);
      if (key->k == value::kind::integer && (obj->is_list() || obj->is_string())) {
        auto items = iterate(*obj, e.line);
        if (!items)
          return items.error();
        auto size = static_cast<std::int64_t>(items->size());
        auto i = key->i < 0 ? key->i + size : key->i;
        if (i < 0 || i >= size)
          return value{};
        return (*items)[static_cast<std::size_t>(i)];
      }
      return value{};
    }
    case expr::kind::slice:
      return slice(e, f);
    case expr::kind::call: {
      auto fn = eval(*e.args[0], f);
      if (!fn)
        return fn;
      if (fn->k != value::kind::callable)
        return type_error(e.line, "a " + kind_name(*fn) + " is not callable");
      auto a = arguments(e, f);
      if (!a)
        return a.error();
      return (*fn->fn)(std::move(a->first), std::move(a->second));
    }
    case expr::kind::filter:
    case expr::kind::test: {
      auto subject = eval(*e.args[0], f);
      if (!subject)
        return subject;
      auto a = arguments(e, f);
      if (!a)
        return a.error();
      if (e.k == expr::kind::filter)
        return filter(e.name, *subject, a->first, a->second, e.line);
      auto r = test(e.name, *subject, a->first, e.line);
      if (!r)
        return r.error();
      return value::boolean(*r != e.negated);
    }
    case expr::kind::unary: {
      auto v = eval(*e.args[0], f);
      if (!v)
        return v;
      if (e.name == "not")
        return value::boolean(!v->truthy());
      if (v->k == value::kind::integer && v->i != std::numeric_limits<std::int64_t>::min())
        return value::integer(e.name == "-" ? -v->i : v->i);
      if (v->k == value::kind::integer)
        return value::number(e.name == "-" ? -static_cast<double>(v->i) : static_cast<double>(v->i));
      if (v->k == value::kind::number)
        return value::number(e.name == "-" ? -v->d : v->d);
      return type_error(e.line, "unary " + e.name + " of a " + kind_name(*v));
    }
    case expr::kind::binary:
      return binary(e, f);
    case expr::kind::ternary: {
      auto c = eval(*e.args[1], f);
      if (!c)
        return c;
      if (c->truthy())
        return eval(*e.args[0], f);
      if (e.args[2])
        return eval(*e.args[2], f);
      return value{};
    }
    }
    return value{};
  }

  // The arguments of a call, filter or test: positional ones after `args[0]` (the callee or
  // subject), then keywords.
  expected<std::pair<std::vector<value>, kwargs>> arguments(const expr& e, frame& f) {
    std::pair<std::vector<value>, kwargs> out;
    for (std::size_t i = 1; i < e.args.size(); ++i) {
      auto v = eval(*e.args[i], f);
      if (!v)
        return v.error();
      out.first.push_back(std::move(*v));
    }
    for (std::size_t i = 0; i < e.kwargs.size(); ++i) {
      auto v = eval(*e.kwargs[i], f);
      if (!v)
        return v.error();
      out.second.emplace_back(e.keys[i], std::move(*v));
    }
    return out;
  }

  expected<value> slice(const expr& e, frame& f) {
    auto obj = eval(*e.args[0], f);
    if (!obj)
      return obj;
    std::int64_t part[3] = {0, 0, 1};
    bool given[3] = {false, false, false};
    for (int i = 0; i < 3; ++i)
      if (e.args[static_cast<std::size_t>(i) + 1]) {
        auto v = eval(*e.args[static_cast<std::size_t>(i) + 1], f);
        if (!v)
          return v;
        if (v->k != value::kind::integer)
          return type_error(e.line, "slice bounds must be integers");
        part[i] = v->i;
        given[i] = true;
      }
    auto items = iterate(*obj, e.line);
    if (!items)
      return items.error();
    const auto n = static_cast<std::int64_t>(items->size());
    const std::int64_t step = part[2];
    if (step == 0)
      return type_error(e.line, "slice step cannot be zero");
    auto clamp = [&](std::int64_t v, std::int64_t lo, std::int64_t hi) {
      if (v < 0)
        v += n;
      return std::clamp(v, lo, hi);
    };
    std::int64_t start, stop;
    if (step > 0) {
      start = given[0] ? clamp(part[0], 0, n) : 0;
      stop = given[1] ? clamp(part[1], 0, n) : n;
    } else {
      start = given[0] ? clamp(part[0], -1, n - 1) : n - 1;
      stop = given[1] ? clamp(part[1], -1, n - 1) : -1;
    }
    array out;
    for (__int128 i = start; step > 0 ? i < stop : i > stop; i += step)
      out.push_back((*items)[static_cast<std::size_t>(i)]);
    if (obj->is_string()) {
      std::string s;
      for (const auto& c : out)
        s += c.s;
      return value::string(std::move(s));
    }
    return value::list(std::move(out));
  }

  expected<value> binary(const expr& e, frame& f) {
    auto a = eval(*e.args[0], f);
    if (!a)
      return a;
    const std::string& op = e.name;
    if (op == "and") {
      if (!a->truthy())
        return a;
      return eval(*e.args[1], f);
    }
    if (op == "or") {
      if (a->truthy())
        return a;
      return eval(*e.args[1], f);
    }
    auto b = eval(*e.args[1], f);
    if (!b)
      return b;
    if (op == "==")
      return value::boolean(equal(*a, *b));
    if (op == "!=")
      return value::boolean(!equal(*a, *b));
    if (op == "~")
      return value::string(to_output(*a) + to_output(*b));
    if (op == "in" || op == "not in") {
      bool found = false;
      if (b->is_string() && a->is_string())
        found = b->s.find(a->s) != std::string::npos;
      else if (b->is_list())
        found = std::any_of(b->items->begin(), b->items->end(),
                            [&](const value& x) { return equal(x, *a); });
      else if (b->is_dict() && a->is_string())
        found = std::any_of(b->members->begin(), b->members->end(),
                            [&](const auto& kv) { return kv.first == a->s; });
      else if (!b->is_undefined() && !b->is_none())
        return type_error(e.line, "'in' of a " + kind_name(*a) + " in a " + kind_name(*b));
      return value::boolean(found != (op == "not in"));
    }
    if (op == "+" && a->is_string() && b->is_string())
      return value::string(a->s + b->s);
    if (op == "+" && a->is_list() && b->is_list()) {
      array out = *a->items;
      out.insert(out.end(), b->items->begin(), b->items->end());
      return value::list(std::move(out));
    }
    if (op == "*" && a->is_string() && b->k == value::kind::integer) {
      if (b->i > 0 && a->s.size() * static_cast<__int128>(b->i) > budget::max_output)
        return type_error(e.line, "a repeated string longer than " +
                                      std::to_string(budget::max_output) + " bytes");
      std::string out;
      for (std::int64_t i = 0; i < b->i; ++i)
        out += a->s;
      return value::string(std::move(out));
    }
    if (a->is_string() && b->is_string() && (op == "<" || op == ">" || op == "<=" || op == ">=")) {
      int c = a->s.compare(b->s);
      return value::boolean(op == "<" ? c < 0 : op == ">" ? c > 0 : op == "<=" ? c <= 0 : c >= 0);
    }
    if (!a->is_number() || !b->is_number())
      return type_error(e.line, "'" + op + "' of a " + kind_name(*a) + " and a " + kind_name(*b));
    const bool ints = a->k == value::kind::integer && b->k == value::kind::integer;
    const double x = a->as_double(), y = b->as_double();
    if (op == "<") return value::boolean(x < y);
    if (op == ">") return value::boolean(x > y);
    if (op == "<=") return value::boolean(x <= y);
    if (op == ">=") return value::boolean(x >= y);
    // Integers that overflow int64 become floats (as the JavaScript reference's numbers are).
    std::int64_t r = 0;
    if (op == "+")
      return ints && !__builtin_add_overflow(a->i, b->i, &r) ? value::integer(r) : value::number(x + y);
    if (op == "-")
      return ints && !__builtin_sub_overflow(a->i, b->i, &r) ? value::integer(r) : value::number(x - y);
    if (op == "*")
      return ints && !__builtin_mul_overflow(a->i, b->i, &r) ? value::integer(r) : value::number(x * y);
    if (op == "/") {
      if (y == 0)
        return type_error(e.line, "division by zero");
      return value::number(x / y);
    }
    if (op == "//" || op == "%") {
      if (y == 0)
        return type_error(e.line, "division by zero");
      if (ints && !(a->i == std::numeric_limits<std::int64_t>::min() && b->i == -1)) {
        std::int64_t q = a->i / b->i, rem = a->i % b->i;
        if (rem != 0 && ((rem < 0) != (b->i < 0))) {
          --q;
          rem += b->i;
        }
        return value::integer(op == "//" ? q : rem);
      }
      return value::number(op == "//" ? std::floor(x / y) : x - std::floor(x / y) * y);
    }
    if (op == "**") {
      const double p = std::pow(x, y);
      return ints && b->i >= 0 && std::fabs(p) < 9.0e18 ? value::integer(static_cast<std::int64_t>(p))
                                                       : value::number(p);
    }
    return type_error(e.line, "unknown operator '" + op + "'");
  }

  // -- members: dict keys, then the methods of strings, dicts and lists --

  expected<value> member(const value& obj, const std::string& name, int line) {
    if (obj.is_dict()) {
      for (const auto& [k, v] : *obj.members)
        if (k == name)
          return v;
      if (name == "items" || name == "keys" || name == "values" || name == "get")
        return dict_method(obj, name);
      return value{};
    }
    if (obj.is_string())
      return string_method(obj.s, name, line);
    if (obj.is_list())
      return list_method(obj, name, line);
    return value{};
  }

  value dict_method(const value& obj, const std::string& name) {
    return value::callable([obj, name](std::vector<value> args, kwargs kw) -> expected<value> {
      if (name == "get") {
        auto v = obj.get(arg(args, kw, 0, "key").s);
        if (v.is_undefined()) {
          auto d = arg(args, kw, 1, "default");
          return d.is_undefined() ? value::none() : d;
        }
        return v;
      }
      array out;
      for (const auto& [k, v] : *obj.members) {
        if (name == "items")
          out.push_back(value::list({value::string(k), v}));
        else if (name == "keys")
          out.push_back(value::string(k));
        else
          out.push_back(v);
      }
      return value::list(std::move(out));
    });
  }

  expected<value> list_method(const value& obj, const std::string& name, int line) {
    if (name == "append")
      return value::callable([obj](std::vector<value> args, kwargs) -> expected<value> {
        for (auto& a : args)
          obj.items->push_back(std::move(a));
        return value::none();
      });
    if (name == "pop")
      return value::callable([obj](std::vector<value> args, kwargs) -> expected<value> {
        if (obj.items->empty())
          return value{};
        auto n = static_cast<std::int64_t>(obj.items->size());
        std::int64_t i = args.empty() ? n - 1 : (args[0].i < 0 ? args[0].i + n : args[0].i);
        if (i < 0 || i >= n)
          return value{};
        auto v = (*obj.items)[static_cast<std::size_t>(i)];
        obj.items->erase(obj.items->begin() + i);
        return v;
      });
    return type_error(line, "lists have no method '" + name + "'");
  }

  expected<value> string_method(const std::string& s, const std::string& name, int line) {
    // As @huggingface/jinja: whitespace is stripped whatever characters are named.
    if (name == "strip" || name == "lstrip" || name == "rstrip")
      return value::callable([s, name](std::vector<value>, kwargs) -> expected<value> {
        return value::string(strip(s, value{}, name != "rstrip", name != "lstrip"));
      });
    if (name == "upper" || name == "lower")
      return value::callable([s, name](std::vector<value>, kwargs) -> expected<value> {
        std::string out = s;
        for (auto& c : out)
          c = static_cast<char>(name == "upper" ? std::toupper(static_cast<unsigned char>(c))
                                                : std::tolower(static_cast<unsigned char>(c)));
        return value::string(std::move(out));
      });
    if (name == "startswith" || name == "endswith")
      return value::callable([s, name](std::vector<value> args, kwargs kw) -> expected<value> {
        auto p = arg(args, kw, 0, "prefix");
        auto one = [&](const std::string& x) {
          return name == "startswith" ? s.compare(0, x.size(), x) == 0 && s.size() >= x.size()
                                      : s.size() >= x.size() &&
                                            s.compare(s.size() - x.size(), x.size(), x) == 0;
        };
        if (p.is_list())
          return value::boolean(std::any_of(p.items->begin(), p.items->end(),
                                            [&](const value& x) { return one(x.s); }));
        return value::boolean(one(p.s));
      });
    if (name == "split")
      return value::callable([s](std::vector<value> args, kwargs kw) -> expected<value> {
        auto sep = arg(args, kw, 0, "sep");
        auto max = arg(args, kw, 1, "maxsplit");
        std::int64_t limit = max.k == value::kind::integer ? max.i : -1;
        array out;
        if (!sep.is_string()) { // on whitespace runs, dropping empty pieces
          std::size_t i = 0;
          while (i < s.size()) {
            while (i < s.size() && is_space(s[i]))
              ++i;
            if (i >= s.size())
              break;
            if (limit >= 0 && static_cast<std::int64_t>(out.size()) == limit) {
              out.push_back(value::string(s.substr(i)));
              break;
            }
            std::size_t j = i;
            while (j < s.size() && !is_space(s[j]))
              ++j;
            out.push_back(value::string(s.substr(i, j - i)));
            i = j;
          }
          return value::list(std::move(out));
        }
        if (sep.s.empty())
          return make_error(errc::invalid_argument, "split: empty separator");
        std::size_t i = 0;
        while (true) {
          auto j = s.find(sep.s, i);
          if (j == std::string::npos || (limit >= 0 && static_cast<std::int64_t>(out.size()) == limit)) {
            out.push_back(value::string(s.substr(i)));
            break;
          }
          out.push_back(value::string(s.substr(i, j - i)));
          i = j + sep.s.size();
        }
        return value::list(std::move(out));
      });
    if (name == "replace")
      return value::callable([s](std::vector<value> args, kwargs kw) -> expected<value> {
        return value::string(replace_all(s, arg(args, kw, 0, "old").s, arg(args, kw, 1, "new").s,
                                         arg(args, kw, 2, "count")));
      });
    if (name == "title" || name == "capitalize")
      return value::callable([s, name](std::vector<value>, kwargs) -> expected<value> {
        return value::string(name == "title" ? title(s) : capitalize(s));
      });
    if (name == "find")
      return value::callable([s](std::vector<value> args, kwargs kw) -> expected<value> {
        auto at = s.find(arg(args, kw, 0, "sub").s);
        return value::integer(at == std::string::npos ? -1 : static_cast<std::int64_t>(at));
      });
    if (name == "join")
      return value::callable([s](std::vector<value> args, kwargs kw) -> expected<value> {
        auto items = iterate(arg(args, kw, 0, "iterable"), 0);
        if (!items)
          return items.error();
        std::string out;
        for (std::size_t i = 0; i < items->size(); ++i)
          out += (i ? s : std::string{}) + to_output((*items)[i]);
        return value::string(std::move(out));
      });
    return type_error(line, "strings have no method '" + name + "'");
  }

  static std::string replace_all(const std::string& s, const std::string& from,
                                 const std::string& to, const value& count) {
    if (from.empty())
      return s;
    std::int64_t left = count.k == value::kind::integer ? count.i : -1;
    std::string out;
    std::size_t i = 0;
    while (left != 0) {
      auto j = s.find(from, i);
      if (j == std::string::npos)
        break;
      out += s.substr(i, j - i) + to;
      i = j + from.size();
      if (left > 0)
        --left;
    }
    return out + s.substr(i);
  }

  // The first character upper-cased, the rest kept (as @huggingface/jinja does).
  static std::string capitalize(const std::string& s) {
    std::string out = s;
    if (!out.empty())
      out[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(out[0])));
    return out;
  }

  static std::string title(const std::string& s) {
    std::string out = s;
    bool start = true;
    for (auto& c : out) {
      const auto u = static_cast<unsigned char>(c);
      c = static_cast<char>(start ? std::toupper(u) : std::tolower(u));
      start = !std::isalnum(u);
    }
    return out;
  }

  // -- globals --

  expected<value> global(const std::string& name) {
    if (name == "raise_exception")
      return value::callable([](std::vector<value> args, kwargs) -> expected<value> {
        return make_error(errc::invalid_argument,
                          "the chat template refused the conversation: " +
                              (args.empty() ? std::string{} : to_output(args[0])));
      });
    if (name == "namespace" || name == "dict")
      return value::callable([](std::vector<value>, kwargs kw) -> expected<value> {
        auto out = value::dict();
        for (auto& [k, v] : kw)
          out.set(k, std::move(v));
        return out;
      });
    if (name == "range")
      return value::callable([](std::vector<value> args, kwargs) -> expected<value> {
        std::int64_t start = 0, stop = 0, step = 1;
        if (args.size() == 1)
          stop = args[0].i;
        else if (args.size() >= 2) {
          start = args[0].i;
          stop = args[1].i;
          if (args.size() >= 3)
            step = args[2].i;
        }
        if (step == 0)
          return make_error(errc::invalid_argument, "range: step cannot be zero");
        const __int128 count = (static_cast<__int128>(stop) - start) / step;
        if (count > 1'000'000)
          return make_error(errc::invalid_argument, "range: more than a million items");
        array out;
        for (__int128 i = start; step > 0 ? i < stop : i > stop; i += step)
          out.push_back(value::integer(static_cast<std::int64_t>(i)));
        return value::list(std::move(out));
      });
    if (name == "strftime_now")
      return value::callable([](std::vector<value> args, kwargs) -> expected<value> {
        std::time_t now = std::time(nullptr);
        std::tm tm{};
        ::localtime_r(&now, &tm);
        char buf[128];
        auto n = std::strftime(buf, sizeof buf, args.empty() ? "%Y-%m-%d" : args[0].s.c_str(), &tm);
        return value::string(std::string{buf, n});
      });
    return value{};
  }

  // -- filters and tests --

  expected<value> filter(const std::string& name, const value& v, const std::vector<value>& args,
                         const kwargs& kw, int line) {
    if (name == "trim") {
      if (!v.is_string())
        return type_error(line, "trim of a " + kind_name(v));
      return value::string(strip(v.s, value{}, true, true));
    }
    if (name == "tojson") {
      for (const auto& [k, x] : kw)
        if (k != "indent" && !(k == "ensure_ascii" && !x.truthy()))
          return type_error(line, "tojson(" + k + "=...) is not supported (indent is)");
      auto indent = arg(args, kw, 0, "indent");
      const std::int64_t n = indent.k == value::kind::integer ? indent.i : 0;
      if (n < 0 || n > 64)
        return type_error(line, "tojson indent " + std::to_string(n) + " (allowed 0-64)");
      return value::string(to_json(v, static_cast<int>(n)));
    }
    if (name == "length" || name == "count") {
      if (v.is_string()) {
        auto chars = iterate(v, line);
        return value::integer(static_cast<std::int64_t>(chars->size()));
      }
      if (v.is_list())
        return value::integer(static_cast<std::int64_t>(v.items->size()));
      if (v.is_dict())
        return value::integer(static_cast<std::int64_t>(v.members->size()));
      return type_error(line, "length of a " + kind_name(v));
    }
    if (name == "string")
      return value::string(to_output(v));
    if (name == "safe" || name == "e" || name == "escape")
      return v;
    if (name == "upper" || name == "lower" || name == "title" || name == "capitalize") {
      auto m = string_method(to_output(v), name, line);
      if (!m)
        return m;
      return (*m->fn)({}, {});
    }
    if (name == "replace") {
      if (!v.is_string())
        return type_error(line, "replace of a " + kind_name(v));
      return value::string(replace_all(v.s, arg(args, kw, 0, "old").s, arg(args, kw, 1, "new").s,
                                       arg(args, kw, 2, "count")));
    }
    if (name == "default" || name == "d") {
      auto fallback = arg(args, kw, 0, "default_value");
      auto boolean = arg(args, kw, 1, "boolean");
      const bool use = v.is_undefined() || (boolean.truthy() && !v.truthy());
      return use ? (fallback.is_undefined() ? value::string("") : fallback) : v;
    }
    if (name == "first" || name == "last") {
      auto items = iterate(v, line);
      if (!items)
        return items.error();
      if (items->empty())
        return value{};
      return name == "first" ? items->front() : items->back();
    }
    if (name == "join") {
      auto items = iterate(v, line);
      if (!items)
        return items.error();
      auto sep = arg(args, kw, 0, "d");
      auto attribute = arg(args, kw, 1, "attribute");
      std::string out;
      for (std::size_t i = 0; i < items->size(); ++i) {
        const auto& item = (*items)[i];
        out += (i ? (sep.is_string() ? sep.s : std::string{}) : std::string{}) +
               to_output(attribute.is_string() ? item.get(attribute.s) : item);
      }
      return value::string(std::move(out));
    }
    if (name == "list") {
      auto items = iterate(v, line);
      if (!items)
        return items.error();
      return value::list(std::move(*items));
    }
    if (name == "items") {
      if (!v.is_dict())
        return v.is_undefined() ? value::list() : expected<value>{type_error(line, "items of a " + kind_name(v))};
      return (*dict_method(v, "items").fn)({}, {});
    }
    if (name == "reverse") {
      if (v.is_string()) {
        auto chars = iterate(v, line);
        std::string out;
        for (auto it = chars->rbegin(); it != chars->rend(); ++it)
          out += it->s;
        return value::string(std::move(out));
      }
      auto items = iterate(v, line);
      if (!items)
        return items.error();
      std::reverse(items->begin(), items->end());
      return value::list(std::move(*items));
    }
    if (name == "int") {
      if (v.k == value::kind::integer)
        return v;
      if (v.k == value::kind::number)
        return value::integer(static_cast<std::int64_t>(v.d));
      if (v.is_string()) {
        try {
          return value::integer(std::stoll(v.s));
        } catch (...) {
          return value::integer(0);
        }
      }
      return value::integer(0);
    }
    if (name == "float") {
      if (v.is_number())
        return value::number(v.as_double());
      if (v.is_string()) {
        try {
          return value::number(std::stod(v.s));
        } catch (...) {
          return value::number(0);
        }
      }
      return value::number(0);
    }
    if (name == "abs") {
      if (v.k == value::kind::integer && v.i != std::numeric_limits<std::int64_t>::min())
        return value::integer(v.i < 0 ? -v.i : v.i);
      if (v.k == value::kind::integer)
        return value::number(std::fabs(static_cast<double>(v.i)));
      if (v.k == value::kind::number)
        return value::number(std::fabs(v.d));
      return type_error(line, "abs of a " + kind_name(v));
    }
    if (name == "map" || name == "select" || name == "reject" || name == "selectattr" ||
        name == "rejectattr") {
      auto items = iterate(v, line);
      if (!items)
        return items.error();
      array out;
      auto attribute = arg({}, kw, 0, "attribute");
      for (const auto& item : *items) {
        if (name == "map") {
          if (attribute.is_string()) {
            out.push_back(item.get(attribute.s));
          } else if (!args.empty()) {
            auto r = filter(args[0].s, item, {args.begin() + 1, args.end()}, {}, line);
            if (!r)
              return r;
            out.push_back(std::move(*r));
          }
          continue;
        }
        const bool by_attr = name == "selectattr" || name == "rejectattr";
        const value subject = by_attr ? item.get(args.empty() ? std::string{} : args[0].s) : item;
        const std::size_t test_at = by_attr ? 1 : 0;
        bool pass;
        if (args.size() > test_at) {
          auto r = test(args[test_at].s, subject, {args.begin() + static_cast<std::ptrdiff_t>(test_at) + 1, args.end()}, line);
          if (!r)
            return r.error();
          pass = *r;
        } else {
          pass = subject.truthy();
        }
        if (pass == (name == "select" || name == "selectattr"))
          out.push_back(item);
      }
      return value::list(std::move(out));
    }
    if (name == "unique") {
      auto items = iterate(v, line);
      if (!items)
        return items.error();
      array out;
      for (const auto& item : *items)
        if (std::none_of(out.begin(), out.end(), [&](const value& x) { return equal(x, item); }))
          out.push_back(item);
      return value::list(std::move(out));
    }
    if (name == "indent") {
      if (!v.is_string())
        return type_error(line, "indent of a " + kind_name(v));
      auto width = arg(args, kw, 0, "width");
      auto first = arg(args, kw, 1, "first");
      const std::int64_t w = width.k == value::kind::integer ? width.i : 4;
      if (w < 0 || w > 1024)
        return type_error(line, "indent width " + std::to_string(w) + " (allowed 0-1024)");
      const std::string pad(static_cast<std::size_t>(w), ' ');
      std::string out;
      for (std::size_t i = 0; i < v.s.size(); ++i) {
        out += v.s[i];
        if (v.s[i] == '\n' && i + 1 < v.s.size() && v.s[i + 1] != '\n')
          out += pad;
      }
      return value::string(first.truthy() ? pad + out : out);
    }
    return type_error(line, "unknown filter '" + name + "'");
  }

  expected<bool> test(const std::string& name, const value& v, const std::vector<value>& args,
                      int line) {
    if (name == "defined")
      return !v.is_undefined();
    if (name == "undefined")
      return v.is_undefined();
    if (name == "none")
      return v.is_none();
    if (name == "string")
      return v.is_string();
    if (name == "number")
      return v.is_number();
    if (name == "integer")
      return v.k == value::kind::integer;
    if (name == "float")
      return v.k == value::kind::number;
    if (name == "boolean")
      return v.k == value::kind::boolean;
    if (name == "true")
      return v.k == value::kind::boolean && v.b;
    if (name == "false")
      return v.k == value::kind::boolean && !v.b;
    if (name == "mapping")
      return v.is_dict();
    if (name == "iterable" || name == "sequence")
      return v.is_list() || v.is_string();
    if (name == "callable")
      return v.k == value::kind::callable;
    if (name == "odd" || name == "even") {
      if (v.k != value::kind::integer)
        return type_error(line, name + " of a " + kind_name(v));
      return (v.i % 2 != 0) == (name == "odd");
    }
    if (name == "eq" || name == "equalto" || name == "==" || name == "sameas")
      return !args.empty() && equal(v, args[0]);
    if (name == "ne" || name == "!=")
      return args.empty() || !equal(v, args[0]);
    if (name == "in") {
      if (args.empty())
        return false;
      const auto& c = args[0];
      if (c.is_string() && v.is_string())
        return c.s.find(v.s) != std::string::npos;
      if (c.is_list())
        return std::any_of(c.items->begin(), c.items->end(), [&](const value& x) { return equal(x, v); });
      if (c.is_dict())
        return !c.get(v.s).is_undefined();
      return false;
    }
    if (name == "lower" || name == "upper") {
      if (!v.is_string())
        return false;
      return std::none_of(v.s.begin(), v.s.end(), [&](char c) {
        return name == "lower" ? std::isupper(static_cast<unsigned char>(c)) != 0
                               : std::islower(static_cast<unsigned char>(c)) != 0;
      });
    }
    return type_error(line, "unknown test '" + name + "'");
  }

  std::string& out_;
  budget& budget_;
};

} // namespace

expected<jinja_template> jinja_template::parse(std::string_view source) {
  auto p = detail::parse_program(source);
  if (!p)
    return p.error();
  jinja_template t;
  t.program_ = std::move(*p);
  return t;
}

expected<std::string> jinja_template::render(const value& context) const {
  frame globals;
  // A deep copy: what the template changes (list.append, dict members, stored macros) stays in
  // this render.
  if (context.is_dict())
    for (const auto& [k, v] : *context.members)
      globals.vars[k] = deep_copy(v);
  std::string out;
  budget limits;
  limits.globals = &globals;
  renderer r{out, limits};
  auto done = r.run(program_->body, globals);
  if (!done)
    return done.error();
  return out;
}

} // namespace triad::jinja
