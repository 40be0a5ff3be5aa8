#include "mc_policies.h"

#include <filesystem>
#include <iostream>
#include <sstream>

#include "shardrec/core/managed_collision/mch_module.h"

namespace shardrec::cli {

std::vector<std::string> SplitPolicies(const std::string& list) {
  std::vector<std::string> out;
  std::stringstream ss(list);
  std::string item;
  while (std::getline(ss, item, ',')) {
    const size_t b = item.find_first_not_of(" \t"), e = item.find_last_not_of(" \t");
    if (b != std::string::npos) out.push_back(item.substr(b, e - b + 1));
  }
  return out;
}

std::vector<std::string> PolicyLibraries(const std::vector<std::string>& policies) {
  std::vector<std::string> files;
  for (const std::string& p : policies) {
    // ResolveEvictionPolicy's test: anything else is a component name.
    const bool is_path = p.find('/') != std::string::npos || p.ends_with(".so") || p.find(".so:") != std::string::npos;
    if (!is_path) continue;
    const size_t colon = p.rfind(".so:");
    const std::string file = colon == std::string::npos ? p : p.substr(0, colon + 3);
    std::error_code ec;
    if (std::filesystem::is_regular_file(file, ec)) files.push_back(file);
  }
  return files;
}

bool ResolvePolicy(const std::string& command, HostSession& session, const std::string& given, ResolvedPolicy* out,
                   int* exit_code) {
  auto name = ResolveEvictionPolicy(session.registry, given);
  if (!name.ok()) {
    const int code = name.status().code();
    *exit_code = code == SR_NOT_FOUND || code == SR_INVALID_ARGUMENT ? kExitUsage : kExitFailure;
    std::cerr << "shardrec " << command << ": --policy " << given << ": " << name.status().message() << "\n";
    return false;
  }
  auto ref = session.registry.Find(SR_KIND_EVICTION, name.value());
  if (!ref.ok()) {
    *exit_code = kExitFailure;
    std::cerr << "shardrec " << command << ": --policy " << given << ": " << ref.status().message() << "\n";
    return false;
  }
  out->given = given;
  out->name = name.value();
  out->library = ref->library->path().string();
  out->options = session.plugin_options.For("eviction", out->name);
  return true;
}

}  // namespace shardrec::cli
