#include "kvstore/pool.hpp"

#include <cerrno>
#include <cstring>

#include <fcntl.h>
#include <unistd.h>

#define XXH_STATIC_LINKING_ONLY // XXH3_state_t on the stack
#include <xxhash.h>
// XXH3 through the library's run-time dispatch: AVX2/AVX-512 where the CPU has them (four
// times the SSE2 default on this machine).
#include <xxh_x86dispatch.h>

#include "runtime/io.hpp"
#include "runtime/scope_guard.hpp"

namespace triad {

expected<std::unique_ptr<memory_pool>> memory_pool::create(std::string name, tier kind,
                                                           unsigned domain, std::size_t block_bytes,
                                                           std::uint64_t capacity_bytes,
                                                           const topology* topo) {
  if (kind == tier::disk)
    return make_error(errc::invalid_argument,
                      "pool '" + name + "': a memory pool is device or host");
  if (block_bytes == 0)
    return make_error(errc::invalid_argument, "pool '" + name + "': block_bytes is 0");
  auto slots = capacity_bytes / block_bytes;
  if (slots == 0)
    return make_error(errc::invalid_argument,
                      "pool '" + name + "': capacity " + std::to_string(capacity_bytes) +
                          " bytes holds no block of " + std::to_string(block_bytes) + " bytes");
  if (slots > UINT32_MAX)
    slots = UINT32_MAX;
  auto bytes = slots * block_bytes;
  auto a = arena::create(domain, bytes, topo); // binds only when topo is this machine
  if (!a)
    return a.error();
  auto buffer = (*a)->allocate(bytes);
  if (!buffer)
    return buffer.error();
  std::unique_ptr<memory_pool> p{new memory_pool};
  p->name_ = std::move(name);
  p->kind_ = kind;
  p->domain_ = domain;
  p->block_bytes_ = block_bytes;
  p->capacity_ = slots;
  p->arena_ = std::move(*a);
  p->buffer_ = std::move(*buffer);
  p->base_ = p->buffer_.data();
  p->free_.reserve(slots);
  for (std::size_t s = slots; s > 0; --s)
    p->free_.push_back(static_cast<slot_id>(s - 1));
  return p;
}

std::optional<slot_id> memory_pool::allocate() {
  if (free_.empty())
    return std::nullopt;
  auto s = free_.back();
  free_.pop_back();
  return s;
}

void memory_pool::free(slot_id slot) {
  free_.push_back(slot);
}

namespace {

constexpr char magic[8] = {'T', 'R', 'I', 'A', 'D', 'K', 'V', '1'};
// 2: the payload checksum is block_checksum's striped sum (1 was plain XXH3-64); files of
// version 1 are rejected like any other foreign file, so they read as misses. 3: a llama model
// file's K is stored in adjacent-pair rotary order (before, halves): older blocks read as misses.
// 4: the header names the model whose KV the block holds (its fingerprint): a block of another
// model (another file, or the same shape with other weights) is never read as this one's.
constexpr std::uint32_t file_version = 4;

// The fixed part of a block file's header; the tokens and the header checksum follow.
struct file_header {
  char magic[8];
  std::uint32_t version;
  std::uint32_t block_tokens;
  std::uint64_t block_bytes;
  std::uint64_t hash;
  std::uint64_t parent;
  std::uint64_t checksum; // of the payload
  std::uint64_t model;    // the model's fingerprint (kv_store_config::model)
};

std::string hex(block_hash h) {
  static const char* digits = "0123456789abcdef";
  std::string s(16, '0');
  for (int i = 15; i >= 0; --i, h >>= 4)
    s[static_cast<std::size_t>(i)] = digits[h & 15];
  return s;
}

// Reads and checks a file's header; the descriptor is left at the payload.
expected<disk_entry> read_header(int fd, const std::filesystem::path& path,
                                 std::size_t block_tokens, std::size_t block_bytes,
                                 std::uint64_t model) {
  file_header h{};
  auto bad = [&](std::string why) {
    return make_error(errc::corrupted, "block file " + path.string() + ": " + why);
  };
  if (!read_all(fd, &h, sizeof(h)))
    return bad("shorter than its header");
  if (std::memcmp(h.magic, magic, sizeof(magic)) != 0 || h.version != file_version)
    return bad("not a triad block file (magic or version)");
  if (h.block_tokens != block_tokens || h.block_bytes != block_bytes)
    return bad("holds blocks of " + std::to_string(h.block_tokens) + " tokens and " +
               std::to_string(h.block_bytes) + " bytes; this store uses " +
               std::to_string(block_tokens) + " and " + std::to_string(block_bytes));
  if (h.model != model)
    return bad("holds KV of another model (fingerprint " + hex(h.model) + "; this store's is " +
               hex(model) + ")");
  disk_entry e;
  e.hash = h.hash;
  e.parent = h.parent;
  e.checksum = h.checksum;
  e.path = path;
  e.tokens.resize(block_tokens);
  std::uint64_t header_sum = 0;
  if (!read_all(fd, e.tokens.data(), block_tokens * sizeof(token)) ||
      !read_all(fd, &header_sum, sizeof(header_sum)))
    return bad("header cut short");
  XXH3_state_t st;
  XXH3_64bits_reset(&st);
  XXH3_64bits_update(&st, &h, sizeof(h));
  XXH3_64bits_update(&st, e.tokens.data(), block_tokens * sizeof(token));
  if (XXH3_64bits_digest(&st) != header_sum)
    return bad("header checksum mismatch");
  if (chain_hash(e.parent, e.tokens) != e.hash)
    return bad("its tokens do not hash to its name");
  return e;
}

} // namespace

expected<std::unique_ptr<disk_pool>>
disk_pool::open(std::filesystem::path dir, std::size_t block_tokens, std::size_t block_bytes,
                std::uint64_t capacity_bytes, std::uint64_t model) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec || !std::filesystem::is_directory(dir))
    return make_error(errc::io_error, "disk tier: cannot create directory " + dir.string() +
                                          (ec ? ": " + ec.message() : ""));
  auto file_bytes = sizeof(file_header) + block_tokens * sizeof(token) + 8 + block_bytes;
  std::unique_ptr<disk_pool> p{new disk_pool};
  p->dir_ = std::move(dir);
  p->block_tokens_ = block_tokens;
  p->block_bytes_ = block_bytes;
  p->model_ = model;
  p->capacity_ = capacity_bytes / file_bytes;
  if (p->capacity_ == 0)
    return make_error(errc::invalid_argument,
                      "disk tier: capacity " + std::to_string(capacity_bytes) +
                          " bytes holds no block file of " + std::to_string(file_bytes) + " bytes");
  for (const auto& f : std::filesystem::directory_iterator(p->dir_, ec)) {
    const auto& path = f.path();
    if (path.extension() == ".tmp") { // a write that never finished
      std::filesystem::remove(path, ec);
      continue;
    }
    if (path.extension() != ".kvb")
      continue;
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      ++p->damaged_;
      continue;
    }
    auto header = read_header(fd, path, block_tokens, block_bytes, model);
    auto size = ::lseek(fd, 0, SEEK_END);
    ::close(fd);
    if (!header || static_cast<std::size_t>(size) != file_bytes ||
        path.stem().string() != hex(header->hash) || p->files_ >= p->capacity_) {
      ++p->damaged_;
      std::filesystem::remove(path, ec);
      continue;
    }
    p->recovered_.push_back(std::move(*header));
    ++p->files_;
  }
  return p;
}

