// `shardrec bench checkpoint`: save and load throughput of one table, row-
// wise over ranks as threads, against probes run in the same process: each
// rank writing the same number of bytes sequentially to a file of its own
// (in the same pieces, with the same fsync; once before the save and once
// after the loads), and reading them back into memory the size of the
// bytes. The ratio to the probe is what survives a noisy disk. Also the
// peak extra resident memory of the save and of the load: bounded by the
// chunk size, not the table.
#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <mutex>
#include <span>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli.h"
#include "comm_job.h"
#include "commands.h"
#include "progress.h"
#include "shardrec/core/checkpoint/checkpoint.h"
#include "shardrec/core/modules/sharded_embedding_bag_collection.h"
#include "shardrec/core/resources/memory.h"
#include "shardrec/core/sharding/sharding_plan.h"
#include "shardrec/core/text/byte_size.h"

namespace shardrec::cli {

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

double Since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// The write probe: `bytes` written sequentially to a new file, fsynced.
Status ProbeWrite(const fs::path& path, int64_t bytes, int64_t chunk) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return InternalError(path.string() + ": cannot create");
  // Writes of at most 1 MiB, as the save makes them: a buffer that stays in
  // the cache, so the probe writes at its best.
  std::vector<char> buf(static_cast<size_t>(std::min({chunk, bytes, kCheckpointPieceBytes})), 1);
  for (int64_t done = 0; done < bytes;) {
    const ssize_t n = ::write(fd, buf.data(), static_cast<size_t>(std::min<int64_t>(bytes - done, static_cast<int64_t>(buf.size()))));
    if (n <= 0) {
      ::close(fd);
      return InternalError(path.string() + ": write failed");
    }
    done += n;
  }
  const bool ok = ::fsync(fd) == 0;
  ::close(fd);
  return ok ? Status::Ok() : InternalError(path.string() + ": fsync failed");
}

// Reads of 1 MiB: from the page cache they run twice as fast as reads of
// 64 MiB (whose buffer misses the cache), so the probe reads at its best.
// With `into` (memory the size of the file, touched beforehand) the bytes
// land there one after another, as a load must leave them in a table's
// memory; without it every read reuses one 1 MiB buffer, which stays in the
// cache: the page cache's own speed, writing nothing to memory.
Status ProbeRead(const fs::path& path, int64_t chunk, std::span<char> into = {}) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return InternalError(path.string() + ": cannot open");
  const int64_t piece = std::min(chunk, kCheckpointPieceBytes);
  std::vector<char> buf(into.empty() ? static_cast<size_t>(piece) : 0);
  const auto limit = static_cast<int64_t>(into.size());
  int64_t offset = 0;
  ssize_t n = 0;
  do {
    char* out = into.empty() ? buf.data() : into.data() + offset;
    const int64_t want = into.empty() ? piece : std::min(piece, limit - offset);
    if (want <= 0) break;
    n = ::pread(fd, out, static_cast<size_t>(want), offset);
    offset += std::max<ssize_t>(n, 0);
  } while (n > 0);
  ::close(fd);
  return n < 0 ? InternalError(path.string() + ": read failed") : Status::Ok();
}

// Asks the kernel to drop the cached pages of every file under `dir`
// (written and synced, so they are clean): the next read comes from disk.
void DropCache(const fs::path& dir) {
  std::error_code ec;
  for (fs::recursive_directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    if (!it->is_regular_file(ec)) continue;
    const int fd = ::open(it->path().c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) continue;
    ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    ::close(fd);
  }
}

// A load's seconds (the slowest rank's) with the page cache hot and after
// DropCache, beside the probe's.
struct LoadFigures {
  double hot = 0, cold = 0;
  int64_t extra_rss = 0;
};

struct Figures {
  // Seconds, the slowest rank's. probe_read: into memory the size of the
  // bytes (the load's reference); probe_scan: through one small buffer.
  // probe_write: the mean of probe_write_before and _after the save.
  double probe_write_before = 0, probe_write_after = 0, probe_write = 0, save = 0, probe_read = 0, probe_read_cold = 0, probe_scan = 0, probe_scan_cold = 0;
  LoadFigures first, as_read;  // checksums before loading, and as the bytes are read
  int64_t bytes = 0, save_extra_rss = 0, table_rss = 0;
};

