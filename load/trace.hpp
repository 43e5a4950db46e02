#pragma once

#include <cstdint>
#include <filesystem>
#include <istream>
#include <string>
#include <vector>

#include "runtime/error.hpp"

namespace triad::load {

/// One request of a Mooncake-format trace (JSON Lines, one object per line).
struct trace_entry {
  double timestamp_ms = 0;         ///< `timestamp`: when it arrives, ms from the start
  std::uint32_t input_length = 0;  ///< `input_length`: prompt tokens
  std::uint32_t output_length = 0; ///< `output_length`: completion tokens
  std::vector<std::uint64_t>
      hash_ids;         ///< `hash_ids`: one per prompt block; equal ids, equal blocks
  std::size_t line = 0; ///< where it was in the file (1-based)
};

/// A line that could not be used, and why.
struct trace_problem {
  std::size_t line = 0; ///< 1-based
  std::string reason;   ///< e.g. "input_length: expected an integer >= 1, got -3"
};

/// A parsed trace: the usable entries in file order, and every skipped line with its reason.
struct trace {
  std::vector<trace_entry> entries;    ///< usable lines
  std::vector<trace_problem> problems; ///< bad lines: reported, counted, skipped
  std::size_t lines = 0;               ///< non-empty lines read
};

/// Tokens of the prompt one hash id stands for in Mooncake traces.
inline constexpr std::size_t mooncake_block_tokens = 512;

/// Reads a Mooncake trace from `in`. Each line must be a JSON object with a number
/// `timestamp` >= 0, integers `input_length` >= 1 and `output_length` >= 1, and optionally an
/// array of non-negative integer `hash_ids` (at most ceil(input_length / block_tokens) of
/// them); any other line is a problem, never a crash. Blank lines are ignored.
trace parse_mooncake(std::istream& in, std::size_t block_tokens = mooncake_block_tokens);

/// Opens and parses `path`; a missing or unreadable file is an error naming it.
expected<trace> read_mooncake(const std::filesystem::path& path,
                              std::size_t block_tokens = mooncake_block_tokens);

/// The prompt text of an entry, one byte per token (triad's tokenizer is byte-level): block i is
/// a deterministic printable text derived from hash_ids[i] alone (so equal ids give identical
/// prefixes), the rest up to input_length is unique to the request (`request_index`).
std::string trace_prompt(const trace_entry& e, std::size_t request_index,
                         std::size_t block_tokens = mooncake_block_tokens);

/// `n` printable bytes derived from `seed` alone: the filler of prompts.
std::string filler_text(std::uint64_t seed, std::size_t n);

} // namespace triad::load
