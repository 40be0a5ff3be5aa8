#include "shardrec/core/checkpoint/checksum.h"

#include <fcntl.h>
#include <unistd.h>
#include <xxhash.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include <fmt/format.h>

namespace shardrec {

struct Xxh3Stream::State {
  XXH3_state_t* s = XXH3_createState();
  ~State() { XXH3_freeState(s); }
};

Xxh3Stream::Xxh3Stream() : state_(std::make_unique<State>()) {
  if (state_->s == nullptr) throw std::bad_alloc();
  XXH3_64bits_reset(state_->s);
}

Xxh3Stream::~Xxh3Stream() = default;

void Xxh3Stream::Update(const void* data, size_t size) { XXH3_64bits_update(state_->s, data, size); }

uint64_t Xxh3Stream::Digest() const { return XXH3_64bits_digest(state_->s); }

std::string Xxh3Hex(uint64_t digest) { return fmt::format("{:016x}", digest); }

StatusOr<uint64_t> Xxh3OfFile(const std::filesystem::path& path, int64_t* bytes, size_t chunk_bytes) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Status(SR_NOT_FOUND, path.string() + ": cannot open: " + std::strerror(errno));
  Xxh3Stream hash;
  std::vector<char> buf(std::max<size_t>(chunk_bytes, 4096));
  int64_t total = 0;
  for (;;) {
    const ssize_t n = ::read(fd, buf.data(), buf.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const std::string why = std::strerror(errno);
      ::close(fd);
      return UnavailableError(path.string() + ": cannot read: " + why);
    }
    if (n == 0) break;
    hash.Update(buf.data(), static_cast<size_t>(n));
    total += n;
  }
  ::close(fd);
  if (bytes != nullptr) *bytes = total;
  return hash.Digest();
}

}  // namespace shardrec