// The two ways LoadCheckpoint checks checksums (verify_before_loading).
constexpr const char* kFirstWhat = "checksums first, then rows: LoadCheckpoint's default; damage leaves the tables untouched";
constexpr const char* kAsReadWhat = "checksums as the rows are read: train --resume, embed --from-checkpoint";

}  // namespace

int RunBenchCheckpoint(const std::vector<std::string>& args) {
  GlobalOptions g;
  CommFlags comm;
  std::string size_text = "1GiB", chunk_text = "1MiB", dir_text;
  int64_t dim = 128;
  po::options_description desc("bench checkpoint options");
  AddGlobalOptions(desc, &g);
  AddCommOptions(desc, &comm);
  desc.add_options()("table-size", po::value(&size_text)->default_value(size_text),
                     "bytes of the one fp32 table (weights only: optimizer sgd), e.g. 4GiB")(
      "dim", po::value(&dim)->default_value(dim), "columns of the table")(
      "chunk", po::value(&chunk_text)->default_value(chunk_text), "checkpoint chunk size (--checkpoint-chunk; the probes use the same pieces)")(
      "dir", po::value(&dir_text), "where to write (default: a fresh directory under $TMPDIR; removed afterwards)");
  po::variables_map vm;
  int code = kExitOk;
  if (!Parse("bench checkpoint", args, desc, nullptr, &vm, &code,
             "\n\nSaves and loads one table, row-wise over the ranks, against probes that write the same bytes\n"
             "sequentially in the same process (same pieces, fsync; before the save and after the loads) and\n"
             "read them back into memory the size of the bytes: prints the throughput ratios (aim >= 0.8),\n"
             "hot and from disk, and the peak extra resident memory of a save and of a load.\n\n"
             "examples:\n"
             "  shardrec bench checkpoint                          # 1 GiB on 2 ranks as threads\n"
             "  shardrec bench checkpoint --table-size 4GiB --world-size 2 --json")) {
    return code;
  }
  auto fail = [](const std::string& m, int c) {
    std::cerr << "shardrec bench checkpoint: " << m << "\n";
    return c;
  };
  auto size = ParseByteSize(size_text);
  auto chunk = ParseByteSize(chunk_text);
  if (!size.ok() || !chunk.ok() || size.value() <= 0 || chunk.value() <= 0 || dim <= 0) {
    return fail("--table-size, --chunk and --dim must be positive sizes", kExitUsage);
  }
  if (comm.comm != "local") return fail("runs ranks as threads (--comm local), so one process's memory is measured", kExitUsage);
  if (comm.world_size == 0) comm.world_size = 2;
  const int64_t rows = size.value() / (dim * 4);
  if (rows < comm.world_size) return fail("--table-size is too small for that many ranks", kExitUsage);
  fs::path dir;
  std::error_code ec;
  if (dir_text.empty()) {
    std::string pattern = (fs::temp_directory_path() / "shardrec-bench-checkpoint-XXXXXX").string();
    if (::mkdtemp(pattern.data()) == nullptr) return fail("cannot create a directory under $TMPDIR", kExitFailure);
    dir = pattern;
  } else {
    dir = dir_text;
    fs::create_directories(dir, ec);
    if (!fs::is_directory(dir, ec) || !fs::is_empty(dir, ec)) return fail("--dir must be a new or empty directory", kExitUsage);
  }
  HostSession session;
  if (!OpenSession("bench checkpoint", g, kAllPluginKinds, &session)) return kExitUsage;
  EmbeddingTableConfig t;
  t.name = "t0";
  t.feature_names = {"f0"};
  t.num_embeddings = rows;
  t.embedding_dim = dim;
  Figures fig;
  std::mutex mu;
  const int rc = RunOnRanks("bench checkpoint", args, comm, session, [&](const ProcessGroup& group) -> int {
    const bool lead = group.rank() == 0;
    auto run = [&]() -> Status {
      PlanRequest req;
      req.tables = {t};
      req.world_size = group.world_size();
      req.ranks_per_host = group.world_size();
      req.sharder = "row_wise";
      SR_ASSIGN_OR_RETURN(ShardingPlan plan, MakePlan(session.registry, req));
      EmbeddingModuleOptions options;
      options.optimizer = OptimizerSpec::Parse("sgd").value();
      const int64_t rss0 = CurrentRssBytes();
      SR_ASSIGN_OR_RETURN(auto ebc, ShardedEmbeddingBagCollection::Create(session.registry, group, plan, options));
      const ShardedTables& tables = ebc.tables();
      SR_ASSIGN_OR_RETURN(int64_t mine, tables.BytesOnRank());
      // The slowest rank's seconds of a collective phase.
      auto timed = [&](const std::function<Status()>& phase, double* seconds) -> Status {
        SR_RETURN_IF_ERROR(group.Barrier());
        const auto start = Clock::now();
        SR_RETURN_IF_ERROR(phase());
        SR_RETURN_IF_ERROR(group.Barrier());
        SR_ASSIGN_OR_RETURN(auto ns, AllGatherValues(group, static_cast<int64_t>(Since(start) * 1e9)));
        if (lead) *seconds = static_cast<double>(*std::max_element(ns.begin(), ns.end())) * 1e-9;
        return Status::Ok();
      };
      const fs::path probe = dir / fmt::format("probe.{}", group.rank());
      SR_RETURN_IF_ERROR(timed([&] { return ProbeWrite(probe, mine, chunk.value()); }, &fig.probe_write_before));
      int64_t rss_before = 0;
      auto reset_peak = [&]() -> Status {
        SR_RETURN_IF_ERROR(group.Barrier());
        if (lead) {
          ResetPeakRss();
          rss_before = CurrentRssBytes();
          fig.table_rss = rss_before - rss0;
        }
        return group.Barrier();
      };
      SR_RETURN_IF_ERROR(reset_peak());
      CheckpointSaveRequest save;
      save.root = dir / "ckpt";
      save.step = 1;
      save.chunk_bytes = chunk.value();
      SR_RETURN_IF_ERROR(timed([&] { return SaveCheckpoint(tables, save).status(); }, &fig.save));
      if (lead) fig.save_extra_rss = PeakRssBytes() - rss_before;
      // The read probe's destination is allocated and touched outside the
      // timing, as the table's memory is before a load, and freed after.
      auto probe_into = [&](auto time_it, double* seconds) -> Status {
        std::vector<char> into(static_cast<size_t>(mine), 1);
        return time_it([&] { return ProbeRead(probe, chunk.value(), into); }, seconds);
      };
      SR_RETURN_IF_ERROR(timed([&] { return ProbeRead(probe, chunk.value()); }, &fig.probe_scan));
      SR_RETURN_IF_ERROR(probe_into(timed, &fig.probe_read));
      // Each way of loading, hot (the bytes were just written or read) and
      // with the files dropped from the page cache first: from disk. The
      // hot load of each way follows a save or a load, never a drop.
      auto cold = [&](const std::function<Status()>& phase, double* seconds) -> Status {
        SR_RETURN_IF_ERROR(group.Barrier());
        if (lead) DropCache(dir);
        return timed(phase, seconds);
      };
      for (const bool first : {true, false}) {
        LoadFigures& lf = first ? fig.first : fig.as_read;
        CheckpointLoadRequest load;
        load.dir = save.root;
        load.chunk_bytes = chunk.value();
        load.verify_before_loading = first;
        SR_RETURN_IF_ERROR(reset_peak());
        SR_RETURN_IF_ERROR(timed([&] { return LoadCheckpoint(tables, load).status(); }, &lf.hot));
        if (lead) lf.extra_rss = PeakRssBytes() - rss_before;
        SR_RETURN_IF_ERROR(cold([&] { return LoadCheckpoint(tables, load).status(); }, &lf.cold));
      }
      SR_RETURN_IF_ERROR(cold([&] { return ProbeRead(probe, chunk.value()); }, &fig.probe_scan_cold));
      SR_RETURN_IF_ERROR(probe_into(cold, &fig.probe_read_cold));
      // The write probe again, after the save and the loads (so that its
      // pages never push the checkpoint's out of the page cache before a
      // hot load): this machine's disk writes at 0.5-3 GB/s from one minute
      // to the next, so the save is compared with the mean of a probe on
      // either side of it.
      const fs::path probe_after = dir / fmt::format("probe.{}.after", group.rank());
      SR_RETURN_IF_ERROR(timed([&] { return ProbeWrite(probe_after, mine, chunk.value()); }, &fig.probe_write_after));
      std::error_code removed;
      fs::remove(probe_after, removed);
      if (lead) {
        fig.probe_write = (fig.probe_write_before + fig.probe_write_after) / 2;
        fig.bytes = 0;
        for (const auto& s : plan.tables[0].placement.shards) fig.bytes += s.num_rows * s.num_cols * 4;
      }
      return Status::Ok();
    };
    Status s = run();
    if (!s.ok()) {
      std::lock_guard<std::mutex> lock(mu);
      std::cerr << "shardrec bench checkpoint: rank " << group.rank() << ": " << s.message() << "\n";
      return kExitFailure;
    }
    return kExitOk;
  });
  fs::remove_all(dir, ec);
  if (rc != kExitOk) return rc;
  const double gb = static_cast<double>(fig.bytes) / 1e9;
  const double save_ratio = fig.probe_write / fig.save;
  if (g.json) {
    auto load_json = [&](const LoadFigures& lf) {
      return nlohmann::json{{"load_s", lf.hot},
                            {"load_vs_probe", fig.probe_read / lf.hot},
                            {"load_vs_scan", fig.probe_scan / lf.hot},
                            {"load_cold_s", lf.cold},
                            {"load_cold_vs_probe", fig.probe_read_cold / lf.cold},
                            {"load_cold_vs_scan", fig.probe_scan_cold / lf.cold},
                            {"extra_peak_rss_bytes", lf.extra_rss}};
    };
    std::cout << nlohmann::json{{"bytes", fig.bytes}, {"world_size", comm.world_size}, {"chunk_bytes", chunk.value()},
                                {"probe_write_s", fig.probe_write},
                                {"probe_write_before_s", fig.probe_write_before}, {"probe_write_after_s", fig.probe_write_after}, {"save_s", fig.save}, {"save_vs_probe", save_ratio},
                                {"save_extra_peak_rss_bytes", fig.save_extra_rss}, {"probe_read_s", fig.probe_read},
                                {"probe_read_cold_s", fig.probe_read_cold}, {"probe_scan_s", fig.probe_scan},
                                {"probe_scan_cold_s", fig.probe_scan_cold}, {"load_checksums_first", load_json(fig.first)},
                                {"load_checksums_as_read", load_json(fig.as_read)}, {"table_rss_bytes", fig.table_rss}}
                     .dump()
              << "\n";
    return kExitOk;
  }
  std::cout << fmt::format(
      "checkpoint of one {} table ({} rows x {}), row-wise on {} ranks as threads, chunks of {}:\n"
      "  save  {:.2f} s, {:.2f} GB/s; probe write + fsync {:.2f} s, {:.2f} GB/s (the mean of {:.2f} s before the save "
      "and {:.2f} s after); save / probe {:.2f} (aim >= 0.8); extra peak memory {}\n"
      "  probe read into memory the size of the bytes (the least a load does): hot {:.2f} s, {:.2f} GB/s; "
      "disk {:.2f} s, {:.2f} GB/s\n"
      "  scan: the same reads through one 1 MiB buffer (the page cache's speed; nothing lands in memory): "
      "hot {:.2f} s, {:.2f} GB/s; disk {:.2f} s, {:.2f} GB/s\n"
      "  (hot: the bytes were just written or read; disk: the files were dropped from the page cache first)\n",
      FormatByteSize(fig.bytes), rows, dim, comm.world_size, FormatByteSize(chunk.value()), fig.save, gb / fig.save,
      fig.probe_write, gb / fig.probe_write, fig.probe_write_before, fig.probe_write_after, save_ratio, FormatByteSize(fig.save_extra_rss), fig.probe_read,
      gb / fig.probe_read, fig.probe_read_cold, gb / fig.probe_read_cold, fig.probe_scan, gb / fig.probe_scan,
      fig.probe_scan_cold, gb / fig.probe_scan_cold);
  for (const bool first : {true, false}) {
    const LoadFigures& lf = first ? fig.first : fig.as_read;
    std::cout << fmt::format(
        "  load, {}:\n"
        "    hot   {:.2f} s, {:.2f} GB/s; load / probe {:.2f} (aim >= 0.8); load / scan {:.2f}\n"
        "    disk  {:.2f} s, {:.2f} GB/s; load / probe {:.2f} (aim >= 0.8); load / scan {:.2f}\n"
        "    extra peak memory {}\n",
        first ? kFirstWhat : kAsReadWhat, lf.hot, gb / lf.hot, fig.probe_read / lf.hot, fig.probe_scan / lf.hot,
        lf.cold, gb / lf.cold, fig.probe_read_cold / lf.cold, fig.probe_scan_cold / lf.cold,
        FormatByteSize(lf.extra_rss));
  }
  std::cout << fmt::format("  the table itself: {}\n", FormatByteSize(fig.table_rss));
  return kExitOk;
}

}  // namespace shardrec::cli
