#include <cctype>
#include <charconv>

#include "jinja/detail/ast.hpp"
#include "runtime/utf8.hpp"

namespace triad::jinja::detail {

namespace {

bool space(char c) noexcept {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

// @huggingface/jinja's preprocessing: the final newline dropped, lstrip_blocks (spaces and tabs
// before a block or comment tag at a line's start) and trim_blocks (the newline after one).
std::string preprocess(std::string_view in) {
  if (!in.empty() && in.back() == '\n')
    in.remove_suffix(1);
  std::string a;
  a.reserve(in.size());
  for (std::size_t i = 0; i < in.size();) {
    const bool line_start = i == 0 || in[i - 1] == '\n';
    if (line_start) {
      std::size_t j = i;
      while (j < in.size() && (in[j] == ' ' || in[j] == '\t'))
        ++j;
      if (j + 1 < in.size() && in[j] == '{' &&
          (in[j + 1] == '#' || in[j + 1] == '%' || in[j + 1] == '-')) {
        i = j;
      }
    }
    a += in[i++];
  }
  std::string b;
  b.reserve(a.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    b += a[i];
    if (a[i] == '}' && i > 0 && (a[i - 1] == '#' || a[i - 1] == '%' || a[i - 1] == '-') &&
        i + 1 < a.size() && a[i + 1] == '\n')
      ++i;
  }
  return b;
}

struct token {
  enum class type { text, open_stmt, close_stmt, open_expr, close_expr, ident, string, integer,
                    number, op, end };
  type t;
  std::string text;
  int line;
};

class lexer {
public:
  explicit lexer(std::string src)
      : src_(std::move(src)) {}

  expected<std::vector<token>> run() {
    std::vector<token> out;
    bool in_tag = false;
    while (at_ < src_.size()) {
      if (!in_tag) {
        std::size_t end = at_;
        while (true) {
          end = src_.find('{', end);
          if (end == std::string::npos || end + 1 >= src_.size()) {
            end = src_.size();
            break;
          }
          const char n = src_[end + 1];
          if (n == '%' || n == '{' || n == '#')
            break;
          ++end;
        }
        if (end > at_) {
          push(out, token::type::text, src_.substr(at_, end - at_));
          at_ = end;
          continue;
        }
        // A tag opens.
        const char n = src_[at_ + 1];
        if (n == '#') {
          at_ += 2;
          const bool strip_before = at_ < src_.size() && src_[at_] == '-';
          auto close = src_.find("#}", at_);
          if (close == std::string::npos)
            return fail("a comment is never closed with #}");
          const bool strip_after = close > at_ && src_[close - 1] == '-';
          if (strip_before)
            strip_trailing(out);
          count_lines(at_, close + 2);
          at_ = close + 2;
          if (strip_after)
            skip_space();
          continue;
        }
        const bool strip = at_ + 2 < src_.size() && src_[at_ + 2] == '-';
        if (strip)
          strip_trailing(out);
        push(out, n == '%' ? token::type::open_stmt : token::type::open_expr, n == '%' ? "{%" : "{{");
        at_ += strip ? 3 : 2;
        in_tag = true;
        continue;
      }
      // Inside a tag.
      while (at_ < src_.size() && space(src_[at_])) {
        if (src_[at_] == '\n')
          ++line_;
        ++at_;
      }
      if (at_ >= src_.size())
        return fail("a tag is never closed");
      const char c = src_[at_];
      const char n = at_ + 1 < src_.size() ? src_[at_ + 1] : '\0';
      const char n2 = at_ + 2 < src_.size() ? src_[at_ + 2] : '\0';
      if (c == '-' && n2 == '}' && (n == '%' || n == '}')) {
        push(out, n == '%' ? token::type::close_stmt : token::type::close_expr, n == '%' ? "%}" : "}}");
        at_ += 3;
        skip_space();
        in_tag = false;
        continue;
      }
      if ((c == '%' && n == '}') || (c == '}' && n == '}' && depth_ == 0)) {
        push(out, c == '%' ? token::type::close_stmt : token::type::close_expr, c == '%' ? "%}" : "}}");
        at_ += 2;
        in_tag = false;
        continue;
      }
      if (c == '\'' || c == '"') {
        auto s = string_literal(c);
        if (!s)
          return s.error();
        push(out, token::type::string, std::move(*s));
        continue;
      }
      if (std::isdigit(static_cast<unsigned char>(c))) {
        std::size_t j = at_;
        while (j < src_.size() && std::isdigit(static_cast<unsigned char>(src_[j])))
          ++j;
        bool is_float = false;
        if (j + 1 < src_.size() && src_[j] == '.' &&
            std::isdigit(static_cast<unsigned char>(src_[j + 1]))) {
          is_float = true;
          ++j;
          while (j < src_.size() && std::isdigit(static_cast<unsigned char>(src_[j])))
            ++j;
        }
        push(out, is_float ? token::type::number : token::type::integer, src_.substr(at_, j - at_));
        at_ = j;
        continue;
      }
      if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
        std::size_t j = at_;
        while (j < src_.size() &&
               (std::isalnum(static_cast<unsigned char>(src_[j])) || src_[j] == '_'))
          ++j;
        push(out, token::type::ident, src_.substr(at_, j - at_));
        at_ = j;
        continue;
      }
      static constexpr std::string_view two[] = {"==", "!=", "<=", ">=", "//", "**"};
      bool matched = false;
      for (auto op : two)
        if (src_.compare(at_, 2, op) == 0) {
          push(out, token::type::op, std::string{op});
          at_ += 2;
          matched = true;
          break;
        }
      if (matched)
        continue;
      if (std::string_view{"()[]{},.:|~+-*/%<>=!"}.find(c) != std::string_view::npos) {
        if (c == '{' || c == '[' || c == '(')
          ++depth_;
        if ((c == '}' || c == ']' || c == ')') && depth_ > 0)
          --depth_;
        push(out, token::type::op, std::string(1, c));
        ++at_;
        continue;
      }
      return fail(std::string{"unexpected character '"} + c + "'");
    }
    if (in_tag)
      return fail("a tag is never closed");
    push(out, token::type::end, "");
    return out;
  }

private:
  error fail(const std::string& what) const {
    return make_error(errc::parse_error,
                      "template line " + std::to_string(line_) + ": " + what);
  }

  void push(std::vector<token>& out, token::type t, std::string text) {
    int line = line_;
    if (t == token::type::text)
      for (char c : text)
        line_ += c == '\n';
    out.push_back({t, std::move(text), line});
  }

  void count_lines(std::size_t from, std::size_t to) {
    for (std::size_t i = from; i < to; ++i)
      line_ += src_[i] == '\n';
  }

  void strip_trailing(std::vector<token>& out) {
    if (!out.empty() && out.back().t == token::type::text) {
      auto& s = out.back().text;
      while (!s.empty() && space(s.back()))
        s.pop_back();
      if (s.empty())
        out.pop_back();
    }
  }

  void skip_space() {
    while (at_ < src_.size() && space(src_[at_])) {
      line_ += src_[at_] == '\n';
      ++at_;
    }
  }

  expected<std::string> string_literal(char quote) {
    ++at_;
    std::string out;
    while (true) {
      if (at_ >= src_.size())
        return fail("a string is never closed");
      const char c = src_[at_++];
      if (c == quote)
        return out;
      if (c != '\\') {
        out += c;
        continue;
      }
      if (at_ >= src_.size())
        return fail("a string ends in a backslash");
      const char e = src_[at_++];
      switch (e) {
      case 'n': out += '\n'; break;
      case 't': out += '\t'; break;
      case 'r': out += '\r'; break;
      case 'b': out += '\b'; break;
      case 'f': out += '\f'; break;
      case 'v': out += '\v'; break;
      case '\'': out += '\''; break;
      case '"': out += '"'; break;
      case '\\': out += '\\'; break;
      case 'x':
      case 'u': {
        const std::size_t len = e == 'x' ? 2 : 4;
        unsigned cp = 0;
        auto r = std::from_chars(src_.data() + at_, src_.data() + std::min(src_.size(), at_ + len), cp, 16);
        if (r.ec != std::errc{} || r.ptr != src_.data() + at_ + len)
          return fail(std::string{"invalid \\"} + e + " escape");
        at_ += len;
        append_utf8(cp, out);
        break;
      }
      default:
        return fail(std::string{"unknown escape \\"} + e);
      }
    }
  }

  std::string src_;
  std::size_t at_ = 0;
  int line_ = 1;
  int depth_ = 0;
};

using expr_ptr = std::unique_ptr<expr>;
using stmt_list = std::vector<std::unique_ptr<stmt>>;

class parser {
public:
  explicit parser(std::vector<token> tokens)
      : t_(std::move(tokens)) {}

