// Entry points of the `shardrec` subcommands; each returns a process exit
// code (cli::kExit*). `args` are the words after the command's own words.
#pragma once

#include <string>
#include <vector>

namespace shardrec::cli {

int RunPlugins(const std::vector<std::string>& args);       // plugins (list + conformance kit)
int RunPluginsList(const std::vector<std::string>& args);   // plugins list
int RunPluginsCheck(const std::vector<std::string>& args);  // plugins check
int RunBenchAbi(const std::vector<std::string>& args);      // bench abi
int RunBenchKernel(const std::vector<std::string>& args);   // bench kernel
int RunEmbed(const std::vector<std::string>& args);         // embed
int RunLaunch(const std::vector<std::string>& args);        // launch
int RunCommCheck(const std::vector<std::string>& args);     // comm check
int RunBenchComm(const std::vector<std::string>& args);     // bench comm
int RunTrain(const std::vector<std::string>& args);         // train, and no subcommand (the main job)
int RunReplayEvictions(const std::vector<std::string>& args);  // replay-evictions
int RunBenchMc(const std::vector<std::string>& args);       // bench mc
int RunBenchCache(const std::vector<std::string>& args);    // bench cache
int RunBenchCheckpoint(const std::vector<std::string>& args);  // bench checkpoint
int RunCheckpointInspect(const std::vector<std::string>& args);  // checkpoint inspect
int RunDatagen(const std::vector<std::string>& args);       // datagen
int RunPlot(const std::vector<std::string>& args);          // plot
int RunMetrics(const std::vector<std::string>& args);       // metrics
int RunBenchData(const std::vector<std::string>& args);     // bench data
int RunDemo(const std::vector<std::string>& args);          // demo, and no arguments at all (the main job)
int RunCodec(const std::vector<std::string>& args);         // codec
int RunPlan(const std::vector<std::string>& args);          // plan
int RunBenchTopology(const std::vector<std::string>& args); // bench topology
int RunBenchPlanner(const std::vector<std::string>& args);  // bench planner
int RunExport(const std::vector<std::string>& args);        // export
int RunInfer(const std::vector<std::string>& args);         // infer

}  // namespace shardrec::cli
