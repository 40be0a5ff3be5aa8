// Checksums of checkpoint files: XXH3-64 (xxHash, Debian's libxxhash), the
// fastest well-kept non-cryptographic hash with a stable, documented output,
// so another tool can check a file with `xxhsum -H3` or python-xxhash.
// Checksums catch torn and corrupted files; they are not a defence against
// someone who can write the checkpoint.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>

#include "shardrec/core/status.h"

namespace shardrec {

// XXH3-64 fed in pieces: a file written in chunks is hashed as it is written.
class Xxh3Stream {
 public:
  Xxh3Stream();
  ~Xxh3Stream();
  Xxh3Stream(const Xxh3Stream&) = delete;
  Xxh3Stream& operator=(const Xxh3Stream&) = delete;
  void Update(const void* data, size_t size);
  uint64_t Digest() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

// 16 lowercase hex digits, as the manifest stores it.
std::string Xxh3Hex(uint64_t digest);

// XXH3-64 of a whole file, read in chunks of `chunk_bytes`; its size in *bytes.
// (1 MiB reads: their buffer stays in the cache for the hash.)
StatusOr<uint64_t> Xxh3OfFile(const std::filesystem::path& path, int64_t* bytes, size_t chunk_bytes = size_t{1} << 20);

}  // namespace shardrec
