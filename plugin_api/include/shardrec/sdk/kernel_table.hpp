// shardrec plugin SDK — validation of one sr_kernel_table at create(), the
// same for every kernel: struct size, shape, dtype, init range and offsets.
// A kernel then only decides where the rows live.
#ifndef SHARDREC_SDK_KERNEL_TABLE_HPP_
#define SHARDREC_SDK_KERNEL_TABLE_HPP_

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>

#include "shardrec/abi/kernel.h"
#include "shardrec/sdk/dtype.hpp"
#include "shardrec/sdk/optimizer.hpp"
#include "shardrec/sdk/quantized_rows.hpp"
#include "shardrec/sdk/status.hpp"

namespace shardrec::sdk {

// The weight storage types the built-in kernels support; kRowQuantized is
// uint8 rows of a RowQuantization (quantized_rows.hpp, ABI 1.4).
enum class WeightDType : int32_t { kFloat32 = 0, kFloat16 = 1, kBFloat16 = 2, kRowQuantized = 3 };

// A checked table: the descriptor's values plus its name (or "table N") and
// the optimizer state it needs per row.
struct KernelTableSpec {
  std::string name;
  int64_t num_rows = 0;
  int64_t dim = 0;
  WeightDType type = WeightDType::kFloat32;
  DLDataType dtype{kDLFloat, 32, 1};
  int64_t state_dim = 0;
  double init_min = 0;
  double init_max = 0;
  uint64_t init_seed = 0;
  int64_t global_row_offset = 0;
  int64_t global_col_offset = 0;
  RowQuantization quantization = RowQuantization::kNone;
  // Bytes of one weight row: dim times the element size, or a quantized
  // row's (scale and bias included).
  int64_t bytes_per_row = 0;
};

// Validates table `index` of a create() call for `optimizer`. Throws
// sdk::Error(SR_INVALID_ARGUMENT) naming the table. Quantized rows (ABI 1.4)
// are refused unless the kernel says it holds them: a kernel built on an
// SDK that knows the field must not take such a table by accident.
inline KernelTableSpec CheckKernelTable(const sr_kernel_table& d, size_t index,
                                        int32_t optimizer, bool quantized_rows = false) {
  if (d.struct_size < SR_STRUCT_SIZE(sr_kernel_table, global_col_offset)) {
    throw InvalidArgument("table " + std::to_string(index) + ": struct_size " +
                          std::to_string(d.struct_size) +
                          " is smaller than sr_kernel_table v1.0");
  }
  KernelTableSpec t;
  t.name = d.name != nullptr ? d.name : "table " + std::to_string(index);
  const std::string who = "table '" + t.name + "'";
  if (d.num_rows < 0)
    throw InvalidArgument(who + ": num_rows " + std::to_string(d.num_rows) + " < 0");
  if (d.dim < 1) throw InvalidArgument(who + ": dim " + std::to_string(d.dim) + " < 1");
  const DLDataType w = d.weight_dtype;
  const int32_t quant =
      d.struct_size >= SR_STRUCT_SIZE(sr_kernel_table, row_quantization) ? d.row_quantization : SR_ROW_QUANT_NONE;
  if (quant != SR_ROW_QUANT_NONE) {
    if (quant != SR_ROW_QUANT_INT8 && quant != SR_ROW_QUANT_INT4 && quant != SR_ROW_QUANT_INT2) {
      throw InvalidArgument(who + ": row_quantization " + std::to_string(quant) +
                            " is not one of SR_ROW_QUANT_INT8, _INT4, _INT2");
    }
    t.quantization = static_cast<RowQuantization>(quant);
    if (!quantized_rows) {
      throw InvalidArgument(who + ": this kernel does not hold " + QuantName(t.quantization) + " rows");
    }
    if (!(w.lanes == 1 && w.code == kDLUInt && w.bits == 8)) {
      throw InvalidArgument(who + ": " + QuantName(t.quantization) + " rows need weight dtype uint8, got " +
                            DTypeName(w));
    }
    if (optimizer != SR_OPTIMIZER_NONE) {
      throw InvalidArgument(who + ": " + QuantName(t.quantization) +
                            " rows are for inference: the optimizer must be none");
    }
    t.type = WeightDType::kRowQuantized;
  } else if (w.lanes == 1 && w.code == kDLFloat && w.bits == 32) {
    t.type = WeightDType::kFloat32;
  } else if (w.lanes == 1 && w.code == kDLFloat && w.bits == 16) {
    t.type = WeightDType::kFloat16;
  } else if (w.lanes == 1 && w.code == kDLBfloat && w.bits == 16) {
    t.type = WeightDType::kBFloat16;
  } else {
    throw InvalidArgument(who + ": weight dtype " + DTypeName(w) +
                          " is not supported (float32, float16, bfloat16)");
  }
  t.dtype = w;
  t.num_rows = d.num_rows;
  t.dim = d.dim;
  // Keep every byte count (and element offset) well inside int64: the dim
  // is bounded before anything is multiplied by it.
  if (d.dim > (int64_t{1} << 24) ||
      d.num_rows > (std::numeric_limits<int64_t>::max() / 4) / (d.dim * 4 + StateDim(optimizer, d.dim) * 4)) {
    throw InvalidArgument(who + ": " + std::to_string(d.num_rows) + " x " +
                          std::to_string(d.dim) + " is too large");
  }
  t.state_dim = StateDim(optimizer, d.dim);
  t.bytes_per_row = t.type == WeightDType::kRowQuantized ? QuantRowBytes(t.quantization, d.dim)
                : t.type == WeightDType::kFloat32    ? d.dim * 4
                                                     : d.dim * 2;
  if (!std::isfinite(d.init_min) || !std::isfinite(d.init_max) || d.init_min > d.init_max) {
    throw InvalidArgument(who + ": init range [" + std::to_string(d.init_min) + ", " +
                          std::to_string(d.init_max) + "] is not a finite interval");
  }
  if (d.global_row_offset < 0 || d.global_col_offset < 0) {
    throw InvalidArgument(who + ": negative global_row_offset or global_col_offset");
  }
  // A quantized row keeps its bias and scale in fp16: initial weights
  // beyond its range would quantize to inf and NaN.
  if (t.type == WeightDType::kRowQuantized && (d.init_min < -65504.0 || d.init_max > 65504.0)) {
    throw InvalidArgument(who + ": init range [" + std::to_string(d.init_min) + ", " + std::to_string(d.init_max) +
                          "] is outside fp16's [-65504, 65504], where quantized rows keep their scale and bias");
  }
  t.init_min = d.init_min;
  t.init_max = d.init_max;
  t.init_seed = d.init_seed;
  t.global_row_offset = d.global_row_offset;
  t.global_col_offset = d.global_col_offset;
  return t;
}

}  // namespace shardrec::sdk

#endif  // SHARDREC_SDK_KERNEL_TABLE_HPP_
