// User options for plugins: `--plugin-opt KIND.NAME.KEY=VALUE` (repeatable)
// collected once, then handed to a component as an sr_named_value_list of
// strings (ABI rule 9). The plugin parses and validates the values; the host
// only checks the shape of the flag.
#pragma once

#include <initializer_list>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "shardrec/abi/base.h"
#include "shardrec/core/status.h"

namespace shardrec {

// An owning key/value list with a borrowed C view.
class OptionList {
 public:
  OptionList() = default;
  explicit OptionList(std::vector<std::pair<std::string, std::string>> items);
  OptionList(std::initializer_list<std::pair<std::string, std::string>> items)
      : OptionList(std::vector<std::pair<std::string, std::string>>(items)) {}
  OptionList(const OptionList& other) : OptionList(other.items_) {}
  OptionList& operator=(const OptionList& other);

  void Set(const std::string& key, const std::string& value);
  // Valid until this list is changed or destroyed.
  sr_named_value_list view() const { return {values_.data(), values_.size()}; }
  const std::vector<std::pair<std::string, std::string>>& items() const { return items_; }

 private:
  void Rebuild();
  std::vector<std::pair<std::string, std::string>> items_;
  std::vector<sr_named_value> values_;
};

// The options of component `name` in a by-name map such as
// PluginOptions::ForKind's (empty when it has none).
OptionList OptionsOf(const std::map<std::string, OptionList>& by_name, const std::string& name);

class PluginOptions {
 public:
  // Parses "kind.name.key=value". Error names the flag and the format.
  Status Add(const std::string& flag);
  // Options for one component (empty when none were given).
  OptionList For(const std::string& kind, const std::string& name) const;
  // Options of every component of one kind, by name (e.g. every sharder's,
  // for PlanRequest::sharder_options).
  std::map<std::string, OptionList> ForKind(const std::string& kind) const;
  // Every (kind, name) some option was given for.
  std::vector<std::pair<std::string, std::string>> Components() const {
    std::vector<std::pair<std::string, std::string>> out;
    for (const auto& entry : by_component_) out.push_back(entry.first);
    return out;
  }

 private:
  std::map<std::pair<std::string, std::string>, std::vector<std::pair<std::string, std::string>>>
      by_component_;
};

}  // namespace shardrec
