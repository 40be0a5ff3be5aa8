// An output directory written as a whole: every file goes into a staging
// directory beside it (`.NAME.new.PID`), and Commit() puts the set in place
// with one rename (or, when the directory exists, one atomic exchange), so
// a reader sees the old set or the new one, never a mix and never half a
// set. An error while writing — a full disk, a name that cannot be a file —
// leaves the directory as it was: the staging directory is removed when the
// object goes without Commit(). One a killed writer left behind is removed
// by the next StagedDirectory for the same directory.
//
// An existing directory is replaced whole, so it must hold only what its
// writer owns: Begin() refuses one holding any other name (with the list),
// rather than deleting what someone put there.
#pragma once

#include <filesystem>
#include <set>
#include <string>

#include "shardrec/core/status.h"

namespace shardrec {

class StagedDirectory {
 public:
  // Prepares to replace `dir`. `owned` are the top-level names the writer
  // writes there (files or directories); an existing `dir` holding anything
  // else is refused with FAILED_PRECONDITION naming it. `dir` being a file
  // is refused too. The parent of `dir` is created when missing.
  static StatusOr<StagedDirectory> Begin(const std::filesystem::path& dir, const std::set<std::string>& owned);

  StagedDirectory(StagedDirectory&& other) noexcept;
  StagedDirectory& operator=(StagedDirectory&&) = delete;
  ~StagedDirectory();  // removes the staging directory unless committed

  // Where the writer writes: a fresh, empty directory on the same file
  // system as `dir`.
  const std::filesystem::path& staging() const { return staging_; }
  const std::filesystem::path& dir() const { return dir_; }

  // fsyncs the staging directory tree, moves it into place (exchanging
  // with the old `dir` when there is one), fsyncs the parent, and removes
  // the old set. After an error nothing has moved.
  Status Commit();

 private:
  StagedDirectory(std::filesystem::path dir, std::filesystem::path staging);
  std::filesystem::path dir_, staging_;
  bool committed_ = false;
};

}  // namespace shardrec
