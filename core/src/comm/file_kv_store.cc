// file:DIR — one file per key under DIR/<prefix>/, each written to a
// temporary name and renamed, so a reader sees a whole value or nothing.
// Works wherever every rank sees the directory (one host, or NFS with
// close-to-open consistency). Readers poll.
#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "kv_store_impls.h"

namespace shardrec::kv_store_impl {
namespace {

namespace fs = std::filesystem;

// Keys and prefixes become file names: [A-Za-z0-9._-] stay, the rest is %XX.
std::string Encode(const std::string& s) {
  static const char* hex = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '.' || c == '_' || c == '-') {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += hex[c >> 4];
      out += hex[c & 15];
    }
  }
  return out;
}

class FileStore final : public PollingStore {
 public:
  FileStore(fs::path dir, std::string describe, int64_t default_timeout_ms)
      : PollingStore(std::move(describe), default_timeout_ms), dir_(std::move(dir)) {}

  Status Set(const std::string& key, std::string_view value) override {
    const fs::path final_path = dir_ / Encode(key);
    const fs::path tmp = dir_ / (".tmp." + std::to_string(::getpid()) + "." + std::to_string(++counter_) + "." +
                                 Encode(key));
    {
      std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
      f.write(value.data(), static_cast<std::streamsize>(value.size()));
      if (!f) return UnavailableError(describe_ + ": cannot write " + tmp.string() + ": " + std::strerror(errno));
    }
    std::error_code ec;
    fs::rename(tmp, final_path, ec);
    if (ec) return UnavailableError(describe_ + ": cannot rename to " + final_path.string() + ": " + ec.message());
    return Status::Ok();
  }

  StatusOr<bool> TryRead(const std::string& key, std::string* value) override {
    std::ifstream f(dir_ / Encode(key), std::ios::binary);
    if (!f) return false;
    std::ostringstream ss;
    ss << f.rdbuf();
    *value = ss.str();
    return true;
  }

 private:
  const fs::path dir_;
  std::atomic<uint64_t> counter_{0};
};

}  // namespace

StatusOr<std::unique_ptr<KvStore>> OpenFileStore(const std::string& dir, const std::string& prefix,
                                                 int64_t default_timeout_ms) {
  const std::string describe = "rendezvous file:" + dir + " (prefix " + prefix + ")";
  const fs::path path = fs::path(dir) / Encode(prefix);
  std::error_code ec;
  fs::create_directories(path, ec);
  if (ec) return UnavailableError(describe + ": cannot create " + path.string() + ": " + ec.message());
  // Fail now, not at the first rank's write, when the directory is read-only.
  if (::access(path.c_str(), W_OK | X_OK) != 0) {
    return UnavailableError(describe + ": cannot write into " + path.string() + ": " + std::strerror(errno));
  }
  return std::unique_ptr<KvStore>(new FileStore(path, describe, default_timeout_ms));
}

}  // namespace shardrec::kv_store_impl
