// `shardrec bench data`: the click-log reader alone (core/data), one pass
// over a log on 1 and 2 parsing threads, against a probe that only reads
// the same bytes (zlib's gzread, as the reader does): samples/s, MB/s of
// text, and the ratio to the probe.
#include <unistd.h>
#include <zlib.h>

#include <chrono>
#include <filesystem>
#include <iostream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli.h"
#include "commands.h"
#include "progress.h"
#include "shardrec/core/data/click_log_reader.h"
#include "shardrec/core/data/planted_click_log.h"

namespace shardrec::cli {

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// Reads every byte of the files, as the reader's source does; returns bytes.
StatusOr<int64_t> ProbeRead(const data::ClickLogSpec& spec) {
  int64_t total = 0;
  std::vector<char> buf(size_t{1} << 20);
  for (const auto& f : spec.files) {
    gzFile gz = gzopen(f.c_str(), "rb");
    if (gz == nullptr) return InvalidArgumentError(f + ": cannot open");
    gzbuffer(gz, 1u << 20);
    for (int n; (n = gzread(gz, buf.data(), static_cast<unsigned>(buf.size()))) > 0;) total += n;
    gzclose(gz);
  }
  return total;
}

}  // namespace

int RunBenchData(const std::vector<std::string>& args) {
  GlobalOptions g;
  std::string spec_text;
  int64_t samples = 1000000, batch = 4096, shuffle = 0;
  po::options_description desc("bench data options");
  AddGlobalOptions(desc, &g);
  desc.add_options()("data", po::value(&spec_text),
                     "criteo:PATH to read (default: a planted log of --samples written to a temporary directory)")(
      "samples", po::value(&samples)->default_value(samples), "the planted log's size when --data is not given")(
      "batch", po::value(&batch)->default_value(batch), "samples per batch")(
      "shuffle-buffer", po::value(&shuffle)->default_value(shuffle), "as train's --shuffle-buffer");
  po::variables_map vm;
  int code = kExitOk;
  if (!Parse("bench data", args, desc, nullptr, &vm, &code,
             "\n\nOne pass of the click-log reader over a log, parsing on 1 and then 2 threads, against a probe that\n"
             "reads the same bytes and parses nothing: samples/s, MB/s of text, reader / probe.\n\n"
             "example:\n  shardrec bench data --data criteo:clicks/train")) {
    return code;
  }
  auto fail = [](const std::string& m, int exit_code) {
    std::cerr << "shardrec bench data: " << m << "\n";
    return exit_code;
  };
  if (samples < 1 || batch < 1 || shuffle < 0) return fail("--samples and --batch must be >= 1", kExitUsage);
  fs::path tmp;
  if (spec_text.empty()) {
    tmp = fs::temp_directory_path() / fmt::format("shardrec_bench_data_{}", getpid());
    fs::create_directories(tmp);
    data::PlantedClickModel model{data::PlantedClickModelOptions{}};
    if (Status st = data::WritePlantedTsv(model, 0, samples, tmp / "day_0.tsv", nullptr, nullptr); !st.ok()) {
      fs::remove_all(tmp);
      return fail(st.message(), kExitFailure);
    }
    spec_text = "criteo:" + (tmp / "day_0.tsv").string();
  }
  struct Cleanup {
    fs::path dir;
    ~Cleanup() {
      std::error_code ec;
      if (!dir.empty()) fs::remove_all(dir, ec);
    }
  } cleanup{tmp};
  auto spec = data::ClickLogSpec::Parse(spec_text);
  if (!spec.ok()) return fail(spec.status().message(), kExitUsage);
  // Warm the page cache first: both sides then read from memory.
  (void)ProbeRead(spec.value());
  auto start = Clock::now();
  auto bytes = ProbeRead(spec.value());
  const double probe_s = Seconds(start);
  if (!bytes.ok()) return fail(bytes.status().message(), kExitFailure);
  nlohmann::json out = {{"data", spec_text}, {"bytes", bytes.value()}, {"probe_s", probe_s}, {"runs", nlohmann::json::array()}};
  std::string text = fmt::format("click-log reader on {} ({:.1f} MB):\n  probe (read the bytes, parse nothing): "
                                 "{:.3f} s, {:.0f} MB/s\n",
                                 spec_text, static_cast<double>(bytes.value()) / 1e6, probe_s,
                                 static_cast<double>(bytes.value()) / 1e6 / probe_s);
  for (int threads : {1, 2}) {
    data::ClickLogOptions o;
    o.batch = batch;
    o.shuffle_buffer = shuffle;
    o.threads = threads;
    for (int f = 0; f < data::kCriteoSparse; ++f) {
      o.features.push_back(fmt::format("f{}", f));
      o.num_embeddings.push_back(100000);
    }
    start = Clock::now();
    auto reader = data::ClickLogReader::Open(spec.value(), o);
    if (!reader.ok()) return fail(reader.status().message(), kExitFailure);
    int64_t n = 0;
    for (;;) {
      auto b = (*reader)->Next();
      if (!b.ok()) return fail(b.status().message(), kExitFailure);
      if (!b->has_value()) break;
      n += (*b)->labels.numel();
    }
    const double secs = Seconds(start);
    const double mb_s = static_cast<double>(bytes.value()) / 1e6 / secs;
    out["runs"].push_back({{"threads", threads}, {"samples", n}, {"seconds", secs}, {"samples_per_s", n / secs},
                           {"mb_per_s", mb_s}, {"reader_over_probe", probe_s / secs}});
    text += fmt::format("  reader, {} parsing thread(s): {:.3f} s, {} samples/s, {:.0f} MB/s; reader / probe {:.2f}\n",
                        threads, secs, Rate(static_cast<double>(n) / secs), mb_s, probe_s / secs);
  }
  std::cout << (g.json ? out.dump() + "\n" : text);
  return kExitOk;
}

}  // namespace shardrec::cli
