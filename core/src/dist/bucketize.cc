// BucketizeKjt (bucketize.h): one counting pass for the sizes, one pass to
// place every id; no sort, so ids keep their order inside a bucket.
#include "shardrec/core/dist/bucketize.h"

#include <algorithm>

#include <fmt/format.h>

namespace shardrec {

StatusOr<BucketizedKjt> BucketizeKjt(const KeyedJaggedTensor& kjt,
                                     const std::vector<std::vector<int64_t>>& bucket_offsets) {
  const int F = kjt.num_keys();
  if (static_cast<int>(bucket_offsets.size()) != F) {
    return InvalidArgumentError(fmt::format("bucketize: {} bucket boundary lists for {} keys", bucket_offsets.size(), F));
  }
  const size_t nb = F > 0 ? bucket_offsets[0].size() - 1 : 0;
  for (int f = 0; f < F; ++f) {
    const auto& o = bucket_offsets[f];
    if (o.size() < 2 || o.size() - 1 != nb || !std::is_sorted(o.begin(), o.end())) {
      return InvalidArgumentError(fmt::format("bucketize: key '{}': bucket boundaries must be {} ascending rows",
                                              kjt.keys()[f], nb + 1));
    }
  }
  const auto& lengths = kjt.lengths();
  const auto& offsets = kjt.offsets();
  const auto& values = kjt.values();
  // Bucket of every id, and how many ids each (bucket, bag) gets.
  std::vector<int32_t> bucket_of(values.size());
  const int64_t bags = static_cast<int64_t>(lengths.size());
  std::vector<int64_t> out_lengths(nb * bags, 0);  // [bucket][bag]
  for (int f = 0; f < F; ++f) {
    const auto& o = bucket_offsets[f];
    for (int64_t bag = kjt.BagOffset(f); bag < kjt.BagOffset(f + 1); ++bag) {
      for (int64_t i = offsets[bag]; i < offsets[bag + 1]; ++i) {
        const int64_t id = values[i];
        if (id < o.front() || id >= o.back()) {
          return InvalidArgumentError(fmt::format("bucketize: key '{}' sample {}: id {} is outside rows [{}, {})",
                                                  kjt.keys()[f], bag - kjt.BagOffset(f), id, o.front(), o.back()));
        }
        const auto b = static_cast<int32_t>(std::upper_bound(o.begin(), o.end(), id) - o.begin() - 1);
        bucket_of[i] = b;
        ++out_lengths[b * bags + bag];
      }
    }
  }
  // Where each (bucket, bag) starts in the output (bucket-major, then bags
  // in the input's feature-major order).
  std::vector<int64_t> start(nb * bags + 1, 0);
  for (size_t j = 0; j < nb * static_cast<size_t>(bags); ++j) start[j + 1] = start[j] + out_lengths[j];
  std::vector<int64_t> out_values(values.size()), permute(values.size());
  std::vector<float> out_weights(kjt.has_weights() ? values.size() : 0);
  std::vector<int64_t> cursor(start.begin(), start.end() - 1);
  for (int f = 0; f < F; ++f) {
    for (int64_t bag = kjt.BagOffset(f); bag < kjt.BagOffset(f + 1); ++bag) {
      for (int64_t i = offsets[bag]; i < offsets[bag + 1]; ++i) {
        const int32_t b = bucket_of[i];
        const int64_t at = cursor[b * bags + bag]++;
        out_values[at] = values[i] - bucket_offsets[f][b];
        permute[i] = at;
        if (kjt.has_weights()) out_weights[at] = (*kjt.weights())[i];
      }
    }
  }
  std::vector<std::string> keys;
  std::vector<int64_t> strides;
  for (size_t b = 0; b < nb; ++b) {
    keys.insert(keys.end(), kjt.keys().begin(), kjt.keys().end());
    strides.insert(strides.end(), kjt.stride_per_key().begin(), kjt.stride_per_key().end());
  }
  std::optional<std::vector<float>> weights;
  if (kjt.has_weights()) weights = std::move(out_weights);
  SR_ASSIGN_OR_RETURN(KeyedJaggedTensor out,
                      KeyedJaggedTensor::FromLengthsWithRepeatedKeys(
                          std::move(keys), std::move(out_values), std::move(out_lengths), std::move(weights),
                          kjt.variable_stride_per_key() ? std::move(strides) : std::vector<int64_t>{}));
  return BucketizedKjt{std::move(out), std::move(permute)};
}

StatusOr<BucketizedKjt> BucketizeKjtByBlockSize(const KeyedJaggedTensor& kjt, int num_buckets,
                                                const std::vector<int64_t>& block_sizes) {
  if (num_buckets < 1 || static_cast<int>(block_sizes.size()) != kjt.num_keys()) {
    return InvalidArgumentError(fmt::format("bucketize: {} buckets and {} block sizes for {} keys", num_buckets,
                                            block_sizes.size(), kjt.num_keys()));
  }
  std::vector<std::vector<int64_t>> offsets(block_sizes.size());
  for (size_t f = 0; f < block_sizes.size(); ++f) {
    for (int b = 0; b <= num_buckets; ++b) offsets[f].push_back(block_sizes[f] * b);
  }
  return BucketizeKjt(kjt, offsets);
}

}  // namespace shardrec
