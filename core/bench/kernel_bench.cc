// Kernel benchmark against the gather probe (see kernel_bench.h).
#include "kernel_bench.h"

#include <algorithm>
#include <chrono>
#include <random>

#include <fmt/format.h>

#include "bench_memory.h"
#include "gather_probe.h"
#include "shardrec/abi/kernel.h"
#include "shardrec/sdk/quantized_rows.hpp"
#include "shardrec/core/device/cuda_runtime.h"
#include "shardrec/core/tensor/tensor.h"

namespace shardrec::bench {

namespace {

using Clock = std::chrono::steady_clock;

// Runs `step(batch)` over the cycled batches until min_time has passed,
// `reps` times; returns lookups/s best and median.
template <class Step>
StatusOr<Rate> Measure(const std::vector<IdBatch>& batches, const KernelBenchConfig& c, Step&& step) {
  std::vector<double> rates;
  size_t next = 0;
  for (int rep = 0; rep < c.reps; ++rep) {
    double busy = 0;
    int64_t lookups = 0;
    while (busy < c.min_time) {
      const IdBatch& b = batches[next++ % batches.size()];
      SR_ASSIGN_OR_RETURN(double seconds, step(b));
      busy += seconds;
      lookups += static_cast<int64_t>(b.ids.size());
    }
    rates.push_back(static_cast<double>(lookups) / busy);
  }
  std::sort(rates.begin(), rates.end());
  return Rate{rates.back(), rates[rates.size() / 2]};
}

double Since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

}  // namespace

StatusOr<KernelBenchResult> RunKernelBench(const ComponentRef& ref, const KernelBenchConfig& c,
                                           const std::function<void(const std::string&)>& progress) {
  auto say = [&](const std::string& s) {
    if (progress) progress(s);
  };
  KernelBenchResult result;
  const int64_t elem = (c.dtype.bits + 7) / 8;
  result.row_bytes = static_cast<double>(c.dim * elem);

  say(fmt::format("generating {} batches of {} bags x {} ids ({})", c.batches, c.batch, c.pooling, c.ids.ToString()));
  const auto batches = MakeIdBatches(c.rows, c.batch, c.pooling, c.ids, 42, c.batches);

  say(fmt::format("creating a {} x {} table on kernel '{}'", c.rows, c.dim, ref.name()));
  sr_kernel_table table{};
  table.struct_size = SR_STRUCT_SIZE(sr_kernel_table, global_col_offset);
  table.name = "bench";
  table.num_rows = c.rows;
  table.dim = c.dim;
  table.weight_dtype = c.dtype;
  table.init_min = -0.01;
  table.init_max = 0.01;
  table.init_seed = 7;

  // A GPU kernel gets its batches, output and gradient in device memory
  // (uploaded once), so the timings are the kernel's and not the staging's.
  const DLDevice device = DeviceFor(ref, 0);
  const bool on_gpu = device.device_type == kDLCUDA;
  const auto t0 = Clock::now();
  SR_ASSIGN_OR_RETURN(Kernel kernel,
                      Kernel::Create(ref, {table}, c.optimizer, c.optimizer_params, c.kernel_options, device));
  result.init_seconds = Since(t0);

  std::vector<float> grad_values(static_cast<size_t>(c.batch * c.dim));
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> g(-1e-3f, 1e-3f);
  for (float& v : grad_values) v = g(rng);
  Tensor out = Tensor::Empty({kDLFloat, 32, 1}, {c.batch, c.dim});
  BenchMemory memory(device);
  SR_RETURN_IF_ERROR(memory.Prepare(batches, grad_values, out));
  if (on_gpu) {
    say("probe: device-to-device copy (cudaMemcpyAsync) of 256 MiB");
    result.probe_name = "probe: device-to-device copy";
    std::vector<double> rates;
    for (int rep = 0; rep < c.reps; ++rep) {
      SR_ASSIGN_OR_RETURN(double bytes_per_s, device::DeviceCopyBandwidth(device.device_id, size_t{256} << 20, 5));
      rates.push_back(bytes_per_s / result.row_bytes);  // as lookups/s of this row size
    }
    std::sort(rates.begin(), rates.end());
    result.probe = Rate{rates.back(), rates[rates.size() / 2]};
  } else {
    say("probe: random-row gather, same shape, ids and threads");
    GatherProbe probe(c.rows, c.dim * elem, c.batch, c.threads);
    for (const auto& b : batches) probe.Run(b);  // fault the pages in
    SR_ASSIGN_OR_RETURN(result.probe, Measure(batches, c, [&](const IdBatch& b) -> StatusOr<double> {
                          return probe.Run(b);
                        }));
  }

  const int32_t zero32 = 0, pooling = 0;
  const int64_t zero64 = 0;
  auto run_on = [&](const Kernel& k, const IdBatch& b, bool backward) -> StatusOr<double> {
    const BenchMemory::Batch& m = memory.batch(b);
    const int64_t bag_offsets[2] = {0, c.batch};
    sr_kernel_lookup_args lookup{};
    lookup.struct_size = SR_STRUCT_SIZE(sr_kernel_lookup_args, stream);
    lookup.num_features = 1;
    lookup.feature_table = &zero32;
    lookup.feature_pooling = &pooling;
    lookup.feature_bag_offsets = bag_offsets;
    lookup.feature_output_row = &zero64;
    lookup.feature_output_col = &zero64;
    lookup.offsets = &m.offsets;
    lookup.indices = &m.indices;
    lookup.per_sample_weights = c.weighted ? &m.weights : nullptr;
    lookup.bounds_check = SR_BOUNDS_CHECK_NONE;  // the caller guarantees ids; measure the lookup
    lookup.stream = memory.stream();
    const auto start = Clock::now();
    if (backward) {
      sr_kernel_backward_args a{};
      a.struct_size = SR_STRUCT_SIZE(sr_kernel_backward_args, learning_rate);
      a.lookup = &lookup;
      a.grad_output = &memory.grad();
      a.iteration = 1;
      a.learning_rate = std::numeric_limits<double>::quiet_NaN();
      SR_RETURN_IF_ERROR(k.Backward(a));
    } else {
      sr_kernel_forward_args a{};
      a.struct_size = SR_STRUCT_SIZE(sr_kernel_forward_args, output);
      a.lookup = &lookup;
      a.output = &memory.output();
      SR_RETURN_IF_ERROR(k.Forward(a));
    }
    SR_RETURN_IF_ERROR(memory.Wait());
    return Since(start);
  };
  auto run = [&](const IdBatch& b, bool backward) { return run_on(kernel, b, backward); };
  say("kernel forward");
  for (const auto& b : batches) SR_RETURN_IF_ERROR(run(b, false).status());  // warm-up
  SR_ASSIGN_OR_RETURN(result.forward, Measure(batches, c, [&](const IdBatch& b) { return run(b, false); }));
  result.has_backward = kernel.HasBackward() && c.optimizer != 0;
  if (result.has_backward) {
    say("kernel backward + optimizer");
    SR_ASSIGN_OR_RETURN(result.backward, Measure(batches, c, [&](const IdBatch& b) { return run(b, true); }));
  }
  for (const int32_t q : c.quantized) {
    const auto rq = static_cast<sdk::RowQuantization>(q);
    KernelBenchResult::Quantized r{sdk::QuantName(rq), {}, static_cast<double>(sdk::QuantRowBytes(rq, c.dim))};
    say(fmt::format("kernel forward, {} rows ({} bytes each)", r.name, sdk::QuantRowBytes(rq, c.dim)));
    sr_kernel_table qt = table;
    qt.struct_size = SR_STRUCT_SIZE(sr_kernel_table, row_quantization);
    qt.weight_dtype = DLDataType{kDLUInt, 8, 1};
    qt.row_quantization = q;
    SR_ASSIGN_OR_RETURN(Kernel quantized, Kernel::Create(ref, {qt}, SR_OPTIMIZER_NONE, {}, c.kernel_options, device));
    for (const auto& b : batches) SR_RETURN_IF_ERROR(run_on(quantized, b, false).status());  // warm-up
    SR_ASSIGN_OR_RETURN(r.forward, Measure(batches, c, [&](const IdBatch& b) { return run_on(quantized, b, false); }));
    result.quantized.push_back(std::move(r));
  }
  return result;
}

}  // namespace shardrec::bench