  expected<std::unique_ptr<program>> run() {
    auto p = std::make_unique<program>();
    std::string stop;
    auto body = block({}, stop);
    if (!body)
      return body.error();
    if (!stop.empty())
      return fail("'" + stop + "' without its opening statement");
    p->body = std::move(*body);
    return p;
  }

private:
  const token& peek(std::size_t ahead = 0) const { return t_[std::min(at_ + ahead, t_.size() - 1)]; }
  bool is_op(std::string_view op, std::size_t ahead = 0) const {
    return peek(ahead).t == token::type::op && peek(ahead).text == op;
  }
  bool is_word(std::string_view w, std::size_t ahead = 0) const {
    return peek(ahead).t == token::type::ident && peek(ahead).text == w;
  }
  error fail(const std::string& what) const {
    return make_error(errc::parse_error, "template line " + std::to_string(peek().line) + ": " + what);
  }
  expected<void> expect_op(std::string_view op) {
    if (!is_op(op))
      return fail("expected '" + std::string{op} + "', found '" + peek().text + "'");
    ++at_;
    return {};
  }
  expected<std::string> expect_name() {
    if (peek().t != token::type::ident)
      return fail("expected a name, found '" + peek().text + "'");
    return t_[at_++].text;
  }
  expected<void> expect_close() {
    if (peek().t != token::type::close_stmt)
      return fail("expected '%}', found '" + peek().text + "'");
    ++at_;
    return {};
  }

