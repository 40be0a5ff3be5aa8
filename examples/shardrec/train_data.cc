// Synthetic training data (train_data.h).
#include "train_data.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <sstream>

#include <fmt/format.h>

#include "shardrec/sdk/init.hpp"

namespace shardrec::cli {

namespace {
StatusOr<int64_t> PositiveInt(const std::string& text, const std::string& what, const std::string& item) {
  size_t used = 0;
  int64_t v = 0;
  try {
    v = std::stoll(text, &used);
  } catch (...) {
    used = 0;
  }
  if (used != text.size() || text.empty() || v <= 0) {
    return InvalidArgumentError(fmt::format("tables spec item '{}': {} '{}' is not a positive integer", item, what, text));
  }
  return v;
}
}  // namespace

StatusOr<std::vector<EmbeddingTableConfig>> ParseTablesSpec(const std::string& spec) {
  std::vector<EmbeddingTableConfig> tables;
  std::stringstream items(spec);
  std::string item;
  while (std::getline(items, item, ',')) {
    std::string shape = item;
    PoolingType pooling = PoolingType::kSum;
    if (const size_t colon = item.find(':'); colon != std::string::npos) {
      shape = item.substr(0, colon);
      SR_ASSIGN_OR_RETURN(pooling, ParsePooling(item.substr(colon + 1)));
      if (pooling == PoolingType::kNone) {
        return InvalidArgumentError("tables spec item '" + item + "': train pools (sum or mean)");
      }
    }
    std::vector<std::string> parts;
    std::stringstream dims(shape);
    for (std::string p; std::getline(dims, p, 'x');) parts.push_back(p);
    if (parts.size() != 2 && parts.size() != 3) {
      return InvalidArgumentError("tables spec item '" + item + "': expected [COUNTx]ROWSxDIM[:sum|mean], e.g. 4x100000x64");
    }
    int64_t count = 1;
    if (parts.size() == 3) {
      SR_ASSIGN_OR_RETURN(count, PositiveInt(parts[0], "COUNT", item));
    }
    SR_ASSIGN_OR_RETURN(int64_t rows, PositiveInt(parts[parts.size() - 2], "ROWS", item));
    SR_ASSIGN_OR_RETURN(int64_t dim, PositiveInt(parts.back(), "DIM", item));
    for (int64_t i = 0; i < count; ++i) {
      EmbeddingTableConfig t;
      t.name = fmt::format("t{}", tables.size());
      t.feature_names = {fmt::format("f{}", tables.size())};
      t.num_embeddings = rows;
      t.embedding_dim = dim;
      t.pooling = pooling;
      tables.push_back(std::move(t));
    }
  }
  if (tables.empty()) return InvalidArgumentError("tables spec '" + spec + "' names no table");
  return tables;
}

StatusOr<std::vector<EmbeddingTableConfig>> TablesFromFileOrSpec(const std::string& spec) {
  std::error_code ec;
  if (std::filesystem::is_regular_file(spec, ec)) return LoadTablesFile(spec);
  if (spec.find(".json") != std::string::npos) return NotFoundError("tables file '" + spec + "' does not exist");
  return ParseTablesSpec(spec);
}

StatusOr<SyntheticData> SyntheticData::Create(std::vector<EmbeddingTableConfig> tables, const std::string& ids,
                                              std::vector<double> pooling_factors, uint64_t seed,
                                              std::vector<int64_t> raw_id_space, std::vector<uint8_t> hashed) {
  SyntheticData d;
  d.tables_ = std::move(tables);
  if (!raw_id_space.empty() && raw_id_space.size() != d.tables_.size()) {
    return InvalidArgumentError("raw id spaces: one per table");
  }
  if (!hashed.empty() && hashed.size() != d.tables_.size()) return InvalidArgumentError("hashed ids: one flag per table");
  for (size_t t = 0; t < d.tables_.size(); ++t) {
    const int64_t raw = raw_id_space.empty() ? 0 : raw_id_space[t];
    if (raw < 0 || raw > (int64_t{1} << 40)) return InvalidArgumentError("raw id space must be in [0, 2^40]");
    d.space_.push_back(raw > 0 ? raw : d.tables_[t].num_embeddings);
    d.raw_.push_back(raw > 0);
    const bool fold = !hashed.empty() && hashed[t] != 0;
    if (fold && raw == 0) return InvalidArgumentError("table " + d.tables_[t].name + ": hashed ids need a raw id space");
    d.hashed_.push_back(fold);
  }
  d.seed_ = seed;
  d.ids_ = ids;
  for (size_t t = 0; t < d.tables_.size(); ++t) {
    for (const auto& f : d.tables_[t].feature_names) {
      d.features_.push_back(f);
      d.feature_table_.push_back(static_cast<int32_t>(t));
    }
  }
  if (pooling_factors.size() != 1 && pooling_factors.size() != d.features_.size()) {
    return InvalidArgumentError(fmt::format("--pooling-factor: give one value or one per feature ({} features), got {}",
                                            d.features_.size(), pooling_factors.size()));
  }
  for (double p : pooling_factors) {
    if (!(p >= 0) || p > 1e6) return InvalidArgumentError(fmt::format("--pooling-factor {} must be in [0, 1e6]", p));
  }
  d.pooling_ = pooling_factors.size() == 1 ? std::vector<double>(d.features_.size(), pooling_factors[0]) : pooling_factors;
  if (ids == "uniform") return d;
  if (ids.rfind("zipf:", 0) == 0) {
    char* end = nullptr;
    d.zipf_alpha_ = std::strtod(ids.c_str() + 5, &end);
    if (*end != '\0' || !(d.zipf_alpha_ > 0)) {
      return InvalidArgumentError("--ids " + ids + ": ALPHA must be a positive number, e.g. zipf:1.05");
    }
    for (int64_t space : d.space_) d.zipf_.emplace_back(space, d.zipf_alpha_);
    return d;
  }
  return InvalidArgumentError("--ids must be uniform or zipf:ALPHA, got '" + ids + "'");
}

namespace {
// SplitMix64 as a standard random bit generator: one per (step, sample,
// feature), seeded in a few cycles (mt19937_64 would take 312 words).
struct SampleRng {
  using result_type = uint64_t;
  uint64_t state;
  static constexpr uint64_t min() { return 0; }
  static constexpr uint64_t max() { return ~uint64_t{0}; }
  uint64_t operator()() { return sdk::Mix64(state += 0x9E3779B97F4A7C15ull); }
};
}  // namespace

KeyedJaggedTensor SyntheticData::Batch(int rank, int64_t step, int64_t batch) const {
  return Samples(step, static_cast<int64_t>(rank) * batch, batch);
}

KeyedJaggedTensor SyntheticData::Samples(int64_t step, int64_t first, int64_t count) const {
  const uint64_t step_seed = sdk::Mix64(sdk::Mix64(seed_ ^ 0x5eedull) + static_cast<uint64_t>(step) * 0x100000001B3ull);
  std::vector<int64_t> values, lengths;
  std::vector<float> weights;
  bool weighted = false;
  for (const auto& t : tables_) weighted |= t.is_weighted;
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  std::vector<double> draws;  // a feature's zipf draws, resolved together (zipf_ids.h)
  for (size_t f = 0; f < features_.size(); ++f) {
    const auto t = static_cast<size_t>(feature_table_[f]);
    const int64_t space = space_[t];
    const auto max_len = static_cast<uint64_t>(std::llround(2 * pooling_[f]));
    const size_t feature_first = values.size();
    draws.clear();
    for (int64_t b = first; b < first + count; ++b) {
      SampleRng rng{sdk::Mix64(step_seed + static_cast<uint64_t>(b) * 0x9E37ull + f * 0xC2B2AE3D27D4EB4Full)};
      const int64_t n = static_cast<int64_t>(rng() % (max_len + 1));
      lengths.push_back(n);
      for (int64_t i = 0; i < n; ++i) {
        if (zipf_alpha_ > 0) {
          draws.push_back(unit(rng));
          values.push_back(0);
        } else {
          values.push_back(static_cast<int64_t>(rng() % static_cast<uint64_t>(space)));
        }
        if (weighted) weights.push_back(static_cast<float>(0.5 + unit(rng)));
      }
    }
    const std::span<int64_t> ids(values.data() + feature_first, values.size() - feature_first);
    if (zipf_alpha_ > 0) zipf_[t].Ids(draws, ids.data());
    for (int64_t& id : ids) {
      id = std::min<int64_t>(id, space - 1);
      // A bijection: N distinct k give N distinct raw ids, spread over int64.
      if (raw_[t]) id = static_cast<int64_t>(sdk::Mix64(static_cast<uint64_t>(id) ^ 0xac1d5ull));
      if (hashed_[t]) id = static_cast<int64_t>(static_cast<uint64_t>(id) % static_cast<uint64_t>(tables_[t].num_embeddings));
    }
  }
  std::optional<std::vector<float>> w;
  if (weighted) w = std::move(weights);
  return KeyedJaggedTensor::FromLengths(features_, std::move(values), std::move(lengths), std::move(w)).value();
}

KeyedJaggedTensor SyntheticData::GlobalBatch(int world, int64_t step, int64_t batch) const {
  return Samples(step, 0, static_cast<int64_t>(world) * batch);
}

Tensor SyntheticData::Gradient(int64_t first, int64_t rows, int64_t width, int64_t step) const {
  Tensor g = Tensor::Empty(dtype::kFloat32, {rows, width});
  float* out = g.data<float>();
  const uint64_t base = sdk::Mix64(seed_ ^ 0x67adull) + static_cast<uint64_t>(step) * 0x9E3779B97F4A7C15ull;
  for (int64_t b = 0; b < rows; ++b) {
    for (int64_t c = 0; c < width; ++c) {
      // A unit in [-1, 1) per (sample, column, step): the same on every rank.
      const uint64_t h = sdk::Mix64(base + static_cast<uint64_t>(first + b) * 0x100000001B3ull + static_cast<uint64_t>(c));
      out[b * width + c] = static_cast<float>(static_cast<double>(h >> 11) * 0x1.0p-52 - 1.0);
    }
  }
  return g;
}

namespace {

// A unit in [0, 1) from a 64-bit hash.
double Unit(uint64_t h) { return static_cast<double>(h >> 11) * 0x1.0p-53; }

}  // namespace

Tensor SyntheticData::DenseFeatures(int64_t step, int64_t first, int64_t rows, int64_t n) const {
  Tensor x = Tensor::Empty(dtype::kFloat32, {rows, n});
  const uint64_t base = sdk::Mix64(seed_ ^ 0xde05eull) + static_cast<uint64_t>(step) * 0x9E3779B97F4A7C15ull;
  for (int64_t b = 0; b < rows; ++b) {
    for (int64_t j = 0; j < n; ++j) {
      const uint64_t h = sdk::Mix64(base + static_cast<uint64_t>(first + b) * 0x100000001B3ull + static_cast<uint64_t>(j));
      x.data<float>()[b * n + j] = static_cast<float>(3.0 * Unit(h));
    }
  }
  return x;
}

Tensor SyntheticData::Labels(const KeyedJaggedTensor& batch, const Tensor& dense, int64_t step, int64_t first) const {
  const int64_t rows = dense.size(0), n = dense.size(1);
  std::vector<double> logit(static_cast<size_t>(rows), 0.0);
  const uint64_t planted = sdk::Mix64(seed_ ^ 0x1abe1ull);
  auto sign = [](uint64_t h) { return (h & 1) != 0 ? 0.5 : -0.5; };
  for (int64_t b = 0; b < rows; ++b) {
    for (int64_t j = 0; j < n; ++j) {
      logit[static_cast<size_t>(b)] += sign(sdk::Mix64(planted + static_cast<uint64_t>(j))) * (dense.data<float>()[b * n + j] - 1.5);
    }
  }
  // Bags are feature-major: feature f's lengths for the batch, then f + 1's.
  const auto& lengths = batch.lengths();
  const auto& values = batch.values();
  size_t at = 0;
  for (size_t f = 0; f < batch.keys().size(); ++f) {
    for (int64_t b = 0; b < rows; ++b) {
      const int64_t len = lengths[f * static_cast<size_t>(rows) + static_cast<size_t>(b)];
      if (len > 0) {
        logit[static_cast<size_t>(b)] += sign(sdk::Mix64(planted ^ (static_cast<uint64_t>(values[at]) * 0x9E37ull + f)));
      }
      at += static_cast<size_t>(len);
    }
  }
  Tensor y = Tensor::Empty(dtype::kFloat32, {rows});
  const uint64_t noise = sdk::Mix64(seed_ ^ 0x4015eull) + static_cast<uint64_t>(step) * 0x9E3779B97F4A7C15ull;
  for (int64_t b = 0; b < rows; ++b) {
    const double p = 1.0 / (1.0 + std::exp(-logit[static_cast<size_t>(b)]));
    y.data<float>()[b] = Unit(sdk::Mix64(noise + static_cast<uint64_t>(first + b))) < p ? 1.0f : 0.0f;
  }
  return y;
}

std::string SyntheticData::Describe() const {
  std::string p = fmt::format("{}", pooling_.empty() ? 0.0 : pooling_[0]);
  for (double x : pooling_) {
    if (x != pooling_[0]) p = "per feature";
  }
  std::string hashed;
  for (size_t t = 0; t < tables_.size(); ++t) {
    if (hashed_[t]) hashed += fmt::format("{}{} ({} raw ids)", hashed.empty() ? "" : ", ", tables_[t].name, space_[t]);
  }
  if (!hashed.empty()) hashed = "; hashed into their rows: " + hashed;
  return fmt::format("{} ids, pooling factor {}{}", ids_, p, hashed);
}

}  // namespace shardrec::cli
