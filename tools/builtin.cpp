#include "tools/builtin.hpp"

#include <atomic>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <regex>
#include <sstream>

#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <boost/json/parse.hpp>

namespace triad {

namespace fs = std::filesystem;
namespace json = boost::json;

namespace {

json::object schema(const char* text) {
  return json::parse(text).as_object();
}

const std::vector<std::string> sandbox_env = {"PATH=/usr/bin:/bin", "HOME=/work", "LANG=C.UTF-8",
                                              "TMPDIR=/tmp"};

// The paths of `wanted` that exist on this host.
std::vector<std::string> existing(std::initializer_list<const char*> wanted) {
  std::vector<std::string> out;
  for (const char* path : wanted)
    if (::access(path, F_OK) == 0)
      out.emplace_back(path);
  return out;
}

// Runs a tool's process in the sandbox with the tools' environment and the host paths
// `read_only`, `files` in its /work.
expected<sandbox_result> run_tool(std::vector<std::string> argv, std::vector<std::string> read_only,
                                  const sandbox_limits& limits,
                                  std::vector<sandbox_file> files = {},
                                  std::vector<std::string> collect = {}) {
  sandbox_request req;
  req.argv = std::move(argv);
  req.read_only = std::move(read_only);
  req.env = sandbox_env;
  req.files = std::move(files);
  req.collect = std::move(collect);
  req.limits = limits;
  return run_sandboxed(req);
}

json::object describe(const sandbox_result& r) {
  json::array iso, warnings;
  for (const auto& i : r.isolation)
    iso.emplace_back(i);
  for (const auto& w : r.warnings)
    warnings.emplace_back(w);
  return {{"exit_code", r.exit_code},
          {"signal", r.signal},
          {"limit", r.limit},
          {"stdout_truncated", r.out_truncated},
          {"stderr_truncated", r.err_truncated},
          {"cpu_seconds", r.cpu_seconds},
          {"peak_rss_bytes", r.peak_rss_bytes},
          {"wall_seconds", r.wall_seconds},
          {"isolation", std::move(iso)},
          {"warnings", std::move(warnings)}};
}

// What a file that is not a regular one is, for file_read's refusal.
std::string file_kind(mode_t mode) {
  if (S_ISDIR(mode))
    return "a directory";
  if (S_ISFIFO(mode))
    return "a FIFO";
  if (S_ISSOCK(mode))
    return "a socket";
  if (S_ISCHR(mode))
    return "a character device";
  if (S_ISBLK(mode))
    return "a block device";
  return "not a regular file";
}

} // namespace

expected<void> add_file_read_tool(tool_registry& registry, const fs::path& root) {
  std::error_code ec;
  if (!fs::is_directory(root, ec))
    return make_error(errc::not_found,
                      "file_read: root '" + root.string() + "' is not a directory");
  tool_spec spec{"file_read", "Read a text file inside the workspace, optionally a range of lines.",
                 schema(R"({"type": "object", "additionalProperties": false,
                   "required": ["path"],
                   "properties": {
                     "path": {"type": "string", "minLength": 1, "maxLength": 4096},
                     "start_line": {"type": "integer", "minimum": 1},
                     "end_line": {"type": "integer", "minimum": 1}}})")};
  auto canonical_root = fs::canonical(root, ec);
  return registry.add(
      std::move(spec), [canonical_root](const json::object& args) -> expected<tool_output> {
        std::string path{args.at("path").as_string()};
        if (!path.empty() && path[0] == '/')
          return make_error(errc::invalid_argument,
                            "file_read: '" + path +
                                "' is absolute; give a path inside the workspace");
        int dir = ::open(canonical_root.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
        if (dir < 0)
          return make_error(errc::io_error,
                            "file_read: workspace: " + std::string{std::strerror(errno)});
        open_how how{};
        // O_NONBLOCK: opening a FIFO with no writer must not block the tool worker; anything
        // but a regular file is refused below, before a read.
        how.flags = O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY;
        how.resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS;
        int fd = static_cast<int>(::syscall(SYS_openat2, dir, path.c_str(), &how, sizeof(how)));
        int err = errno;
        ::close(dir);
        if (fd < 0)
          return make_error(err == EXDEV ? errc::invalid_argument : errc::not_found,
                            "file_read: '" + path + "': " +
                                (err == EXDEV   ? std::string{"leads outside the workspace"}
                                 : err == ELOOP ? std::string{"is a symlink"}
                                                : std::string{std::strerror(err)}));
        struct stat st {};
        if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
          ::close(fd);
          return make_error(errc::invalid_argument,
                            "file_read: '" + path + "' is not a regular file (" +
                                file_kind(st.st_mode) + "); only regular files are read");
        }
        std::string data;
        char buf[65536];
        bool truncated = false;
        for (;;) {
          auto n = ::read(fd, buf, sizeof(buf));
          if (n <= 0)
            break;
          auto room = defaults::builtin_tools::file_read_max_bytes - data.size();
          data.append(buf, std::min<std::size_t>(room, static_cast<std::size_t>(n)));
          if (static_cast<std::size_t>(n) > room) {
            truncated = true;
            break;
          }
        }
        ::close(fd);
        std::int64_t first =
            args.contains("start_line") ? args.at("start_line").to_number<std::int64_t>() : 1;
        std::int64_t last =
            args.contains("end_line") ? args.at("end_line").to_number<std::int64_t>() : INT64_MAX;
        if (last < first)
          return make_error(errc::invalid_argument, "file_read: end_line " + std::to_string(last) +
                                                        " is before start_line " +
                                                        std::to_string(first));
        std::string out;
        std::istringstream lines{data};
        std::string line;
        std::int64_t no = 0;
        while (std::getline(lines, line)) {
          ++no;
          if (no >= first && no <= last)
            out += line + "\n";
        }
        return tool_output{out, {{"path", path}, {"lines", no}, {"truncated", truncated}}};
      });
}

std::vector<std::string> shell_read_only() {
  static const auto paths = existing({"/usr/bin", "/usr/lib", "/usr/lib64"});
  return paths;
}

std::vector<std::string> compile_read_only() {
  static const auto paths =
      existing({"/usr/bin", "/usr/lib", "/usr/lib64", "/usr/include", "/usr/libexec"});
  return paths;
}

expected<void> add_shell_tool(tool_registry& registry, sandbox_limits limits) {
  tool_spec spec{"shell", "Run a bash command in an isolated sandbox without network access.",
                 schema(R"({"type": "object", "additionalProperties": false,
                   "required": ["command"],
                   "properties": {
                     "command": {"type": "string", "minLength": 1, "maxLength": 16384}}})")};
  return registry.add(std::move(spec), [limits](const json::object& args) -> expected<tool_output> {
    auto r = run_tool({"/bin/bash", "-c", std::string{args.at("command").as_string()}},
                      shell_read_only(), limits);
    if (!r)
      return r.error();
    auto details = describe(*r);
    details["stdout"] = r->out;
    details["stderr"] = r->err;
    std::string content = r->out;
    if (!r->err.empty())
      content += (content.empty() ? "" : "\n") + std::string{"[stderr]\n"} + r->err;
    content += "[exit " + std::to_string(r->exit_code) +
               (r->signal != 0 ? ", signal " + std::to_string(r->signal) : "") +
               (r->limit.empty() ? "" : ", limit " + r->limit) + "]";
    return tool_output{content, details};
  });
}

expected<void> add_compile_tool(tool_registry& registry, sandbox_limits limits) {
  tool_spec spec{"compile",
                 "Compile C or C++ source with clang (syntax check or object file) and return "
                 "the diagnostics.",
                 schema(R"({"type": "object", "additionalProperties": false,
                   "required": ["source", "language"],
                   "properties": {
                     "source": {"type": "string", "maxLength": 262144},
                     "language": {"enum": ["c", "c++"]},
                     "mode": {"enum": ["syntax", "object"]},
                     "flags": {"type": "array", "maxItems": 32,
                               "items": {"type": "string", "maxLength": 128}}}})")};
  return registry.add(std::move(spec), [limits](const json::object& args) -> expected<tool_output> {
    // Flags from an allowlist: standards, optimisation, warnings and macro definitions.
    static const std::regex allowed{
        R"(^(-std=(c|c\+\+|gnu|gnu\+\+)[0-9a-z]{2}|-O[0-3sz]?|-W[a-z0-9-]+|-Wno-[a-z0-9-]+|-pedantic|-D[A-Za-z_][A-Za-z0-9_]*(=[A-Za-z0-9_.]*)?|-g|-fno-exceptions|-fno-rtti)$)"};
    std::vector<std::string> flags;
    if (const auto* f = args.if_contains("flags"))
      for (std::size_t i = 0; i < f->as_array().size(); ++i) {
        std::string flag{f->as_array()[i].as_string()};
        if (!std::regex_match(flag, allowed))
          return make_error(errc::invalid_argument,
                            "compile: arguments.flags[" + std::to_string(i) + "] = \"" + flag +
                                "\" is not allowed; allowed: -std=..., -O0..-O3/-Os/-Oz, -W..., "
                                "-pedantic, -DNAME[=VALUE], -g, -fno-exceptions, -fno-rtti");
        flags.push_back(flag);
      }
    bool cxx = args.at("language").as_string() == "c++";
    bool object = args.contains("mode") && args.at("mode").as_string() == "object";
    std::string file = cxx ? "input.cpp" : "input.c";
    std::vector<std::string> argv{cxx ? "/usr/bin/clang++" : "/usr/bin/clang",
                                  "-fno-color-diagnostics", "-fno-caret-diagnostics"};
    argv.insert(argv.end(), flags.begin(), flags.end());
    if (object)
      argv.insert(argv.end(), {"-c", file, "-o", "input.o"});
    else
      argv.insert(argv.end(), {"-fsyntax-only", file});
    auto r = run_tool(std::move(argv), compile_read_only(), limits,
                      {{file, std::string{args.at("source").as_string()}}},
                      object ? std::vector<std::string>{"input.o"} : std::vector<std::string>{});
    if (!r)
      return r.error();
    // clang's "file:line:col: severity: message" lines.
    static const std::regex diag{
        R"(^([^:\n]+):(\d+):(\d+): (error|warning|note|fatal error): (.*)$)"};
    json::array diagnostics;
    std::istringstream lines{r->err};
    std::string line;
    std::size_t errors = 0, warnings = 0;
    while (std::getline(lines, line)) {
      std::smatch m;
      if (!std::regex_match(line, m, diag))
        continue;
      std::string severity = m[4] == "fatal error" ? "error" : std::string{m[4]};
      errors += severity == "error";
      warnings += severity == "warning";
      diagnostics.push_back(json::object{{"file", std::string{m[1]}},
                                         {"line", std::stoll(m[2])},
                                         {"column", std::stoll(m[3])},
                                         {"severity", severity},
                                         {"message", std::string{m[5]}}});
    }
    bool ok = r->exit_code == 0;
    auto details = describe(*r);
    details["success"] = ok;
    details["diagnostics"] = std::move(diagnostics);
    if (object && ok && !r->collected.empty() && r->collected[0].second >= 0)
      details["object_bytes"] = static_cast<std::uint64_t>(r->collected[0].second);
    std::string content = (ok ? "compiled" : "failed") + std::string{": "} +
                          std::to_string(errors) + " error(s), " + std::to_string(warnings) +
                          " warning(s)\n" + r->err;
    return tool_output{content, details};
  });
}

expected<void> add_vector_search_tool(tool_registry& registry,
                                      std::shared_ptr<const vector_index> index) {
  if (index == nullptr || index->chunks().empty())
    return make_error(errc::invalid_argument, "vector_search: no index, or an index of no text");
  tool_spec spec{"vector_search",
                 "Find the passages of the indexed corpus most similar to a query.",
                 schema(R"({"type": "object", "additionalProperties": false,
                   "required": ["query"],
                   "properties": {
                     "query": {"type": "string", "minLength": 1, "maxLength": 4096},
                     "k": {"type": "integer", "minimum": 1, "maximum": 50}}})")};
  return registry.add(std::move(spec), [index](const json::object& args) -> expected<tool_output> {
    std::size_t k = args.contains("k") ? args.at("k").to_number<std::size_t>() : 5;
    auto hits = index->search(std::string_view{args.at("query").as_string()}, k);
    json::array results;
    std::string content;
    for (const auto& h : hits) {
      const auto& c = index->chunks()[h.chunk];
      results.push_back(json::object{{"file", c.file},
                                     {"start_line", c.start_line},
                                     {"end_line", c.end_line},
                                     {"score", h.score},
                                     {"text", c.text}});
      content += c.file + ":" + std::to_string(c.start_line) + "-" + std::to_string(c.end_line) +
                 " (score " + std::to_string(h.score) + ")\n" + c.text + "\n";
    }
    return tool_output{content, {{"results", std::move(results)}}};
  });
}

expected<void> add_hosted_tools(tool_registry& registry, const std::vector<std::string>& hosted,
                                const fs::path& root) {
  for (const auto& name : hosted) {
    expected<void> added;
    if (name == "file_read") {
      added = add_file_read_tool(registry, root);
    } else if (name == "shell") {
      added = add_shell_tool(registry);
    } else if (name == "compile") {
      added = add_compile_tool(registry);
    } else if (name == "vector_search") {
      auto index = vector_index::open(root, root / ".index");
      if (!index)
        return make_error(index.error().code, "vector_search: indexing " + root.string() + ": " +
                                                  index.error().message);
      added =
          add_vector_search_tool(registry, std::shared_ptr<const vector_index>(std::move(*index)));
    } else {
      return make_error(errc::invalid_argument,
                        "[tools].hosted names \"" + name +
                            "\", which is not a built-in tool; built-in: file_read, shell, "
                            "compile, vector_search");
    }
    if (!added)
      return added.error();
  }
  return {};
}

} // namespace triad