std::filesystem::path disk_pool::path_of(block_hash hash) const {
  return dir_ / (hex(hash) + ".kvb");
}

expected<void> disk_pool::write(const disk_entry& meta, std::span<const std::byte> payload) {
  if (payload.size() != block_bytes_ || meta.tokens.size() != block_tokens_)
    return make_error(errc::invalid_argument, "disk tier: a block file takes a full block");
  if (!has_room())
    return make_error(errc::exhausted, "disk tier: " + std::to_string(files_) + " of " +
                                           std::to_string(capacity_) + " block files used");
  auto path = path_of(meta.hash);
  auto tmp = path;
  tmp += ".tmp";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0)
    return make_error(errc::io_error,
                      "disk tier: cannot create " + tmp.string() + ": " + std::strerror(errno));
  file_header h{};
  std::memcpy(h.magic, magic, sizeof(magic));
  h.version = file_version;
  h.block_tokens = static_cast<std::uint32_t>(block_tokens_);
  h.block_bytes = block_bytes_;
  h.hash = meta.hash;
  h.parent = meta.parent;
  h.checksum = meta.checksum;
  h.model = model_;
  XXH3_state_t st;
  XXH3_64bits_reset(&st);
  XXH3_64bits_update(&st, &h, sizeof(h));
  XXH3_64bits_update(&st, meta.tokens.data(), block_tokens_ * sizeof(token));
  std::uint64_t header_sum = XXH3_64bits_digest(&st);
  bool ok = write_all(fd, &h, sizeof(h)) &&
            write_all(fd, meta.tokens.data(), block_tokens_ * sizeof(token)) &&
            write_all(fd, &header_sum, sizeof(header_sum)) &&
            write_all(fd, payload.data(), payload.size());
  int saved = errno;
  ::close(fd);
  std::error_code ec;
  if (!ok) {
    std::filesystem::remove(tmp, ec);
    return make_error(errc::io_error,
                      "disk tier: writing " + tmp.string() + " failed: " + std::strerror(saved));
  }
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    std::filesystem::remove(tmp, ec);
    return make_error(errc::io_error, "disk tier: cannot rename to " + path.string());
  }
  ++files_;
  return {};
}

expected<void> disk_pool::read(block_hash hash, std::span<std::byte> out, std::int64_t flip_bit) {
  auto path = path_of(hash);
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return make_error(errc::not_found, "disk tier: " + path.string() + " is missing");
  auto close_fd = make_scope_guard([fd] { ::close(fd); });
  auto header = read_header(fd, path, block_tokens_, block_bytes_, model_);
  if (!header)
    return header.error();
  if (header->hash != hash)
    return make_error(errc::corrupted, "block file " + path.string() + " holds another block");
  if (out.size() != block_bytes_ || !read_all(fd, out.data(), out.size()))
    return make_error(errc::corrupted, "block file " + path.string() + ": payload cut short");
  if (flip_bit >= 0 && static_cast<std::size_t>(flip_bit / 8) < out.size())
    out[static_cast<std::size_t>(flip_bit / 8)] ^= std::byte{1} << (flip_bit % 8);
  if (block_checksum(out) != header->checksum)
    return make_error(errc::corrupted,
                      "block file " + path.string() + ": payload checksum mismatch");
  return {};
}

void disk_pool::erase(block_hash hash) {
  std::error_code ec;
  if (std::filesystem::remove(path_of(hash), ec) && files_ > 0)
    --files_;
}

} // namespace triad
