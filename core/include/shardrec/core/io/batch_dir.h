// Directories of .npy files that carry a batch in and results out, so that
// `shardrec embed` can be checked against PyTorch with NumPy alone
// (docs/file-formats.md has the full description):
//   KJT dir:          keys.txt (one key a line), lengths.npy (int64|int32 [sum of strides]),
//                     values.npy (int64|int32 [nnz]), optional weights.npy (float32 [nnz]),
//                     optional stride_per_key.npy (int64|int32 [F])
//   KeyedTensor dir:  values.npy (float32 [B, sum dims]), keys.txt, offset_per_key.npy (int64 [F+1])
//   Jagged dir:       values.npy (float32 [N, D]), lengths.npy (int64 [B])
// Reads validate everything and name the file at fault.
#pragma once

#include <filesystem>

#include "shardrec/core/sparse/jagged_tensor.h"
#include "shardrec/core/sparse/keyed_jagged_tensor.h"
#include "shardrec/core/sparse/keyed_tensor.h"

namespace shardrec {

StatusOr<std::vector<std::string>> ReadKeysFile(const std::filesystem::path& path);
Status WriteKeysFile(const std::filesystem::path& path, const std::vector<std::string>& keys);

StatusOr<KeyedJaggedTensor> ReadKjtDir(const std::filesystem::path& dir);
Status WriteKjtDir(const std::filesystem::path& dir, const KeyedJaggedTensor& kjt);
Status WriteKeyedTensorDir(const std::filesystem::path& dir, const KeyedTensor& kt);
Status WriteJaggedDir(const std::filesystem::path& dir, const JaggedTensor& jt);

}  // namespace shardrec
