// The header of a .npy file: the Python dict literal NumPy writes, e.g.
//   {'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }
// read by a small hand-checked scanner (one pass, no recursion, no
// regex: std::regex overflowed the stack on a ~50 KB field). It accepts
// exactly the three keys, each once, in any order, with Python's optional
// spaces and trailing commas; anything else is an error saying where.
// Internal to core/src/tensor (npy.cc and the fuzz target).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "shardrec/core/status.h"

namespace shardrec::npy {

struct Header {
  std::string descr;          // e.g. "<f4", as written
  bool fortran_order = false;
  std::vector<int64_t> shape;
};

// At most this many dimensions (NumPy's own limit is 64).
inline constexpr size_t kMaxDims = 64;

// Parses `text` (the header after the length field, padding included).
// Errors are INVALID_ARGUMENT with a message that names the problem and
// its byte offset, without the file name (the caller adds it).
StatusOr<Header> ParseHeader(std::string_view text);

}  // namespace shardrec::npy
