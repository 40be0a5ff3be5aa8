#include "shardrec/core/io/leftovers.h"

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

namespace shardrec {

namespace fs = std::filesystem;

bool ProcessIsGone(pid_t pid) { return pid > 0 && ::kill(pid, 0) != 0 && errno == ESRCH; }

int RemoveLeftoversOfDeadProcesses(const fs::path& dir, const std::string& prefix) {
  int removed = 0;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir.empty() ? fs::path(".") : dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.size() <= prefix.size() || name.compare(0, prefix.size(), prefix) != 0) continue;
    const std::string rest = name.substr(prefix.size());
    const size_t digits = rest.find_first_not_of("0123456789");
    const std::string pid_text = rest.substr(0, digits);
    if (pid_text.empty() || pid_text.size() > 9) continue;
    if (digits != std::string::npos && rest[digits] != '-') continue;
    struct stat st {};
    if (::lstat(entry.path().c_str(), &st) != 0 || st.st_uid != ::geteuid()) continue;
    if (!ProcessIsGone(static_cast<pid_t>(std::stol(pid_text)))) continue;
    std::error_code rm;
    if (fs::remove_all(entry.path(), rm) > 0 && !rm) ++removed;
  }
  return removed;
}

}  // namespace shardrec
