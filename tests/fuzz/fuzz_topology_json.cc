// Fuzz target: the planner's topology file (JSON) parser. A file it accepts
// must write back to one it accepts with the same figures.
#include <string>

#include "fuzz_input.h"
#include "shardrec/core/planner/planner_topology.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  auto topology = shardrec::ParseTopologyJson(text, "fuzz.json");
  if (!topology.ok()) return 0;
  if (topology->kernels.empty() || !(topology->intra_host.bytes_per_s > 0) || !(topology->inter_host.bytes_per_s > 0)) {
    __builtin_trap();  // the parser requires them
  }
  const std::string written = shardrec::TopologyToJson(topology.value());
  auto again = shardrec::ParseTopologyJson(written, "again");
  if (!again.ok() || shardrec::TopologyToJson(again.value()) != written) __builtin_trap();
  return 0;
}
