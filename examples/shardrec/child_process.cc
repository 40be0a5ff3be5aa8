#include "child_process.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace shardrec::cli {

std::pair<std::string, int> RunChild(const std::vector<std::string>& words) {
  auto quote = [](const std::string& w) {
    std::string quoted;
    for (char ch : w) quoted += ch == '\'' ? std::string("'\\''") : std::string(1, ch);
    return "'" + quoted + "'";
  };
  std::string cmd = quote(std::filesystem::read_symlink("/proc/self/exe").string());
  for (const std::string& w : words) cmd += " " + quote(w);
  cmd += " 2>&1";
  FILE* pipe = ::popen(cmd.c_str(), "r");
  if (!pipe) return {"cannot start " + cmd, -1};
  std::string out;
  char buf[4096];
  while (size_t n = std::fread(buf, 1, sizeof(buf), pipe)) out.append(buf, n);
  return {out, ::pclose(pipe)};
}

std::string LastJsonLine(const std::string& out) {
  if (out.rfind('{', 0) == 0 && out.find("\n{") == std::string::npos) return out;
  const size_t start = out.rfind("\n{");
  return start == std::string::npos ? "" : out.substr(start + 1);
}

std::string OutputTail(const std::string& out) { return out.substr(out.size() > 400 ? out.size() - 400 : 0); }

StatusOr<double> TrainChildSamplesPerSecond(const std::vector<std::string>& words) {
  const auto [out, status] = RunChild(words);
  try {
    const nlohmann::json j = nlohmann::json::parse(LastJsonLine(out));
    std::vector<double> rates = j.at("step_samples_per_s").get<std::vector<double>>();
    if (rates.size() > 5) rates.erase(rates.begin(), rates.begin() + static_cast<long>(rates.size() / 5));
    std::sort(rates.begin(), rates.end());
    return rates.empty() ? j.at("samples_per_s").get<double>() : rates[rates.size() / 2];
  } catch (const std::exception&) {
    return Status(SR_INTERNAL, fmt::format("train exited {} without a result: {}", status, OutputTail(out)));
  }
}

}  // namespace shardrec::cli