  // Statements until `{% <one of ends> %}`; the end's keyword goes to `stop` (its tag is left
  // open for the caller to read the rest).
  expected<stmt_list> block(std::initializer_list<std::string_view> ends, std::string& stop) {
    stmt_list out;
    stop.clear();
    while (peek().t != token::type::end) {
      const auto& tk = peek();
      if (tk.t == token::type::text) {
        auto s = std::make_unique<stmt>();
        s->k = stmt::kind::text;
        s->text = tk.text;
        s->line = tk.line;
        out.push_back(std::move(s));
        ++at_;
        continue;
      }
      if (tk.t == token::type::open_expr) {
        ++at_;
        auto s = std::make_unique<stmt>();
        s->k = stmt::kind::output;
        s->line = tk.line;
        auto e = expression();
        if (!e)
          return e.error();
        s->e = std::move(*e);
        if (peek().t != token::type::close_expr)
          return fail("expected '}}', found '" + peek().text + "'");
        ++at_;
        out.push_back(std::move(s));
        continue;
      }
      if (tk.t != token::type::open_stmt)
        return fail("unexpected '" + tk.text + "'");
      const auto& word = peek(1);
      for (auto e : ends)
        if (word.t == token::type::ident && word.text == e) {
          stop = word.text;
          at_ += 2;
          return out;
        }
      ++at_;
      auto s = statement();
      if (!s)
        return s.error();
      if (*s)
        out.push_back(std::move(*s));
    }
    if (ends.size() != 0) {
      std::string expected_ends;
      for (auto e : ends)
        expected_ends += (expected_ends.empty() ? "'" : ", '") + std::string{e} + "'";
      return fail("the template ends inside a block (expected " + expected_ends + ")");
    }
    return out;
  }

  expected<std::unique_ptr<stmt>> statement() {
    if (++nesting_ > max_nesting) {
      --nesting_;
      return fail("statements nest deeper than " + std::to_string(max_nesting));
    }
    auto r = statement_unbounded();
    --nesting_;
    return r;
  }

