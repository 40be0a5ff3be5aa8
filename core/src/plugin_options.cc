// --plugin-opt parsing and the C view of option lists.
#include "shardrec/core/plugin_options.h"

#include <regex>

#include "shardrec/core/plugin_library.h"

namespace shardrec {

OptionList::OptionList(std::vector<std::pair<std::string, std::string>> items)
    : items_(std::move(items)) {
  Rebuild();
}

OptionList& OptionList::operator=(const OptionList& other) {
  items_ = other.items_;
  Rebuild();
  return *this;
}

void OptionList::Set(const std::string& key, const std::string& value) {
  items_.emplace_back(key, value);
  Rebuild();
}

void OptionList::Rebuild() {
  values_.clear();
  values_.reserve(items_.size());
  for (const auto& [key, value] : items_) {
    sr_named_value v{};
    v.struct_size = SR_STRUCT_SIZE(sr_named_value, value_size);
    v.name = key.c_str();
    v.type = SR_VALUE_STRING;
    v.value.string_value = value.c_str();
    v.value_size = value.size();
    values_.push_back(v);
  }
}

Status PluginOptions::Add(const std::string& flag) {
  static const std::regex kPattern("([a-z]+)\\.([a-z0-9_]+)\\.([A-Za-z0-9_.-]+)=(.*)");
  std::smatch m;
  if (!std::regex_match(flag, m, kPattern)) {
    return InvalidArgumentError("--plugin-opt '" + flag +
                                "' is not KIND.NAME.KEY=VALUE (e.g. eviction.lru.decay_exponent=2)");
  }
  if (KindFromName(m[1].str()) == 0) {
    return InvalidArgumentError("--plugin-opt '" + flag + "': unknown kind '" + m[1].str() +
                                "' (sharder, kernel, comm, eviction)");
  }
  by_component_[{m[1].str(), m[2].str()}].emplace_back(m[3].str(), m[4].str());
  return Status::Ok();
}

OptionList PluginOptions::For(const std::string& kind, const std::string& name) const {
  auto it = by_component_.find({kind, name});
  return it == by_component_.end() ? OptionList() : OptionList(it->second);
}

OptionList OptionsOf(const std::map<std::string, OptionList>& by_name, const std::string& name) {
  const auto it = by_name.find(name);
  return it == by_name.end() ? OptionList() : it->second;
}

std::map<std::string, OptionList> PluginOptions::ForKind(const std::string& kind) const {
  std::map<std::string, OptionList> out;
  for (const auto& [key, items] : by_component_) {
    if (key.first == kind) out.emplace(key.second, OptionList(items));
  }
  return out;
}

}  // namespace shardrec
