// .npy header scanner (npy_header.h).
#include "npy_header.h"

namespace shardrec::npy {
namespace {

class Scanner {
 public:
  explicit Scanner(std::string_view text) : s_(text) {}

  void SkipSpace() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\t' || s_[i_] == '\n' || s_[i_] == '\r')) ++i_;
  }
  bool Eat(char c) {
    SkipSpace();
    if (i_ < s_.size() && s_[i_] == c) {
      ++i_;
      return true;
    }
    return false;
  }
  bool AtEnd() {
    SkipSpace();
    return i_ == s_.size();
  }
  size_t pos() const { return i_; }

  Status Error(const std::string& what) const {
    return InvalidArgumentError("bad .npy header at byte " + std::to_string(i_) + ": " + what);
  }

  // 'text' or "text" (no escapes: NumPy's keys and dtypes have none).
  StatusOr<std::string> String() {
    SkipSpace();
    if (i_ >= s_.size() || (s_[i_] != '\'' && s_[i_] != '"')) return Error("expected a quoted string");
    const char quote = s_[i_++];
    const size_t start = i_;
    while (i_ < s_.size() && s_[i_] != quote) {
      if (s_[i_] == '\\' || s_[i_] == '\n') return Error("unsupported character in a string");
      ++i_;
    }
    if (i_ >= s_.size()) return Error("unterminated string");
    return std::string(s_.substr(start, i_++ - start));
  }

  StatusOr<bool> Bool() {
    SkipSpace();
    if (s_.substr(i_, 4) == "True") {
      i_ += 4;
      return true;
    }
    if (s_.substr(i_, 5) == "False") {
      i_ += 5;
      return false;
    }
    return Error("expected True or False");
  }

  // (), (n,), (n, m), (n, m, ) with non-negative decimal integers < 2^63.
  StatusOr<std::vector<int64_t>> Shape() {
    if (!Eat('(')) return Error("expected '(' to start the shape");
    std::vector<int64_t> dims;
    while (true) {
      if (Eat(')')) return dims;
      SkipSpace();
      if (i_ >= s_.size() || s_[i_] < '0' || s_[i_] > '9') return Error("expected a dimension (a non-negative integer)");
      int64_t v = 0;
      while (i_ < s_.size() && s_[i_] >= '0' && s_[i_] <= '9') {
        if (__builtin_mul_overflow(v, int64_t{10}, &v) || __builtin_add_overflow(v, int64_t{s_[i_] - '0'}, &v)) {
          return Error("dimension too large");
        }
        ++i_;
      }
      if (s_.substr(i_, 1) == "L") ++i_;  // Python 2's long suffix, as old NumPy wrote it
      if (dims.size() == kMaxDims) return Error("more than " + std::to_string(kMaxDims) + " dimensions");
      dims.push_back(v);
      if (Eat(')')) return dims;
      if (!Eat(',')) return Error("expected ',' or ')' in the shape");
    }
  }

 private:
  std::string_view s_;
  size_t i_ = 0;
};

}  // namespace

StatusOr<Header> ParseHeader(std::string_view text) {
  Scanner in(text);
  Header h;
  bool seen_descr = false, seen_order = false, seen_shape = false;
  if (!in.Eat('{')) return in.Error("expected '{'");
  while (!in.Eat('}')) {
    SR_ASSIGN_OR_RETURN(std::string key, in.String());
    if (!in.Eat(':')) return in.Error("expected ':' after '" + key + "'");
    if (key == "descr" && !seen_descr) {
      SR_ASSIGN_OR_RETURN(h.descr, in.String());
      seen_descr = true;
    } else if (key == "fortran_order" && !seen_order) {
      SR_ASSIGN_OR_RETURN(h.fortran_order, in.Bool());
      seen_order = true;
    } else if (key == "shape" && !seen_shape) {
      SR_ASSIGN_OR_RETURN(h.shape, in.Shape());
      seen_shape = true;
    } else if (key == "descr" || key == "fortran_order" || key == "shape") {
      return in.Error("'" + key + "' given twice");
    } else {
      return in.Error("unexpected key '" + key.substr(0, 64) + "' (a .npy header has descr, fortran_order, shape)");
    }
    if (in.Eat('}')) break;
    if (!in.Eat(',')) return in.Error("expected ',' or '}'");
  }
  if (!in.AtEnd()) return in.Error("unexpected text after the closing '}'");
  if (!seen_descr) return InvalidArgumentError("header has no 'descr'");
  if (!seen_order) return InvalidArgumentError("header has no 'fortran_order'");
  if (!seen_shape) return InvalidArgumentError("header has no 'shape'");
  return h;
}

}  // namespace shardrec::npy
