#include "exit_guard.h"

#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "cli.h"
#include "shardrec/core/plugin_library.h"

namespace shardrec::cli {

namespace {

std::atomic<bool> g_host_exit{false};

void OnExit() {
  if (g_host_exit.load()) return;
  const std::string loading = LibraryBeingLoaded().string();
  const std::string where = loading.empty() ? "by a plugin or a library it uses (the host never calls exit())"
                                            : "while loading plugin library " + loading;
  const std::string line = "shardrec: exit() was called " + where +
                           " before the command finished; its status is not trusted, exiting with " +
                           std::to_string(kExitFailure) + "\n";
  std::fflush(stdout);
  (void)!::write(STDERR_FILENO, line.data(), line.size());
  ::_exit(kExitFailure);
}

}  // namespace

void InstallExitGuard() { std::atexit(&OnExit); }

void MarkHostExit() { g_host_exit.store(true); }

}  // namespace shardrec::cli
