// CudaKernel: creation (validation, allocation, initialisation on the GPU),
// table info, and the forward and backward entries with their argument
// checks. Row I/O is in rows.cc; the device passes are in the .cu files.
#include "cuda_kernel.h"

#include <algorithm>
#include <climits>
#include <cstring>
#include <string>

#include "cuda_check.h"
#include "device_probe.h"
#include "shardrec/sdk/plugin.hpp"

namespace shardrec::kernel_cuda {
namespace {

using sdk::InvalidArgument;

int g_devices = 0;
std::string g_no_device_reason = "no NVIDIA GPU found";

// Smallest b >= 1 with 2^b >= n.
int BitsFor(uint64_t n) {
  int b = 1;
  while (b < 64 && (uint64_t{1} << b) < n) ++b;
  return b;
}

size_t RoundUp(size_t n, size_t to) { return (n + to - 1) / to * to; }

// Layout of the per-call metadata, identical on host and device:
//   [CheckResult][feature ids: F+1 int64][features: F][bag starts: F+1 int64]
struct MetaLayout {
  explicit MetaLayout(size_t f)
      : ids(RoundUp(sizeof(CheckResult), 64)),
        features(RoundUp(ids + (f + 1) * sizeof(int64_t), 64)),
        starts(RoundUp(features + f * sizeof(DeviceFeature), 64)),
        download(features),
        total(starts + (f + 1) * sizeof(int64_t)) {}
  size_t ids, features, starts, download, total;
};

// A 1-D tensor on the kernel's device that the kernels read with stride 1.
template <class T>
const T* Contiguous1D(const sdk::TensorView<const T, 1>& v, const char* what) {
  if (v.size(0) > 1 && v.stride(0) != 1) {
    throw InvalidArgument(std::string(what) + ": the cuda kernel needs a contiguous tensor (stride " +
                          std::to_string(v.stride(0)) + ")");
  }
  return v.data();
}

template <class T>
void CopyToHost(T* dst, const T* src, size_t count, cudaStream_t stream) {
  CudaCheck(cudaMemcpyAsync(dst, src, count * sizeof(T), cudaMemcpyDeviceToHost, stream),
            "cudaMemcpyAsync (device to host)");
  CudaCheck(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
}

}  // namespace

void SetDeviceCount(int devices, std::string why) {
  g_devices = devices;
  g_no_device_reason = std::move(why);
}

CudaKernel::CudaKernel(const sr_kernel_create_args& a) {
  if (a.struct_size < SR_STRUCT_SIZE(sr_kernel_create_args, options)) {
    throw InvalidArgument("create args: struct_size " + std::to_string(a.struct_size) +
                          " is smaller than sr_kernel_create_args v1.0");
  }
  if (a.device.device_type != kDLCUDA) {
    throw InvalidArgument("device: the cuda kernel runs on kDLCUDA (device type 2), got " +
                          sdk::DeviceName(a.device));
  }
  if (g_devices == 0) throw sdk::Error(SR_UNAVAILABLE, g_no_device_reason);
  if (a.device.device_id < 0 || a.device.device_id >= g_devices) {
    throw InvalidArgument("device: cuda:" + std::to_string(a.device.device_id) +
                          " does not exist (" + std::to_string(g_devices) + " device(s) visible)");
  }
  device_ = a.device.device_id;
  sdk::Options(a.options, "kernel cuda").Finish();  // no options yet: refuse typos
  optimizer_ = sdk::ParseOptimizerConfig(a.optimizer, a.optimizer_params, "kernel cuda");
  if (a.num_tables > 0 && a.tables == nullptr) {
    throw InvalidArgument("create args: " + std::to_string(a.num_tables) +
                          " tables but tables is NULL");
  }
  if (a.num_tables > static_cast<size_t>(INT32_MAX / 2)) {
    throw InvalidArgument("create args: too many tables");
  }
  int64_t max_rows = 1;
  for (size_t i = 0; i < a.num_tables; ++i) {
    specs_.push_back(sdk::CheckKernelTable(a.tables[i], i, a.optimizer, /*quantized_rows=*/true));
    max_rows = std::max(max_rows, specs_.back().num_rows);
  }
  row_bits_ = BitsFor(static_cast<uint64_t>(max_rows));
  key_bits_ = row_bits_ + BitsFor(specs_.size() + 1);
  if (key_bits_ > 64) {
    throw InvalidArgument("create args: " + std::to_string(specs_.size()) + " tables of up to " +
                          std::to_string(max_rows) + " rows do not fit a 64-bit sort key");
  }

  // Proves the fatbin in this library has code for this GPU before any
  // table is allocated: a clear error instead of "invalid device function".
  const std::string smoke = shardrec::cuda::SmokeTest(device_);
  if (!smoke.empty()) throw sdk::Error(SR_UNAVAILABLE, "smoke test: " + smoke);

  DeviceGuard guard(device_);
  const float state_init = sdk::InitialStateValue(optimizer_);
  for (const sdk::KernelTableSpec& s : specs_) {
    const std::string who = "table '" + s.name + "'";
    DeviceTable t;
    t.num_rows = s.num_rows;
    t.dim = s.dim;
    t.state_dim = s.state_dim;
    t.type = s.type == sdk::WeightDType::kRowQuantized ? kQuantized : static_cast<int32_t>(s.type);
    t.row_bytes = s.bytes_per_row;
    t.quant_bits = sdk::QuantBits(s.quantization);
    t.state_init = state_init;
    t.init_min = s.init_min;
    t.init_max = s.init_max;
    t.init_seed = s.init_seed;
    t.global_row_offset = s.global_row_offset;
    t.global_col_offset = s.global_col_offset;
    weights_.emplace_back(device_);
    state_.emplace_back(device_);
    const size_t weight_bytes = static_cast<size_t>(s.num_rows * s.bytes_per_row);
    const size_t state_bytes = static_cast<size_t>(s.num_rows * s.state_dim) * sizeof(float);
    if (weight_bytes > 0) weights_.back().ReserveExact(weight_bytes, nullptr, (who + " weights").c_str());
    if (state_bytes > 0) state_.back().ReserveExact(state_bytes, nullptr, (who + " optimizer state").c_str());
    t.weights = weights_.back().data();
    t.state = state_.back().as<float>();
    LaunchInitRows(t, nullptr, t.num_rows, nullptr);
    CudaCheck(cudaGetLastError(), "initialisation kernel launch");
    tables_.push_back(t);
  }
  if (!tables_.empty()) {
    tables_device_ = DeviceBuffer(device_);
    tables_device_.ReserveExact(tables_.size() * sizeof(DeviceTable), nullptr, "table descriptors");
    CudaCheck(cudaMemcpy(tables_device_.data(), tables_.data(), tables_.size() * sizeof(DeviceTable),
                         cudaMemcpyHostToDevice),
              "cudaMemcpy (table descriptors)");
  }
  meta_ = DeviceBuffer(device_);
  sort_ = DeviceBuffer(device_);
  CudaCheck(cudaStreamSynchronize(nullptr), "table initialisation");
}

CudaKernel::~CudaKernel() {
  // Memory goes back to the host when the members go, on the default
  // stream: nothing queued may still use it.
  int previous = -1;
  if (cudaGetDevice(&previous) != cudaSuccess) previous = -1;
  if (cudaSetDevice(device_) == cudaSuccess) cudaDeviceSynchronize();
  if (previous >= 0 && previous != device_) cudaSetDevice(previous);
  cudaGetLastError();
}

const sdk::KernelTableSpec& CudaKernel::TableAt(int32_t table, const char* call) const {
  if (table < 0 || static_cast<size_t>(table) >= specs_.size()) {
    throw InvalidArgument(std::string(call) + ": table " + std::to_string(table) +
                          " is out of range (the kernel holds " + std::to_string(specs_.size()) +
                          " tables)");
  }
  return specs_[static_cast<size_t>(table)];
}

void CudaKernel::TableInfo(int32_t table, sr_kernel_table_info* out) {
  const sdk::KernelTableSpec& t = TableAt(table, "get_table_info");
  if (out->struct_size < SR_STRUCT_SIZE(sr_kernel_table_info, bytes)) {
    throw InvalidArgument("get_table_info: struct_size " + std::to_string(out->struct_size) +
                          " is smaller than sr_kernel_table_info v1.0");
  }
  const size_t i = static_cast<size_t>(table);
  out->num_rows = t.num_rows;
  out->dim = t.dim;
  out->weight_dtype = t.dtype;
  out->state_dim = t.state_dim;
  out->state_dtype = DLDataType{kDLFloat, 32, 1};
  out->bytes = static_cast<int64_t>(weights_[i].bytes() + state_[i].bytes());
  if (SR_HAS_FIELD(out, sr_kernel_table_info, row_quantization)) {
    out->row_bytes = t.bytes_per_row;
    out->row_quantization = static_cast<int32_t>(t.quantization);
  }
}

cudaStream_t CudaKernel::Enter(void* stream) {
  const auto s = static_cast<cudaStream_t>(stream);
  if (any_call_ && s != last_stream_) {
    CudaCheck(cudaStreamSynchronize(last_stream_), "cudaStreamSynchronize (previous call's stream)");
  }
  any_call_ = true;
  last_stream_ = s;
  return s;
}

void CudaKernel::SyncOrThrow(cudaStream_t stream, const char* what) {
  CudaCheck(cudaStreamSynchronize(stream), what);
}

CudaKernel::PreparedLookup CudaKernel::Prepare(const sr_kernel_lookup_args* a,
                                               const DLTensor* matrix, const char* matrix_name,
                                               bool disjoint, const char* call,
                                               DeviceMatrix* out_matrix) {
  const auto name = [&](int32_t t) -> const std::string& { return specs_[static_cast<size_t>(t)].name; };
  const auto dim = [&](int32_t t) { return specs_[static_cast<size_t>(t)].dim; };
  const int64_t num_bags = sdk::CheckLookupFeatures(a, specs_.size(), name);
  const DLDevice dev{kDLCUDA, device_};
  const sdk::TensorView<const int64_t, 1> offsets(a->offsets, "offsets", dev, {num_bags + 1});
  const sdk::TensorView<const int64_t, 1> indices(a->indices, "indices", dev);
  const int64_t nnz = indices.size(0);
  if (nnz >= (int64_t{1} << 31)) {
    throw InvalidArgument("indices: " + std::to_string(nnz) +
                          " ids in one call; the cuda kernel takes fewer than 2^31");
  }
  PreparedLookup p;
  DeviceLookup& d = p.device;
  d.offsets = Contiguous1D(offsets, "offsets");
  d.indices = Contiguous1D(indices, "indices");
  if (a->per_sample_weights != nullptr) {
    const sdk::TensorView<const float, 1> w(a->per_sample_weights, "per_sample_weights", dev);
    if (w.size(0) != nnz) {
      throw InvalidArgument("per_sample_weights has " + std::to_string(w.size(0)) +
                            " entries, expected one per index (nnz = " + std::to_string(nnz) + ")");
    }
    d.weights = Contiguous1D(w, "per_sample_weights");
  }
  d.num_bags = num_bags;
  d.nnz = nnz;
  d.num_features = static_cast<int32_t>(a->num_features);
  d.tables = tables_device_.as<DeviceTable>();

  const sdk::TensorView<const float, 2> m(matrix, matrix_name, dev);
  if (disjoint) sdk::CheckWritableLayout(matrix_name, m.size(0), m.size(1), m.stride(0), m.stride(1));
  *out_matrix = DeviceMatrix{const_cast<float*>(m.data()), m.stride(0), m.stride(1)};

  // Upload the features, run the device check, bring its verdict back.
  // With bounds_check NONE and only pooled features the caller vouches for
  // offsets and ids alike and no feature needs its id range, so the call
  // skips the check pass and its stream synchronisation (FBGEMM's NONE).
  const size_t nf = a->num_features;
  const MetaLayout layout(nf);
  const auto stream = static_cast<cudaStream_t>(a->stream);
  bool device_check = a->bounds_check != SR_BOUNDS_CHECK_NONE;
  for (size_t f = 0; f < nf; ++f) device_check |= a->feature_pooling[f] == SR_POOLING_NONE;
  meta_.Reserve(layout.total, stream, "per-call metadata");
  // Without a synchronisation below, the next call may overwrite the host
  // buffer before this copy ran: pageable memory is copied out by the
  // driver before cudaMemcpyAsync returns, pinned memory is not.
  if (device_check) {
    staging_.Reserve(layout.total);
  } else {
    pageable_.resize(layout.total);
  }
  char* host = device_check ? staging_.data() : pageable_.data();
  CheckResult init;
  init.first_negative_bag = INT64_MAX;
  init.first_invalid_bag = INT64_MAX;
  std::memcpy(host, &init, sizeof(init));
  auto* features = reinterpret_cast<DeviceFeature*>(host + layout.features);
  auto* starts = reinterpret_cast<int64_t*>(host + layout.starts);
  const bool out_aligned = m.stride(1) == 1 && m.stride(0) % 4 == 0 &&
                           reinterpret_cast<uintptr_t>(m.data()) % 16 == 0;
  p.features.resize(nf);  // id ranges come from the device check, when it runs
  for (size_t f = 0; f < nf; ++f) {
    sdk::LookupFeature& w = p.features[f];
    w.table = a->feature_table[f];
    w.pooling = a->feature_pooling[f];
    w.bag_begin = a->feature_bag_offsets[f];
    w.bag_end = a->feature_bag_offsets[f + 1];
    w.out_row = a->feature_output_row[f];
    w.out_col = a->feature_output_col[f];
    DeviceFeature& x = features[f];
    x = DeviceFeature{};
    x.bag_begin = w.bag_begin;
    x.bag_end = w.bag_end;
    x.out_row = w.out_row;
    x.out_col = w.out_col;
    x.table = w.table;
    x.pooling = w.pooling;
    x.vector_out = out_aligned && x.out_col % 4 == 0 && dim(x.table) % 4 == 0;
    starts[f] = x.bag_begin;
    p.max_dim = std::max(p.max_dim, dim(x.table));
  }
  starts[nf] = num_bags;
  char* dev_meta = meta_.as<char>();
  CudaCheck(cudaMemcpyAsync(dev_meta, host, layout.total, cudaMemcpyHostToDevice, stream),
            "cudaMemcpyAsync (lookup metadata)");
  d.features = reinterpret_cast<const DeviceFeature*>(dev_meta + layout.features);
  d.bag_starts = reinterpret_cast<const int64_t*>(dev_meta + layout.starts);
  if (!device_check) {
    sdk::CheckPlacement(p.features, dim, name, m.size(0), m.size(1), matrix_name, disjoint, order_);
    if (a->num_invalid_ids != nullptr) *a->num_invalid_ids = 0;
    return p;
  }
  const bool check_bounds = a->bounds_check != SR_BOUNDS_CHECK_NONE;
  if (check_bounds) sdk::CheckBoundsMode(a->bounds_check);
  LaunchLookupCheck(d, check_bounds, reinterpret_cast<CheckResult*>(dev_meta),
                    reinterpret_cast<int64_t*>(dev_meta + layout.ids), stream);
  CudaCheck(cudaGetLastError(), "check kernel launch");
  CudaCheck(cudaMemcpyAsync(host, dev_meta, layout.download, cudaMemcpyDeviceToHost, stream),
            "cudaMemcpyAsync (check result)");
  SyncOrThrow(stream, "argument check on the device");
  CheckResult r;
  std::memcpy(&r, host, sizeof(r));
  const auto* ids = reinterpret_cast<const int64_t*>(host + layout.ids);

  // The same errors, in the same order, as the CPU kernel.
  if (r.first_offset != 0) {
    throw InvalidArgument("offsets[0] must be 0, got " + std::to_string(r.first_offset));
  }
  if (r.first_negative_bag != INT64_MAX) {
    const int64_t b = r.first_negative_bag;
    int64_t pair[2];
    CopyToHost(pair, d.offsets + b, 2, stream);
    size_t f = 0;
    while (f + 1 < nf && a->feature_bag_offsets[f + 1] <= b) ++f;
    throw InvalidArgument(sdk::FeatureName(f, a->feature_table[f], name) + ", bag " +
                          std::to_string(b - a->feature_bag_offsets[f]) +
                          ": negative length (offsets[" + std::to_string(b) + "] = " +
                          std::to_string(pair[0]) + " > offsets[" + std::to_string(b + 1) +
                          "] = " + std::to_string(pair[1]) + ")");
  }
  if (r.last_offset != nnz) {
    throw InvalidArgument("bag lengths sum to " + std::to_string(r.last_offset) +
                          " but indices has " + std::to_string(nnz) + " values");
  }
  for (size_t f = 0; f < nf; ++f) {
    p.features[f].id_begin = ids[f];
    p.features[f].id_end = ids[f + 1];
  }
  sdk::CheckPlacement(p.features, dim, name, m.size(0), m.size(1), matrix_name, disjoint, order_);

  if (a->num_invalid_ids != nullptr) *a->num_invalid_ids = check_bounds ? r.invalid_ids : 0;
  if (check_bounds && r.invalid_ids > 0) {
    if (a->bounds_check == SR_BOUNDS_CHECK_FATAL) {
      ThrowOutOfRange(p, r.first_invalid_bag, r.invalid_ids, stream);
    }
    if (a->bounds_check == SR_BOUNDS_CHECK_WARNING) {
      try {
        ThrowOutOfRange(p, r.first_invalid_bag, r.invalid_ids, stream);
      } catch (const sdk::Error& e) {
        sdk::Log(SR_LOG_WARN, "kernel cuda",
                 std::string(call) + ": " + std::to_string(r.invalid_ids) +
                     " ids out of range, treated as absent; the first: " + e.what());
      }
    }
    d.skip_invalid = 1;
  }
  return p;
}

void CudaKernel::ThrowOutOfRange(const PreparedLookup& p, int64_t bag, int64_t count,
                                 cudaStream_t stream) {
  const auto name = [&](int32_t t) -> const std::string& { return specs_[static_cast<size_t>(t)].name; };
  size_t f = 0;
  while (f + 1 < p.features.size() && p.features[f + 1].bag_begin <= bag) ++f;
  const sdk::LookupFeature& w = p.features[f];
  const int64_t rows = specs_[static_cast<size_t>(w.table)].num_rows;
  int64_t range[2];
  CopyToHost(range, p.device.offsets + bag, 2, stream);
  std::vector<int64_t> ids(static_cast<size_t>(range[1] - range[0]));
  CopyToHost(ids.data(), p.device.indices + range[0], ids.size(), stream);
  size_t k = 0;
  while (k < ids.size() && static_cast<uint64_t>(ids[k]) < static_cast<uint64_t>(rows)) ++k;
  if (k == ids.size()) k = 0;  // cannot happen: the device saw one here
  const std::string where = sdk::OutOfRangeMessage(
      f, w.table, name, bag - w.bag_begin, static_cast<int64_t>(k), range[0] + static_cast<int64_t>(k),
      ids.empty() ? 0 : ids[k], rows);
  throw sdk::Error(SR_OUT_OF_RANGE, where + " (" + std::to_string(count) +
                                        " ids out of range in this call; nothing was written)");
}

void CudaKernel::Forward(const sr_kernel_forward_args& a) {
  if (a.struct_size < SR_STRUCT_SIZE(sr_kernel_forward_args, output)) {
    throw InvalidArgument("forward args: struct_size " + std::to_string(a.struct_size) +
                          " is smaller than sr_kernel_forward_args v1.0");
  }
  sdk::ClearInvalidCount(a.lookup);
  std::lock_guard<std::mutex> lock(mutex_);
  DeviceGuard guard(device_);
  if (a.lookup == nullptr) throw InvalidArgument("lookup args are NULL");
  const cudaStream_t stream = Enter(a.lookup->stream);
  DeviceMatrix out;
  const PreparedLookup p = Prepare(a.lookup, a.output, "output", /*disjoint=*/true, "forward", &out);
  // A group of lanes per bag, 4 columns per lane: 32 lanes for dim >= 128.
  int lanes = 1;
  while (lanes < 32 && lanes * kColumnsPerLane < p.max_dim) lanes *= 2;
  const bool quantized = std::any_of(specs_.begin(), specs_.end(), [](const sdk::KernelTableSpec& s) {
    return s.type == sdk::WeightDType::kRowQuantized;
  });
  LaunchForward(p.device, out, lanes, quantized, stream);
  CudaCheck(cudaGetLastError(), "forward kernel launch");
}

void CudaKernel::Backward(const sr_kernel_backward_args& a) {
  if (a.struct_size < SR_STRUCT_SIZE(sr_kernel_backward_args, learning_rate)) {
    throw InvalidArgument("backward args: struct_size " + std::to_string(a.struct_size) +
                          " is smaller than sr_kernel_backward_args v1.0");
  }
  sdk::ClearInvalidCount(a.lookup);
  const sdk::OptimizerStep step = sdk::MakeOptimizerStep(optimizer_, a.learning_rate, a.iteration);
  std::lock_guard<std::mutex> lock(mutex_);
  DeviceGuard guard(device_);
  if (a.lookup == nullptr) throw InvalidArgument("lookup args are NULL");
  const cudaStream_t stream = Enter(a.lookup->stream);
  DeviceMatrix grad;
  const PreparedLookup p =
      Prepare(a.lookup, a.grad_output, "grad_output", /*disjoint=*/false, "backward", &grad);
  const int64_t n = p.device.nnz;
  if (n == 0) return;
  const BackwardScratch s = ReserveSortScratch(n, p.max_dim, stream);
  LaunchBackward(p.device, static_cast<int32_t>(specs_.size()), grad, step, row_bits_, key_bits_,
                 s, stream);
  CudaCheck(cudaGetLastError(), "backward kernel launch");
}

BackwardScratch CudaKernel::ReserveSortScratch(int64_t n, int64_t gradient_width,
                                               cudaStream_t stream) {
  const size_t count = static_cast<size_t>(n);
  const bool gradients = gradient_width > 0;
  const size_t keys = RoundUp(count * sizeof(uint64_t), 256);
  const size_t positions = RoundUp(count * sizeof(uint32_t), 256);
  const size_t coef = gradients ? RoundUp(count * sizeof(float), 256) : 0;
  const size_t offsets = gradients ? RoundUp(count * sizeof(int64_t), 256) : 0;
  const size_t partials =
      gradients ? RoundUp(static_cast<size_t>(PartialRows(n) * gradient_width) * sizeof(float), 256) : 0;
  const size_t temp = RoundUp(SortTempBytes(n), 256);
  sort_.Reserve(2 * keys + 2 * positions + coef + offsets + partials + temp, stream,
                gradients ? "backward scratch" : "write_rows scratch");
  char* base = sort_.as<char>();
  BackwardScratch s;
  s.keys = reinterpret_cast<uint64_t*>(base);
  s.sorted_keys = reinterpret_cast<uint64_t*>(base + keys);
  s.positions = reinterpret_cast<uint32_t*>(base + 2 * keys);
  s.sorted_positions = reinterpret_cast<uint32_t*>(base + 2 * keys + positions);
  char* rest = base + 2 * keys + 2 * positions;
  if (gradients) {
    s.coef = reinterpret_cast<float*>(rest);
    s.grad_offset = reinterpret_cast<int64_t*>(rest + coef);
    s.partials = reinterpret_cast<float*>(rest + coef + offsets);
    s.partial_width = gradient_width;
  }
  s.sort_temp = rest + coef + offsets + partials;
  s.sort_temp_bytes = temp;
  return s;
}

}  // namespace shardrec::kernel_cuda
