// One line of a Criteo click log (Kaggle's Display Advertising Challenge or
// the 1TB Click Logs): tab-separated, 40 fields: the label, 13 integer
// features, 26 categorical features as hex strings (32-bit hashes). Any
// field may be empty; as TorchRec reads these files, a missing value is 0.
// A trailing '\r' (CRLF files) is ignored.
//
// The transforms the issue (and TorchRec's DLRM example) applies: a dense
// value becomes log(1 + max(x, 0)), a categorical value v becomes the row
// v mod num_embeddings of its feature's table.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

#include "shardrec/core/status.h"

namespace shardrec::data {

inline constexpr int kCriteoDense = 13;
inline constexpr int kCriteoSparse = 26;
inline constexpr int kCriteoFields = 1 + kCriteoDense + kCriteoSparse;

struct CriteoRow {
  float label = 0;                                // 0 or 1
  std::array<int64_t, kCriteoDense> dense{};      // raw counts (may be negative)
  std::array<uint64_t, kCriteoSparse> sparse{};   // raw hashes
};

// Parses `line` (without its '\n'). The error says which field is wrong
// and why ("field 7 (int_5): 'x1' is not an integer"); the caller adds the
// file and line number.
Status ParseCriteoLine(std::string_view line, CriteoRow* row);

// Column names as TorchRec's criteo module spells them: label, int_0 ..
// int_12, cat_0 .. cat_25.
std::string CriteoFieldName(int field);

// log(1 + max(x, 0)).
float CriteoDenseTransform(int64_t x);

}  // namespace shardrec::data
