// What every built-in sharder shares: reading the table and topology it is
// asked about, per-call options, the two-call shard_table protocol, the
// TorchRec row split, and where a table goes when the user names no rank.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "shardrec/sdk/options.hpp"
#include "shardrec/sdk/status.hpp"
#include "shardrec/abi/sharder.h"

namespace shardrec::sharders {

struct Request {
  std::string table;
  int64_t rows = 0, cols = 0;
  int world = 1, ranks_per_host = 1;
  int hosts() const { return world / ranks_per_host; }
};

// Checks what every sharder needs from the call (table, topology, out
// pointers) and returns it; errors name the sharder and the table.
inline Request ReadRequest(const char* sharder, const sr_shard_table_args& a) {
  const std::string who = std::string("sharder ") + sharder;
  if (a.table == nullptr || a.topology == nullptr || a.num_shards == nullptr || a.placement == nullptr) {
    throw sdk::InvalidArgument(who + ": shard_table needs table, topology, num_shards and placement");
  }
  if (a.shards_capacity > 0 && a.shards == nullptr) throw sdk::InvalidArgument(who + ": shards is NULL");
  Request r;
  r.table = a.table->name != nullptr ? a.table->name : "";
  r.rows = a.table->num_rows;
  r.cols = a.table->num_cols;
  r.world = a.topology->world_size;
  r.ranks_per_host = a.topology->ranks_per_host;
  if (r.rows < 0 || r.cols <= 0) {
    throw sdk::InvalidArgument(who + ": table '" + r.table + "' has " + std::to_string(r.rows) + " rows and " +
                               std::to_string(r.cols) + " columns");
  }
  if (r.world < 1 || r.ranks_per_host < 1 || r.world % r.ranks_per_host != 0) {
    throw sdk::InvalidArgument(who + ": topology of " + std::to_string(r.world) + " ranks, " +
                               std::to_string(r.ranks_per_host) + " per host: the hosts must hold equal numbers");
  }
  return r;
}

// Writes min(needed, capacity) shards (made by Shard(), struct_size set) and
// the count and placement: the size-query protocol of sr_shard_table_args.
inline void Emit(const sr_shard_table_args& a, const std::vector<sr_shard>& shards, int32_t placement) {
  *a.num_shards = shards.size();
  *a.placement = placement;
  for (size_t i = 0; i < shards.size() && i < a.shards_capacity; ++i) a.shards[i] = shards[i];
}

inline sr_shard Shard(int64_t row_offset, int64_t num_rows, int64_t col_offset, int64_t num_cols, int rank) {
  sr_shard s{};
  s.struct_size = SR_STRUCT_SIZE(sr_shard, rank);
  s.row_offset = row_offset;
  s.num_rows = num_rows;
  s.col_offset = col_offset;
  s.num_cols = num_cols;
  s.rank = rank;
  return s;
}

// TorchRec's row split of `rows` over `parts`: blocks of ceil(rows / parts)
// in order, so the last parts may get fewer rows or none (their offset is
// then `rows`). Returns (offset, count) per part.
inline std::vector<std::pair<int64_t, int64_t>> RowBlocks(int64_t rows, int parts) {
  const int64_t block = (rows + parts - 1) / parts;
  std::vector<std::pair<int64_t, int64_t>> out;
  for (int p = 0; p < parts; ++p) {
    const int64_t begin = std::min(rows, block * p);
    const int64_t end = std::min(rows, block * (p + 1));
    out.emplace_back(begin, end - begin);
  }
  return out;
}

// RowBlocks over `parts` consecutive ranks from `first_rank`, whole rows.
inline std::vector<sr_shard> RowShards(const Request& r, int parts, int first_rank) {
  std::vector<sr_shard> shards;
  int rank = first_rank;
  for (auto [offset, count] : RowBlocks(r.rows, parts)) shards.push_back(Shard(offset, count, 0, r.cols, rank++));
  return shards;
}

// Where a table goes when no rank is given: a stable hash of its name
// (FNV-1a), so every rank and every run agree without talking.
inline int HashedChoice(const std::string& name, int choices) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : name) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return static_cast<int>(h % static_cast<uint64_t>(choices));
}

// An int option in [0, limit), or `fallback` when absent.
inline int RankOption(sdk::Options& o, const char* key, int fallback, int limit, const std::string& who) {
  const int64_t v = o.GetInt(key, fallback);
  if (v < 0 || v >= limit) {
    throw sdk::InvalidArgument(who + ": " + key + " " + std::to_string(v) + " is outside [0, " +
                               std::to_string(limit) + ")");
  }
  return static_cast<int>(v);
}

// "0,2,1" -> {0, 2, 1}, each in [0, limit); "" -> {}.
inline std::vector<int> RankList(const std::string& text, int limit, const std::string& who) {
  std::vector<int> out;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find(',', start);
    if (end == std::string::npos) end = text.size();
    const std::string item = text.substr(start, end - start);
    char* stop = nullptr;
    const long v = std::strtol(item.c_str(), &stop, 10);
    if (item.empty() || *stop != '\0' || v < 0 || v >= limit) {
      throw sdk::InvalidArgument(who + ": ranks '" + text + "': '" + item + "' is not a rank in [0, " +
                                 std::to_string(limit) + ")");
    }
    out.push_back(static_cast<int>(v));
    start = end + 1;
  }
  return out;
}

}  // namespace shardrec::sharders