  expected<std::unique_ptr<stmt>> statement_unbounded() {
    auto kw = expect_name();
    if (!kw)
      return kw.error();
    auto s = std::make_unique<stmt>();
    s->line = peek().line;
    std::string stop;
    if (*kw == "if") {
      s->k = stmt::kind::if_;
      while (true) {
        auto c = expression();
        if (!c)
          return c.error();
        s->conditions.push_back(std::move(*c));
        if (auto ok = expect_close(); !ok)
          return ok.error();
        auto body = block({"elif", "else", "endif"}, stop);
        if (!body)
          return body.error();
        s->branches.push_back(std::move(*body));
        if (stop == "elif")
          continue;
        if (stop == "else") {
          if (auto ok = expect_close(); !ok)
            return ok.error();
          auto other = block({"endif"}, stop);
          if (!other)
            return other.error();
          s->branches.push_back(std::move(*other));
        }
        break;
      }
      if (auto ok = expect_close(); !ok)
        return ok.error();
      return s;
    }
    if (*kw == "for") {
      s->k = stmt::kind::for_;
      do {
        auto n = expect_name();
        if (!n)
          return n.error();
        s->targets.push_back(*n);
      } while (is_op(",") && (++at_, true));
      if (!is_word("in"))
        return fail("expected 'in' in a for statement");
      ++at_;
      auto iter = or_expr();
      if (!iter)
        return iter.error();
      s->e = std::move(*iter);
      if (is_word("if")) {
        ++at_;
        auto f = or_expr();
        if (!f)
          return f.error();
        s->filter = std::move(*f);
      }
      if (auto ok = expect_close(); !ok)
        return ok.error();
      auto body = block({"else", "endfor"}, stop);
      if (!body)
        return body.error();
      s->branches.push_back(std::move(*body));
      if (stop == "else") {
        if (auto ok = expect_close(); !ok)
          return ok.error();
        auto other = block({"endfor"}, stop);
        if (!other)
          return other.error();
        s->branches.push_back(std::move(*other));
      }
      if (auto ok = expect_close(); !ok)
        return ok.error();
      return s;
    }
    if (*kw == "set") {
      auto first = expect_name();
      if (!first)
        return first.error();
      if (is_op(".")) {
        ++at_;
        auto attr = expect_name();
        if (!attr)
          return attr.error();
        auto obj = std::make_unique<expr>();
        obj->k = expr::kind::name;
        obj->name = *first;
        s->target_object = std::move(obj);
        s->name = *attr;
      } else {
        s->targets.push_back(*first);
        while (is_op(",")) {
          ++at_;
          auto n = expect_name();
          if (!n)
            return n.error();
          s->targets.push_back(*n);
        }
      }
      if (peek().t == token::type::close_stmt) {
        ++at_;
        s->k = stmt::kind::set_block;
        auto body = block({"endset"}, stop);
        if (!body)
          return body.error();
        s->branches.push_back(std::move(*body));
        if (auto ok = expect_close(); !ok)
          return ok.error();
        return s;
      }
      s->k = stmt::kind::set;
      if (auto ok = expect_op("="); !ok)
        return ok.error();
      auto v = expression();
      if (!v)
        return v.error();
      if (is_op(",")) { // set a, b = x, y: a tuple
        auto tuple = std::make_unique<expr>();
        tuple->k = expr::kind::list;
        tuple->args.push_back(std::move(*v));
        while (is_op(",")) {
          ++at_;
          auto more = expression();
          if (!more)
            return more.error();
          tuple->args.push_back(std::move(*more));
        }
        s->e = std::move(tuple);
      } else {
        s->e = std::move(*v);
      }
      if (auto ok = expect_close(); !ok)
        return ok.error();
      return s;
    }
    if (*kw == "macro") {
      s->k = stmt::kind::macro;
      auto n = expect_name();
      if (!n)
        return n.error();
      s->name = *n;
      if (auto ok = expect_op("("); !ok)
        return ok.error();
      while (!is_op(")")) {
        auto p = expect_name();
        if (!p)
          return p.error();
        s->params.push_back(*p);
        if (is_op("=")) {
          ++at_;
          auto d = expression();
          if (!d)
            return d.error();
          s->defaults.push_back(std::move(*d));
        } else {
          s->defaults.push_back(nullptr);
        }
        if (is_op(","))
          ++at_;
      }
      ++at_;
      if (auto ok = expect_close(); !ok)
        return ok.error();
      auto body = block({"endmacro"}, stop);
      if (!body)
        return body.error();
      s->branches.push_back(std::move(*body));
      if (auto ok = expect_close(); !ok)
        return ok.error();
      return s;
    }
    if (*kw == "break" || *kw == "continue") {
      s->k = *kw == "break" ? stmt::kind::break_ : stmt::kind::continue_;
      if (auto ok = expect_close(); !ok)
        return ok.error();
      return s;
    }
    if (*kw == "generation" || *kw == "endgeneration") { // training markers: nothing to render
      if (auto ok = expect_close(); !ok)
        return ok.error();
      return std::unique_ptr<stmt>{};
    }
    return fail("unknown statement '" + *kw + "'");
  }

