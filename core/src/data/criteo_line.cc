// ParseCriteoLine (criteo_line.h): a hand-written field scanner, because
// this is the reader's inner loop (std::from_chars does the numbers).
#include "shardrec/core/data/criteo_line.h"

#include <algorithm>
#include <charconv>
#include <cmath>

#include <fmt/format.h>

namespace shardrec::data {

std::string CriteoFieldName(int field) {
  if (field == 0) return "label";
  if (field <= kCriteoDense) return fmt::format("int_{}", field - 1);
  return fmt::format("cat_{}", field - 1 - kCriteoDense);
}

float CriteoDenseTransform(int64_t x) { return static_cast<float>(std::log1p(static_cast<double>(std::max<int64_t>(x, 0)))); }

namespace {

std::string Shown(std::string_view s) {
  constexpr size_t kMax = 24;
  std::string out(s.substr(0, kMax));
  for (char& c : out) {
    if (static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) >= 0x7f) c = '?';
  }
  return s.size() > kMax ? out + "..." : out;
}

Status FieldError(int field, std::string_view text, const char* what) {
  return InvalidArgumentError(fmt::format("field {} ({}): '{}' is not {}", field + 1, CriteoFieldName(field), Shown(text), what));
}

}  // namespace

Status ParseCriteoLine(std::string_view line, CriteoRow* row) {
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  int field = 0;
  size_t start = 0;
  for (;;) {
    const size_t tab = line.find('\t', start);
    const size_t end = tab == std::string_view::npos ? line.size() : tab;
    if (field >= kCriteoFields) {
      return InvalidArgumentError(fmt::format("more than {} tab-separated fields", kCriteoFields));
    }
    const std::string_view text = line.substr(start, end - start);
    const char* first = text.data();
    const char* last = text.data() + text.size();
    if (field == 0) {
      if (text.empty() || text == "0") {
        row->label = 0;
      } else if (text == "1") {
        row->label = 1;
      } else {
        return FieldError(field, text, "a label (0 or 1)");
      }
    } else if (field <= kCriteoDense) {
      int64_t v = 0;
      if (!text.empty()) {
        auto [p, ec] = std::from_chars(first, last, v);
        if (ec != std::errc() || p != last) return FieldError(field, text, "an integer");
      }
      row->dense[static_cast<size_t>(field - 1)] = v;
    } else {
      uint64_t v = 0;
      if (!text.empty()) {
        if (text.size() > 16) return FieldError(field, text, "a hex hash of at most 16 digits");
        auto [p, ec] = std::from_chars(first, last, v, 16);
        if (ec != std::errc() || p != last) return FieldError(field, text, "a hex hash");
      }
      row->sparse[static_cast<size_t>(field - 1 - kCriteoDense)] = v;
    }
    ++field;
    if (tab == std::string_view::npos) break;
    start = tab + 1;
  }
  if (field != kCriteoFields) {
    return InvalidArgumentError(fmt::format("{} tab-separated field{}, a Criteo line has {} (label, {} integers, {} "
                                            "categorical)",
                                            field, field == 1 ? "" : "s", kCriteoFields, kCriteoDense, kCriteoSparse));
  }
  return Status::Ok();
}

}  // namespace shardrec::data
