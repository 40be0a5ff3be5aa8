#include "crash_note.h"

#include <signal.h>
#include <string.h>
#include <unistd.h>

#include <array>
#include <cstddef>

namespace shardrec {

namespace {

constexpr std::array<int, 5> kSignals = {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT};

// The line is formatted before the crash: a handler may only call
// async-signal-safe functions, so it just writes these bytes.
char g_line[4096];
size_t g_line_size = 0;
struct sigaction g_previous[kSignals.size()];

void Append(char* buf, size_t* size, size_t cap, const char* text) {
  const size_t n = ::strnlen(text, cap - *size);
  ::memcpy(buf + *size, text, n);
  *size += n;
}

void OnCrash(int sig) {
  char line[sizeof g_line + 64];
  size_t size = 0;
  const char* abbrev = ::sigabbrev_np(sig);
  Append(line, &size, sizeof line, "shardrec: crashed (");
  Append(line, &size, sizeof line, abbrev != nullptr ? "SIG" : "a signal");
  if (abbrev != nullptr) Append(line, &size, sizeof line, abbrev);
  Append(line, &size, sizeof line, ") ");
  ::memcpy(line + size, g_line, g_line_size);
  size += g_line_size;
  (void)!::write(STDERR_FILENO, line, size);
  // Put back what was there and deliver the signal again: a crash handler,
  // a core dump or the default death proceeds as if we had not been here.
  for (size_t i = 0; i < kSignals.size(); ++i) {
    if (kSignals[i] == sig) ::sigaction(sig, &g_previous[i], nullptr);
  }
  ::raise(sig);
}

}  // namespace

CrashNote::CrashNote(const std::string& what) {
  g_line_size = 0;
  Append(g_line, &g_line_size, sizeof g_line - 2, what.c_str());
  Append(g_line, &g_line_size, sizeof g_line, "\n");
  struct sigaction action {};
  action.sa_handler = &OnCrash;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_NODEFER;
  for (size_t i = 0; i < kSignals.size(); ++i) ::sigaction(kSignals[i], &action, &g_previous[i]);
}

CrashNote::~CrashNote() {
  for (size_t i = 0; i < kSignals.size(); ++i) ::sigaction(kSignals[i], &g_previous[i], nullptr);
}

}  // namespace shardrec
