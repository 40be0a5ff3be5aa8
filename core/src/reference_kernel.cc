// The scalar reference kernel (reference_kernel.h). Every loop is the
// formula written out; double accumulation; no attempt at speed.
#include "shardrec/core/reference_kernel.h"

#include <bit>
#include <cmath>
#include <limits>
#include <map>

#include "shardrec/sdk/init.hpp"

namespace shardrec::reference {
namespace {

bool IsFloat16(DLDataType t) { return t.code == kDLFloat && t.bits == 16 && t.lanes == 1; }
bool IsBFloat16(DLDataType t) { return t.code == kDLBfloat && t.bits == 16 && t.lanes == 1; }

// Rounds |x| to a binary format with `mantissa_bits` fraction bits, minimum
// normal exponent `min_exp` and largest finite value `max_finite`, by
// scaling to an integer number of quanta and rounding with nearbyint (the
// default rounding mode is to nearest, ties to even).
float RoundBinary(float x, int mantissa_bits, int min_exp, double max_finite) {
  if (!std::isfinite(x) || x == 0.0f) return x;
  const double a = std::fabs(static_cast<double>(x));
  int e = 0;
  (void)std::frexp(a, &e);  // a = m * 2^e, m in [0.5, 1): leading bit is 2^(e-1)
  const int exponent = std::max(e - 1, min_exp);
  const double quantum = std::ldexp(1.0, exponent - mantissa_bits);
  double r = std::nearbyint(a / quantum) * quantum;
  if (r > max_finite) r = std::numeric_limits<double>::infinity();
  return static_cast<float>(std::copysign(r, static_cast<double>(x)));
}

}  // namespace

float RoundToDType(float v, DLDataType t) {
  if (IsFloat16(t)) return RoundBinary(v, 10, -14, 65504.0);
  if (IsBFloat16(t)) return RoundBinary(v, 7, -126, std::ldexp(255.0 / 128.0, 127));
  return v;
}

uint16_t EncodeHalf(float v, DLDataType t) {
  const float r = RoundToDType(v, t);
  if (IsBFloat16(t)) {
    if (std::isnan(r)) return 0x7FC0;
    return static_cast<uint16_t>(std::bit_cast<uint32_t>(r) >> 16);  // low half is zero
  }
  const uint16_t sign = std::signbit(r) ? 0x8000 : 0;
  if (std::isnan(r)) return 0x7E00;
  const double a = std::fabs(static_cast<double>(r));
  if (std::isinf(r)) return sign | 0x7C00;
  if (a < std::ldexp(1.0, -14)) {  // subnormal: a = m * 2^-24
    return sign | static_cast<uint16_t>(a / std::ldexp(1.0, -24));
  }
  int e = 0;
  (void)std::frexp(a, &e);
  const int exponent = e - 1;
  const double mantissa = (a / std::ldexp(1.0, exponent) - 1.0) * 1024.0;
  return sign | static_cast<uint16_t>((exponent + 15) << 10) | static_cast<uint16_t>(mantissa);
}

float DecodeHalf(uint16_t bits, DLDataType t) {
  if (IsBFloat16(t)) return std::bit_cast<float>(static_cast<uint32_t>(bits) << 16);
  const double sign = (bits & 0x8000) ? -1.0 : 1.0;
  const int exponent = (bits >> 10) & 0x1F;
  const int mantissa = bits & 0x3FF;
  if (exponent == 0) return static_cast<float>(sign * std::ldexp(mantissa, -24));
  if (exponent == 31) {
    return mantissa == 0 ? static_cast<float>(sign * std::numeric_limits<double>::infinity())
                         : std::numeric_limits<float>::quiet_NaN();
  }
  return static_cast<float>(sign * std::ldexp(1.0 + mantissa / 1024.0, exponent - 15));
}

RefOptimizer DefaultOptimizer(int32_t optimizer) {
  RefOptimizer o;
  o.optimizer = optimizer;
  if (optimizer == SR_OPTIMIZER_ADAGRAD) o.eps = 1e-10;
  if (optimizer == SR_OPTIMIZER_ROWWISE_ADAGRAD || optimizer == SR_OPTIMIZER_ADAM) o.eps = 1e-8;
  return o;
}

RefTable InitialTable(const sr_kernel_table& desc, const RefOptimizer& opt) {
  RefTable t;
  t.num_rows = desc.num_rows;
  t.dim = desc.dim;
  t.dtype = desc.weight_dtype;
  t.state_dim = StateDim(opt.optimizer, desc.dim);
  t.weights.resize(static_cast<size_t>(t.num_rows * t.dim));
  for (int64_t r = 0; r < t.num_rows; ++r) {
    for (int64_t c = 0; c < t.dim; ++c) {
      t.W(r, c) = RoundToDType(sdk::InitialWeight(desc.init_seed, desc.global_row_offset + r,
                                                  desc.global_col_offset + c, desc.init_min,
                                                  desc.init_max),
                               t.dtype);
    }
  }
  const bool adagrad =
      opt.optimizer == SR_OPTIMIZER_ADAGRAD || opt.optimizer == SR_OPTIMIZER_ROWWISE_ADAGRAD;
  t.state.assign(static_cast<size_t>(t.num_rows * t.state_dim),
                 adagrad ? static_cast<float>(opt.initial_accumulator_value) : 0.0f);
  return t;
}

void RefLookup::AddFeature(int32_t table, int32_t pooling, const std::vector<int64_t>& lengths,
                           const std::vector<int64_t>& ids, int64_t out_row, int64_t out_col,
                           const std::vector<float>& weights) {
  feature_table.push_back(table);
  feature_pooling.push_back(pooling);
  feature_output_row.push_back(out_row);
  feature_output_col.push_back(out_col);
  feature_bag_offsets.push_back(feature_bag_offsets.back() + static_cast<int64_t>(lengths.size()));
  for (int64_t len : lengths) offsets.push_back(offsets.back() + len);
  // Weights are all-or-nothing per call: features without them get 1.
  if (!weights.empty() && per_sample_weights.size() < indices.size()) {
    per_sample_weights.resize(indices.size(), 1.0f);
  }
  indices.insert(indices.end(), ids.begin(), ids.end());
  if (!weights.empty()) {
    per_sample_weights.insert(per_sample_weights.end(), weights.begin(), weights.end());
  } else if (!per_sample_weights.empty()) {
    per_sample_weights.resize(indices.size(), 1.0f);
  }
}

void Forward(const std::vector<RefTable>& tables, const RefLookup& l, std::vector<float>& out,
             int64_t cols) {
  for (size_t f = 0; f < l.num_features(); ++f) {
    const RefTable& t = tables[static_cast<size_t>(l.feature_table[f])];
    const int32_t pooling = l.feature_pooling[f];
    const int64_t first_bag = l.feature_bag_offsets[f];
    const int64_t first_id = l.offsets[static_cast<size_t>(first_bag)];
    for (int64_t b = first_bag; b < l.feature_bag_offsets[f + 1]; ++b) {
      const int64_t begin = l.offsets[static_cast<size_t>(b)];
      const int64_t end = l.offsets[static_cast<size_t>(b + 1)];
      if (pooling == SR_POOLING_NONE) {
        for (int64_t i = begin; i < end; ++i) {
          const int64_t id = l.indices[static_cast<size_t>(i)];
          const bool valid = id >= 0 && id < t.num_rows;
          const int64_t row = l.feature_output_row[f] + (i - first_id);
          for (int64_t c = 0; c < t.dim; ++c) {
            out[static_cast<size_t>(row * cols + l.feature_output_col[f] + c)] =
                valid ? t.W(id, c) : 0.0f;
          }
        }
        continue;
      }
      const int64_t row = l.feature_output_row[f] + (b - first_bag);
      for (int64_t c = 0; c < t.dim; ++c) {
        double acc = 0;
        for (int64_t i = begin; i < end; ++i) {
          const int64_t id = l.indices[static_cast<size_t>(i)];
          if (id < 0 || id >= t.num_rows) continue;
          const double w =
              l.per_sample_weights.empty() ? 1.0 : l.per_sample_weights[static_cast<size_t>(i)];
          acc += w * t.W(id, c);
        }
        if (pooling == SR_POOLING_MEAN)
          acc /= static_cast<double>(std::max<int64_t>(end - begin, 1));
        out[static_cast<size_t>(row * cols + l.feature_output_col[f] + c)] =
            static_cast<float>(acc);
      }
    }
  }
}

void Backward(std::vector<RefTable>& tables, const RefLookup& l, const std::vector<float>& grad,
              int64_t cols, const RefOptimizer& opt, int64_t iteration) {
  // Per table, row -> summed gradient (ordered map: deterministic).
  std::vector<std::map<int64_t, std::vector<double>>> grads(tables.size());
  for (size_t f = 0; f < l.num_features(); ++f) {
    const size_t ti = static_cast<size_t>(l.feature_table[f]);
    const RefTable& t = tables[ti];
    const int32_t pooling = l.feature_pooling[f];
    const int64_t first_bag = l.feature_bag_offsets[f];
    const int64_t first_id = l.offsets[static_cast<size_t>(first_bag)];
    for (int64_t b = first_bag; b < l.feature_bag_offsets[f + 1]; ++b) {
      const int64_t begin = l.offsets[static_cast<size_t>(b)];
      const int64_t end = l.offsets[static_cast<size_t>(b + 1)];
      for (int64_t i = begin; i < end; ++i) {
        const int64_t id = l.indices[static_cast<size_t>(i)];
        if (id < 0 || id >= t.num_rows) continue;
        int64_t row;
        double coef;
        if (pooling == SR_POOLING_NONE) {
          row = l.feature_output_row[f] + (i - first_id);
          coef = 1.0;
        } else {
          row = l.feature_output_row[f] + (b - first_bag);
          coef = l.per_sample_weights.empty() ? 1.0 : l.per_sample_weights[static_cast<size_t>(i)];
          if (pooling == SR_POOLING_MEAN)
            coef /= static_cast<double>(std::max<int64_t>(end - begin, 1));
        }
        std::vector<double>& g = grads[ti][id];
        g.resize(static_cast<size_t>(t.dim), 0.0);
        for (int64_t c = 0; c < t.dim; ++c) {
          g[static_cast<size_t>(c)] +=
              coef * grad[static_cast<size_t>(row * cols + l.feature_output_col[f] + c)];
        }
      }
    }
  }
  const double lr = opt.learning_rate;
  const double eps = opt.eps;
  const double wd = opt.weight_decay;
  for (size_t ti = 0; ti < tables.size(); ++ti) {
    RefTable& t = tables[ti];
    for (const auto& [r, g] : grads[ti]) {
      std::vector<double> gp(static_cast<size_t>(t.dim));
      for (int64_t c = 0; c < t.dim; ++c)
        gp[static_cast<size_t>(c)] = g[static_cast<size_t>(c)] + wd * t.W(r, c);
      std::vector<double> w(static_cast<size_t>(t.dim));
      for (int64_t c = 0; c < t.dim; ++c) w[static_cast<size_t>(c)] = t.W(r, c);
      switch (opt.optimizer) {
        case SR_OPTIMIZER_SGD:
          for (int64_t c = 0; c < t.dim; ++c)
            w[static_cast<size_t>(c)] -= lr * gp[static_cast<size_t>(c)];
          break;
        case SR_OPTIMIZER_ADAGRAD:
          for (int64_t c = 0; c < t.dim; ++c) {
            const double s = t.S(r, c) + gp[static_cast<size_t>(c)] * gp[static_cast<size_t>(c)];
            t.S(r, c) = static_cast<float>(s);
            w[static_cast<size_t>(c)] -= lr * gp[static_cast<size_t>(c)] / (std::sqrt(s) + eps);
          }
          break;
        case SR_OPTIMIZER_ROWWISE_ADAGRAD: {
          double mean = 0;
          for (double x : gp) mean += x * x;
          mean /= static_cast<double>(t.dim);
          const double s = t.S(r, 0) + mean;
          t.S(r, 0) = static_cast<float>(s);
          for (int64_t c = 0; c < t.dim; ++c) {
            w[static_cast<size_t>(c)] -= lr * gp[static_cast<size_t>(c)] / (std::sqrt(s) + eps);
          }
          break;
        }
        case SR_OPTIMIZER_ADAM: {
          const double t1 = 1.0 - std::pow(opt.beta1, static_cast<double>(iteration));
          const double t2 = 1.0 - std::pow(opt.beta2, static_cast<double>(iteration));
          for (int64_t c = 0; c < t.dim; ++c) {
            const double x = gp[static_cast<size_t>(c)];
            const double m = opt.beta1 * t.S(r, c) + (1 - opt.beta1) * x;
            const double v = opt.beta2 * t.S(r, t.dim + c) + (1 - opt.beta2) * x * x;
            t.S(r, c) = static_cast<float>(m);
            t.S(r, t.dim + c) = static_cast<float>(v);
            w[static_cast<size_t>(c)] -= lr * (m / t1) / (std::sqrt(v / t2) + eps);
          }
          break;
        }
        default: break;
      }
      for (int64_t c = 0; c < t.dim; ++c) {
        t.W(r, c) = RoundToDType(static_cast<float>(w[static_cast<size_t>(c)]), t.dtype);
      }
    }
  }
}

}  // namespace shardrec::reference
