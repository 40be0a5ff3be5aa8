// shardrec plugin SDK — DLPack element types by C++ type, comparison and
// names ("float32", "bfloat16"). Free of the SDK's status machinery, so the
// host uses the same helpers as plugins.
#ifndef SHARDREC_SDK_DTYPE_HPP_
#define SHARDREC_SDK_DTYPE_HPP_

#include <cstdint>
#include <string>

#include <dlpack/dlpack.h>

namespace shardrec::sdk {

template <class T>
constexpr DLDataType DTypeOf();
template <> constexpr DLDataType DTypeOf<float>() { return {kDLFloat, 32, 1}; }
template <> constexpr DLDataType DTypeOf<double>() { return {kDLFloat, 64, 1}; }
template <> constexpr DLDataType DTypeOf<int32_t>() { return {kDLInt, 32, 1}; }
template <> constexpr DLDataType DTypeOf<int64_t>() { return {kDLInt, 64, 1}; }
template <> constexpr DLDataType DTypeOf<uint8_t>() { return {kDLUInt, 8, 1}; }

inline bool SameDType(DLDataType a, DLDataType b) {
  return a.code == b.code && a.bits == b.bits && a.lanes == b.lanes;
}

// "float32", "int64", "bfloat16", ...
inline std::string DTypeName(DLDataType t) {
  // Built with append() only: GCC 12 at -O3 reports a false -Wrestrict on
  // operator+(const char*, std::string&&).
  std::string name;
  switch (t.code) {
    case kDLInt: name.append("int"); break;
    case kDLUInt: name.append("uint"); break;
    case kDLFloat: name.append("float"); break;
    case kDLBfloat: name.append("bfloat"); break;
    default: name.append("code").append(std::to_string(t.code)).append("_"); break;
  }
  name.append(std::to_string(t.bits));
  if (t.lanes != 1) name.append("x").append(std::to_string(t.lanes));
  return name;
}

}  // namespace shardrec::sdk

#endif  // SHARDREC_SDK_DTYPE_HPP_
