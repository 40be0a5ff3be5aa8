// While a plugin library is being loaded (dlopen, its constructors, the
// entry symbol, initialize()), a crash in its code would kill the host with
// nothing but "Segmentation fault". A CrashNote installed for that span
// writes one line naming the library and the signal to stderr first, then
// lets the signal do what it did before (the default: die, core dump).
//
// Not for hot paths: it swaps five signal handlers. Not thread-safe: one
// note at a time (discovery is single-threaded).
#pragma once

#include <string>

namespace shardrec {

class CrashNote {
 public:
  // `what`: the line's subject, e.g. "while loading plugin library /x.so".
  explicit CrashNote(const std::string& what);
  ~CrashNote();
  CrashNote(const CrashNote&) = delete;
  CrashNote& operator=(const CrashNote&) = delete;
};

}  // namespace shardrec