  // -- expressions, lowest precedence first --

  expected<expr_ptr> expression() {
    // Nesting is bounded, so hostile templates cannot exhaust the stack.
    if (++nesting_ > max_nesting) {
      --nesting_;
      return fail("expressions nest deeper than " + std::to_string(max_nesting));
    }
    auto r = expression_unbounded();
    --nesting_;
    return r;
  }

  expected<expr_ptr> expression_unbounded() {
    auto a = or_expr();
    if (!a)
      return a;
    if (!is_word("if"))
      return a;
    ++at_;
    auto cond = or_expr();
    if (!cond)
      return cond;
    auto n = node(expr::kind::ternary);
    n->args.push_back(std::move(*a));
    n->args.push_back(std::move(*cond));
    if (is_word("else")) {
      ++at_;
      auto b = expression();
      if (!b)
        return b;
      n->args.push_back(std::move(*b));
    } else {
      n->args.push_back(nullptr);
    }
    return n;
  }

  expr_ptr node(expr::kind k) {
    auto n = std::make_unique<expr>();
    n->k = k;
    n->line = peek().line;
    return n;
  }

  expr_ptr binary(std::string op, expr_ptr a, expr_ptr b) {
    auto n = node(expr::kind::binary);
    n->name = std::move(op);
    n->args.push_back(std::move(a));
    n->args.push_back(std::move(b));
    return n;
  }

  // A left-associative chain of `next` operands joined by any of `ops` (words or symbols).
  template<class Next>
  expected<expr_ptr> chain(Next next, std::initializer_list<std::string_view> ops) {
    auto a = (this->*next)();
    while (a) {
      std::string op;
      for (auto o : ops)
        if (is_op(o) || is_word(o)) {
          op = std::string{o};
          break;
        }
      if (op.empty())
        break;
      ++at_;
      auto b = (this->*next)();
      if (!b)
        return b;
      a = binary(op, std::move(*a), std::move(*b));
    }
    return a;
  }

  expected<expr_ptr> or_expr() { return chain(&parser::and_expr, {"or"}); }
  expected<expr_ptr> and_expr() { return chain(&parser::not_expr, {"and"}); }

  expected<expr_ptr> not_expr() {
    if (is_word("not")) {
      ++at_;
      if (nesting_ + 1 > max_nesting)
        return fail("expressions nest deeper than " + std::to_string(max_nesting));
      ++nesting_;
      auto a = not_expr();
      --nesting_;
      if (!a)
        return a;
      auto n = node(expr::kind::unary);
      n->name = "not";
      n->args.push_back(std::move(*a));
      return n;
    }
    return compare();
  }

  expected<expr_ptr> compare() {
    auto a = add();
    while (a) {
      std::string op;
      if (is_op("==") || is_op("!=") || is_op("<") || is_op(">") || is_op("<=") || is_op(">="))
        op = t_[at_++].text;
      else if (is_word("in"))
        op = (++at_, "in");
      else if (is_word("not") && is_word("in", 1))
        op = (at_ += 2, "not in");
      else
        break;
      auto b = add();
      if (!b)
        return b;
      a = binary(op, std::move(*a), std::move(*b));
    }
    return a;
  }

