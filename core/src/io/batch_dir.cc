// Batch and result directories of .npy files (see batch_dir.h).
#include "shardrec/core/io/batch_dir.h"

#include <fstream>


#include "shardrec/core/tensor/dtype_convert.h"
#include "shardrec/core/tensor/npy.h"

namespace shardrec {

namespace fs = std::filesystem;

namespace {
StatusOr<std::vector<int64_t>> ReadInt64Vector(const fs::path& path) {
  SR_ASSIGN_OR_RETURN(Tensor raw, ReadNpy(path));
  SR_ASSIGN_OR_RETURN(Tensor t, ToInt64(raw, path.string()));
  if (t.ndim() != 1) {
    return InvalidArgumentError(path.string() + ": expected a 1-D array, got shape " + ShapeString(t.shape()));
  }
  return std::vector<int64_t>(t.span<int64_t>().begin(), t.span<int64_t>().end());
}

Status MakeDir(const fs::path& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return InvalidArgumentError(dir.string() + ": cannot create directory: " + ec.message());
  return Status::Ok();
}
}  // namespace

StatusOr<std::vector<std::string>> ReadKeysFile(const fs::path& path) {
  std::ifstream in(path);
  if (!in) return Status(SR_NOT_FOUND, path.string() + ": no such file (one key per line)");
  std::vector<std::string> keys;
  std::string line;
  while (std::getline(in, line)) {
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ' || line.back() == '\t')) line.pop_back();
    if (!line.empty()) keys.push_back(line);
  }
  return keys;
}

Status WriteKeysFile(const fs::path& path, const std::vector<std::string>& keys) {
  return WriteFileAtomically(
      path, [&](std::ostream& out) {
        for (const auto& k : keys) out << k << "\n";
      },
      std::ios::out);
}

StatusOr<KeyedJaggedTensor> ReadKjtDir(const fs::path& dir) {
  if (!fs::is_directory(dir)) return Status(SR_NOT_FOUND, dir.string() + ": not a directory");
  SR_ASSIGN_OR_RETURN(auto keys, ReadKeysFile(dir / "keys.txt"));
  SR_ASSIGN_OR_RETURN(auto lengths, ReadInt64Vector(dir / "lengths.npy"));
  SR_ASSIGN_OR_RETURN(auto values, ReadInt64Vector(dir / "values.npy"));
  std::optional<std::vector<float>> weights;
  if (fs::exists(dir / "weights.npy")) {
    SR_ASSIGN_OR_RETURN(Tensor w, ReadNpy(dir / "weights.npy"));
    SR_RETURN_IF_ERROR(ExpectTensor(w, (dir / "weights.npy").string(), dtype::kFloat32, 1));
    weights.emplace(w.span<float>().begin(), w.span<float>().end());
  }
  std::vector<int64_t> strides;
  if (fs::exists(dir / "stride_per_key.npy")) {
    SR_ASSIGN_OR_RETURN(strides, ReadInt64Vector(dir / "stride_per_key.npy"));
  }
  auto kjt = KeyedJaggedTensor::FromLengths(std::move(keys), std::move(values), std::move(lengths),
                                            std::move(weights), std::move(strides));
  if (!kjt.ok()) return kjt.status().WithContext(dir.string());
  return kjt;
}

Status WriteKjtDir(const fs::path& dir, const KeyedJaggedTensor& kjt) {
  SR_RETURN_IF_ERROR(MakeDir(dir));
  SR_RETURN_IF_ERROR(WriteKeysFile(dir / "keys.txt", kjt.keys()));
  SR_RETURN_IF_ERROR(WriteNpy(dir / "lengths.npy", Tensor::FromVector(kjt.lengths())));
  SR_RETURN_IF_ERROR(WriteNpy(dir / "values.npy", Tensor::FromVector(kjt.values().ToVector())));
  if (kjt.weights()) SR_RETURN_IF_ERROR(WriteNpy(dir / "weights.npy", Tensor::FromVector(kjt.weights()->ToVector())));
  if (kjt.variable_stride_per_key()) {
    SR_RETURN_IF_ERROR(WriteNpy(dir / "stride_per_key.npy", Tensor::FromVector(kjt.stride_per_key())));
  }
  return Status::Ok();
}

Status WriteKeyedTensorDir(const fs::path& dir, const KeyedTensor& kt) {
  SR_RETURN_IF_ERROR(MakeDir(dir));
  SR_RETURN_IF_ERROR(WriteNpy(dir / "values.npy", kt.values()));
  SR_RETURN_IF_ERROR(WriteKeysFile(dir / "keys.txt", kt.keys()));
  return WriteNpy(dir / "offset_per_key.npy", Tensor::FromVector(kt.offset_per_key()));
}

Status WriteJaggedDir(const fs::path& dir, const JaggedTensor& jt) {
  SR_RETURN_IF_ERROR(MakeDir(dir));
  SR_RETURN_IF_ERROR(WriteNpy(dir / "values.npy", jt.values));
  return WriteNpy(dir / "lengths.npy", Tensor::FromVector(jt.lengths));
}

}  // namespace shardrec
