// shardrec plugin SDK — typed access to the key/value options a component
// receives (`--plugin-opt kind.name.key=value` arrives as key="value").
// Every Get* marks the key as known; Finish() then rejects any key the
// component never asked for, naming it and the accepted ones, so a typo is an
// error rather than a silently ignored setting.
#ifndef SHARDREC_SDK_OPTIONS_HPP_
#define SHARDREC_SDK_OPTIONS_HPP_

#include <cerrno>
#include <cstdlib>
#include <set>
#include <string>
#include <string_view>

#include "shardrec/sdk/status.hpp"

namespace shardrec::sdk {

class Options {
 public:
  // `owner` names the component in error messages ("eviction lru").
  Options(sr_named_value_list list, std::string owner)
      : list_(list), owner_(std::move(owner)) {
    if (list_.count > 0 && list_.values == nullptr) {
      throw InvalidArgument(owner_ + ": option list has a count but no values");
    }
  }

  std::string GetString(const char* key, std::string fallback) {
    const sr_named_value* v = Find(key);
    if (v == nullptr) return fallback;
    return AsText(*v);
  }

  double GetDouble(const char* key, double fallback) {
    const sr_named_value* v = Find(key);
    if (v == nullptr) return fallback;
    if (v->type == SR_VALUE_FLOAT64) return v->value.float64_value;
    if (v->type == SR_VALUE_INT64) return static_cast<double>(v->value.int64_value);
    const std::string text = AsText(*v);
    char* end = nullptr;
    errno = 0;
    const double d = std::strtod(text.c_str(), &end);
    if (text.empty() || *end != '\0' || errno == ERANGE) Bad(key, text, "a number");
    return d;
  }

  int64_t GetInt(const char* key, int64_t fallback) {
    const sr_named_value* v = Find(key);
    if (v == nullptr) return fallback;
    if (v->type == SR_VALUE_INT64 || v->type == SR_VALUE_BOOL) return v->value.int64_value;
    const std::string text = AsText(*v);
    char* end = nullptr;
    errno = 0;
    const long long i = std::strtoll(text.c_str(), &end, 10);
    if (text.empty() || *end != '\0' || errno == ERANGE) Bad(key, text, "an integer");
    return i;
  }

  bool GetBool(const char* key, bool fallback) {
    const sr_named_value* v = Find(key);
    if (v == nullptr) return fallback;
    if (v->type == SR_VALUE_BOOL || v->type == SR_VALUE_INT64) return v->value.int64_value != 0;
    const std::string text = AsText(*v);
    if (text == "1" || text == "true" || text == "on" || text == "yes") return true;
    if (text == "0" || text == "false" || text == "off" || text == "no") return false;
    Bad(key, text, "true or false");
    return false;
  }

  // Throws SR_INVALID_ARGUMENT for the first key no Get* asked for.
  void Finish() const {
    for (size_t i = 0; i < list_.count; ++i) {
      const char* name = list_.values[i].name ? list_.values[i].name : "";
      if (known_.count(name) == 0) {
        std::string accepted;
        for (const auto& k : known_) accepted += (accepted.empty() ? "" : ", ") + k;
        throw InvalidArgument(owner_ + ": unknown option '" + name + "' (accepted: " +
                              (accepted.empty() ? "none" : accepted) + ")");
      }
    }
  }

 private:
  const sr_named_value* Find(const char* key) {
    known_.insert(key);
    const sr_named_value* found = nullptr;
    for (size_t i = 0; i < list_.count; ++i) {
      const sr_named_value& v = list_.values[i];
      if (v.name != nullptr && std::string_view(v.name) == key) found = &v;  // last wins
    }
    return found;
  }

  std::string AsText(const sr_named_value& v) const {
    switch (v.type) {
      case SR_VALUE_STRING:
        return v.value.string_value ? std::string(v.value.string_value, v.value_size) : "";
      case SR_VALUE_INT64:
      case SR_VALUE_BOOL:
        return std::to_string(v.value.int64_value);
      case SR_VALUE_FLOAT64:
        return std::to_string(v.value.float64_value);
      default:
        throw InvalidArgument(owner_ + ": option '" + v.name + "' has a list value");
    }
  }

  [[noreturn]] void Bad(const char* key, const std::string& text, const char* want) const {
    throw InvalidArgument(owner_ + ": option '" + key + "' must be " + want + ", got '" + text +
                          "'");
  }

  sr_named_value_list list_;
  std::string owner_;
  std::set<std::string> known_;
};

}  // namespace shardrec::sdk

#endif  // SHARDREC_SDK_OPTIONS_HPP_