  expected<expr_ptr> add() { return chain(&parser::concat, {"+", "-"}); }
  expected<expr_ptr> concat() { return chain(&parser::multiply, {"~"}); }
  expected<expr_ptr> multiply() { return chain(&parser::power, {"*", "/", "//", "%"}); }
  expected<expr_ptr> power() { return chain(&parser::unary_filtered, {"**"}); }
  expected<expr_ptr> unary_filtered() { return unary(true); }

  // As Jinja: `-x | f` is `(-x) | f`; the sign takes its operand without filters or tests.
  expected<expr_ptr> unary(bool with_filters = true) {
    if (is_op("-") || is_op("+")) {
      std::string op = t_[at_++].text;
      if (nesting_ + 1 > max_nesting)
        return fail("expressions nest deeper than " + std::to_string(max_nesting));
      ++nesting_;
      auto a = unary(false);
      --nesting_;
      if (!a)
        return a;
      auto n = node(expr::kind::unary);
      n->name = op;
      n->args.push_back(std::move(*a));
      return with_filters ? postfix(std::move(n), true) : expected<expr_ptr>{std::move(n)};
    }
    auto p = primary();
    if (!p)
      return p;
    return postfix(std::move(*p), with_filters);
  }

  // Call arguments after '(' up to ')': positional into `n->args` (after what is there),
  // keywords into kwargs.
  expected<void> arguments(expr& n) {
    while (!is_op(")")) {
      if (peek().t == token::type::ident && is_op("=", 1)) {
        n.keys.push_back(t_[at_].text);
        at_ += 2;
        auto v = expression();
        if (!v)
          return v.error();
        n.kwargs.push_back(std::move(*v));
      } else {
        auto v = expression();
        if (!v)
          return v.error();
        n.args.push_back(std::move(*v));
      }
      if (is_op(","))
        ++at_;
      else if (!is_op(")"))
        return fail("expected ',' or ')' in arguments, found '" + peek().text + "'");
    }
    ++at_;
    return {};
  }

  // Attributes, subscripts and calls; with `filters` also filters and tests.
  expected<expr_ptr> postfix(expr_ptr a, bool filters) {
    while (true) {
      if (is_op(".")) {
        ++at_;
        auto name = expect_name();
        if (!name)
          return name.error();
        auto n = node(expr::kind::attr);
        n->name = *name;
        n->args.push_back(std::move(a));
        a = std::move(n);
      } else if (is_op("[")) {
        ++at_;
        expr_ptr parts[3];
        int colons = 0;
        while (!is_op("]")) {
          if (is_op(":")) {
            ++at_;
            if (++colons > 2)
              return fail("a slice has at most two ':'");
            continue;
          }
          auto e = expression();
          if (!e)
            return e;
          parts[colons] = std::move(*e);
        }
        ++at_;
        if (colons == 0) {
          if (!parts[0])
            return fail("an empty subscript");
          auto n = node(expr::kind::index);
          n->args.push_back(std::move(a));
          n->args.push_back(std::move(parts[0]));
          a = std::move(n);
        } else {
          auto n = node(expr::kind::slice);
          n->args.push_back(std::move(a));
          for (auto& p : parts)
            n->args.push_back(std::move(p));
          a = std::move(n);
        }
      } else if (is_op("(")) {
        ++at_;
        auto n = node(expr::kind::call);
        n->args.push_back(std::move(a));
        if (auto ok = arguments(*n); !ok)
          return ok.error();
        a = std::move(n);
      } else if (filters && is_op("|")) {
        ++at_;
        auto name = expect_name();
        if (!name)
          return name.error();
        auto n = node(expr::kind::filter);
        n->name = *name;
        n->args.push_back(std::move(a));
        if (is_op("(")) {
          ++at_;
          if (auto ok = arguments(*n); !ok)
            return ok.error();
        }
        a = std::move(n);
      } else if (filters && is_word("is")) {
        ++at_;
        auto n = node(expr::kind::test);
        if (is_word("not")) {
          ++at_;
          n->negated = true;
        }
        auto name = peek().t == token::type::ident ? expect_name()
                                                    : expected<std::string>{t_[at_++].text};
        if (!name)
          return name.error();
        n->name = *name;
        n->args.push_back(std::move(a));
        if (is_op("(")) {
          ++at_;
          if (auto ok = arguments(*n); !ok)
            return ok.error();
        } else if (peek().t == token::type::string || peek().t == token::type::integer ||
                   peek().t == token::type::number || (peek().t == token::type::ident &&
                   !is_word("and") && !is_word("or") && !is_word("else") && !is_word("if") &&
                   !is_word("in") && !is_word("not") && !is_word("is"))) {
          auto arg = primary(); // `is sameas x`, `is divisibleby 3`
          if (!arg)
            return arg;
          n->args.push_back(std::move(*arg));
        }
        a = std::move(n);
      } else {
        return a;
      }
    }
  }

