#include "id_stream.h"

#include "shardrec/core/tensor/npy.h"

namespace shardrec::cli {

namespace {

template <class T>
std::vector<int64_t> Widen(const Tensor& t) {
  const T* p = static_cast<const T*>(t.raw_data());
  std::vector<int64_t> out(static_cast<size_t>(t.numel()));
  for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<int64_t>(p[i]);
  return out;
}

}  // namespace

StatusOr<std::vector<int64_t>> ReadIdStream(const std::filesystem::path& path) {
  SR_ASSIGN_OR_RETURN(Tensor t, ReadNpy(path));
  const std::string name = path.string();
  if (t.ndim() != 1) {
    return InvalidArgumentError(name + ": expected a 1-D array of ids, got shape " + ShapeString(t.shape()) +
                                " (flatten it first: np.save(path, ids.ravel()))");
  }
  const DLDataType d = t.dtype();
  if (d.lanes == 1 && (d.code == kDLInt || d.code == kDLUInt)) {
    const bool s = d.code == kDLInt;
    switch (d.bits) {
      case 8: return s ? Widen<int8_t>(t) : Widen<uint8_t>(t);
      case 16: return s ? Widen<int16_t>(t) : Widen<uint16_t>(t);
      case 32: return s ? Widen<int32_t>(t) : Widen<uint32_t>(t);
      case 64: return s ? Widen<int64_t>(t) : Widen<uint64_t>(t);
      default: break;
    }
  }
  return InvalidArgumentError(name + ": ids must be integers (int64, int32, uint64, ...), not " + DTypeName(d));
}

}  // namespace shardrec::cli
