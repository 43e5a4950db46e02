#pragma once

#include <memory>

#include "tokenizer/tokenizer.hpp"

namespace triad::detail {

/// The SentencePiece BPE tokenizer of a "llama" vocabulary (scores and byte fallback).
std::unique_ptr<model_tokenizer> make_spm_tokenizer(vocab v);

} // namespace triad::detail