  expected<expr_ptr> primary() {
    const auto& tk = peek();
    switch (tk.t) {
    case token::type::string: {
      auto n = node(expr::kind::literal);
      std::string s;
      while (peek().t == token::type::string) // adjacent literals join
        s += t_[at_++].text;
      n->lit = value::string(std::move(s));
      return n;
    }
    case token::type::integer: {
      auto n = node(expr::kind::literal);
      std::int64_t v = 0;
      auto r = std::from_chars(tk.text.data(), tk.text.data() + tk.text.size(), v);
      if (r.ec != std::errc{})
        return fail("integer " + tk.text + " is out of range");
      n->lit = value::integer(v);
      ++at_;
      return n;
    }
    case token::type::number: {
      auto n = node(expr::kind::literal);
      double v = 0;
      auto r = std::from_chars(tk.text.data(), tk.text.data() + tk.text.size(), v);
      if (r.ec != std::errc{})
        return fail("number " + tk.text + " is out of range");
      n->lit = value::number(v);
      ++at_;
      return n;
    }
    case token::type::ident: {
      ++at_;
      auto n = node(expr::kind::literal);
      if (tk.text == "true" || tk.text == "True")
        n->lit = value::boolean(true);
      else if (tk.text == "false" || tk.text == "False")
        n->lit = value::boolean(false);
      else if (tk.text == "none" || tk.text == "None")
        n->lit = value::none();
      else {
        n->k = expr::kind::name;
        n->name = tk.text;
      }
      return n;
    }
    case token::type::op:
      if (tk.text == "(") {
        ++at_;
        auto e = expression();
        if (!e)
          return e;
        if (is_op(",")) { // a tuple, as a list
          auto n = node(expr::kind::list);
          n->args.push_back(std::move(*e));
          while (is_op(",")) {
            ++at_;
            if (is_op(")"))
              break;
            auto more = expression();
            if (!more)
              return more;
            n->args.push_back(std::move(*more));
          }
          e = std::move(n);
        }
        if (auto ok = expect_op(")"); !ok)
          return ok.error();
        return e;
      }
      if (tk.text == "[") {
        ++at_;
        auto n = node(expr::kind::list);
        while (!is_op("]")) {
          auto e = expression();
          if (!e)
            return e;
          n->args.push_back(std::move(*e));
          if (is_op(","))
            ++at_;
          else if (!is_op("]"))
            return fail("expected ',' or ']' in a list, found '" + peek().text + "'");
        }
        ++at_;
        return n;
      }
      if (tk.text == "{") {
        ++at_;
        auto n = node(expr::kind::dict);
        while (!is_op("}")) {
          auto k = expression();
          if (!k)
            return k;
          if (auto ok = expect_op(":"); !ok)
            return ok.error();
          auto v = expression();
          if (!v)
            return v;
          n->args.push_back(std::move(*k));
          n->args.push_back(std::move(*v));
          if (is_op(","))
            ++at_;
          else if (!is_op("}"))
            return fail("expected ',' or '}' in a dict, found '" + peek().text + "'");
        }
        ++at_;
        return n;
      }
      break;
    default:
      break;
    }
    return fail("unexpected '" + tk.text + "' in an expression");
  }

  static constexpr int max_nesting = 128;
  std::vector<token> t_;
  std::size_t at_ = 0;
  int nesting_ = 0;
};

} // namespace

expected<std::unique_ptr<program>> parse_program(std::string_view source) {
  auto tokens = lexer{preprocess(source)}.run();
  if (!tokens)
    return tokens.error();
  return parser{std::move(*tokens)}.run();
}

} // namespace triad::jinja::detail
