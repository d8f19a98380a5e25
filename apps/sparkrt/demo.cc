// `sparkrt demo [--kv bf16|turbo2|turbo3|turbo4]`: one decode step of a
// small synthetic attention layer (demo_layer.h) on the device the
// environment selects, over a bf16 KV cache or a TurboQuant V cache, checked
// and timed.
//
//   cpu      the step runs on the reference kernels; the check is against a
//            float64 computation written from the contracts (sparkrt/verify).
//   a GPU    the same step also runs on a cpu device, and the GPU's caches
//            and output are compared with it within docs/kernels.md's bounds.
//   mock     records instead of computing: the demo says so and shows the
//            launches of the step, checked against what the ops must launch.
//
// A failed check prints "check: FAILED" and makes the command exit 1.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <ostream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "commands.h"
#include "demo_layer.h"
#include "sparkrt/communicator.h"
#include "sparkrt/contract/turbo_kv_cache.h"
#include "sparkrt/device.h"
#include "sparkrt/numeric.h"
#include "sparkrt/verify/float64.h"
#include "sparkrt/status_macros.h"
#include "sparkrt/testing/mock.h"
#include "sparkrt/trace.h"
#include "sparkrt/verify/tolerances.h"

namespace sparkrt::cli {
namespace {

constexpr uint64_t kSeed = 20261130;  // fixed: the demo prints the same inputs every run
constexpr int kTimedIterations = 5;

using numeric::bf16_to_f32;

// Where sequence s's token t lives in the bf16 pools, in elements.
uint64_t row_offset(const LayerInputs& in, uint32_t s, uint32_t t) {
  return slot_of(in, s, t) * in.shape.kv_row();
}

// Accumulates one comparison: how many elements, the largest error, and the
// first element outside its bound.
struct Comparison {
  std::string what;
  std::string bound;
  std::string measure = "max |err|";  // what max_err holds
  uint64_t count = 0;
  uint64_t failures = 0;
  double max_err = 0;
  double worst_ratio = 0;  // the largest err / bound
  std::string first_failure{};

  void add(double got, double want, double tol, const std::string& where) {
    ++count;
    const double err = std::fabs(got - want);
    if (!(err <= tol)) {  // NaN fails
      if (failures++ == 0)
        first_failure = absl::StrFormat("%s: got %.6g, expected %.6g (bound %.3g)", where, got,
                                        want, tol);
      if (std::isnan(err)) return;
    }
    max_err = std::max(max_err, err);
    if (tol > 0) worst_ratio = std::max(worst_ratio, err / tol);
  }
  void add_exact(bool equal, const std::string& where) {
    ++count;
    if (!equal && failures++ == 0) first_failure = where + " differs";
  }
  bool ok() const { return failures == 0; }
  void print(std::ostream& out) const {
    if (bound == "exact") {
      out << absl::StrFormat("  %-26s %s over %d elements\n", what,
                             ok() ? "bit-exact" : "NOT bit-exact", count);
    } else {
      out << absl::StrFormat("  %-26s %s %.3g over %d elements, at most %.0f%% of the bound %s\n",
                             what, measure, max_err, count, 100 * worst_ratio, bound);
    }
    if (!ok()) out << absl::StrFormat("    %d outside; first: %s\n", failures, first_failure);
  }
};

// docs/kernels.md's bounds: the reference against float64 on cpu, a GPU
// against the cpu reference elsewhere.
namespace vs_float64 = verify::reference_vs_float64;
namespace vs_cpu = verify::gpu_vs_reference;

Comparison compare_slots(const LayerInputs& in, const StepResult& r) {
  Comparison c{.what = "new tokens' slots", .bound = "exact"};
  for (uint32_t s = 0; s < in.shape.num_seqs(); ++s) {
    const uint64_t expected = row_offset(in, s, in.shape.context[s] - 1) / in.shape.kv_row();
    c.add_exact(r.new_slots[s] == int64_t(expected), absl::StrFormat("slot of sequence %d", s));
  }
  return c;
}

// Which pool elements hold a token (every other element stays poison).
std::vector<bool> written_rows(const LayerInputs& in) {
  std::vector<bool> written(uint64_t{in.num_blocks} * in.shape.block_size * in.shape.kv_row());
  for (uint32_t s = 0; s < in.shape.num_seqs(); ++s)
    for (uint32_t t = 0; t < in.shape.context[s]; ++t)
      std::fill_n(written.begin() + row_offset(in, s, t), in.shape.kv_row(), true);
  return written;
}

// The TurboQuant V pool's bytes that hold a value or a scale.
std::vector<bool> written_turbo_bytes(const LayerInputs& in) {
  const LayerShape& sh = in.shape;
  const auto l = contract::turbo_kv_cache::layout(sh.v_bits, sh.block_size, sh.num_kv_heads,
                                                  sh.head_dim);
  std::vector<bool> written(in.num_blocks * l.v_block_stride_bytes);
  for (uint32_t s = 0; s < sh.num_seqs(); ++s)
    for (uint32_t t = 0; t < sh.context[s]; ++t) {
      const uint64_t slot = slot_of(in, s, t);
      const uint64_t b = slot / sh.block_size * l.v_block_stride_bytes, o = slot % sh.block_size;
      std::fill_n(written.begin() + b + o * l.v_token_data_bytes, l.v_token_data_bytes, true);
      std::fill_n(written.begin() + b + l.v_data_section_bytes + o * l.v_token_scale_bytes,
                  l.v_token_scale_bytes, true);
    }
  return written;
}

// TurboQuant: the bytes no token owns are still poison, and the stored V,
// decoded and rotated back in float64, is the input within the format's
// quantization error.
std::vector<Comparison> check_turbo_pool(const LayerInputs& in, const StepResult& r) {
  const LayerShape& sh = in.shape;
  Comparison untouched{.what = "V pool, bytes no token owns", .bound = "exact"};
  const std::vector<bool> written = written_turbo_bytes(in);
  for (uint64_t i = 0; i < written.size(); ++i)
    if (!written[i]) untouched.add_exact(r.v_cache[i] == 0xff, absl::StrFormat("byte %d", i));
  double err2 = 0, ref2 = 0;
  uint64_t n = 0;
  for (uint32_t s = 0; s < sh.num_seqs(); ++s)
    for (uint32_t t = 0; t < sh.context[s]; ++t)
      for (uint32_t h = 0; h < sh.num_kv_heads; ++h) {
        std::vector<double> stored(sh.head_dim);
        for (uint32_t j = 0; j < sh.head_dim; ++j)
          stored[j] = turbo_v(sh, r.v_cache, slot_of(in, s, t), h, j);
        const std::vector<double> back = verify::hadamard(stored);
        for (uint32_t j = 0; j < sh.head_dim; ++j) {
          const double x = bf16_to_f32(in.value[in.token_row(s, t) * sh.kv_row() +
                                                h * sh.head_dim + j]);
          err2 += (back[j] - x) * (back[j] - x);
          ref2 += x * x;
          ++n;
        }
      }
  const double rel_mse = err2 / ref2, bound = vs_float64::kTurboRoundTripRelMse[sh.v_bits - 2];
  Comparison round_trip{
      .what = "V round trip",
      .bound = absl::StrFormat("%.4g (1.25 x the Lloyd-Max optimum)", bound),
      .measure = "relative MSE"};
  round_trip.count = n;
  round_trip.max_err = rel_mse;
  round_trip.worst_ratio = rel_mse / bound;
  if (!(rel_mse <= bound)) {
    round_trip.failures = 1;
    round_trip.first_failure = absl::StrFormat("relative MSE %.4g", rel_mse);
  }
  return {untouched, round_trip};
}

// The attention output against `want` (either float64 or the cpu step's):
// the decode's bound on a bf16 cache; on a TurboQuant one, the bound of the
// rotated output, whose scale takes each head's L2 norm.
Comparison compare_output(const LayerShape& sh, const std::vector<uint16_t>& got,
                          const std::vector<double>& want, double max_abs_v,
                          const verify::Bound& bf16_bound, const verify::Bound& rotated_bound) {
  const verify::Bound& b = sh.v_bits == 0 ? bf16_bound : rotated_bound;
  Comparison o{.what = "attention output", .bound = b.formula};
  for (uint64_t head = 0; head < want.size(); head += sh.head_dim) {
    double norm2 = 0;
    for (uint32_t j = 0; j < sh.head_dim; ++j) norm2 += want[head + j] * want[head + j];
    const double scale = sh.v_bits == 0 ? max_abs_v : std::sqrt(norm2) + max_abs_v;
    for (uint32_t j = 0; j < sh.head_dim; ++j)
      o.add(bf16_to_f32(got[head + j]), want[head + j], b(want[head + j], scale),
            absl::StrFormat("out[%d]", head + j));
  }
  return o;
}

// cpu: against float64.
std::vector<Comparison> check_against_float64(const LayerInputs& in, const StepResult& r) {
  const LayerShape& sh = in.shape;
  const LayerReference ref = reference_decode_step(in, r.v_cache);
  std::vector<Comparison> checks;
  checks.push_back(compare_slots(in, r));

  const verify::Bound& k_bound = vs_float64::kKNormRopeBf16;
  Comparison k{.what = "new tokens' K rows", .bound = k_bound.formula};
  for (uint32_t s = 0; s < sh.num_seqs(); ++s) {
    const uint64_t at = row_offset(in, s, sh.context[s] - 1);
    for (uint32_t h = 0; h < sh.num_kv_heads; ++h) {
      const double* y = ref.k_new.data() + uint64_t{s} * sh.kv_row() + h * sh.head_dim;
      double head_max = 0;
      for (uint32_t j = 0; j < sh.head_dim; ++j) head_max = std::max(head_max, std::fabs(y[j]));
      for (uint32_t j = 0; j < sh.head_dim; ++j)
        k.add(bf16_to_f32(r.k_cache[at + h * sh.head_dim + j]), y[j], k_bound(y[j], head_max),
              absl::StrFormat("sequence %d head %d dim %d", s, h, j));
    }
  }
  checks.push_back(k);

  if (sh.v_bits == 0) {
    Comparison v{.what = "V cache (whole pool)", .bound = "exact"};
    const std::vector<bool> written = written_rows(in);
    std::vector<uint16_t> expected_v(written.size(), 0xffff);
    for (uint32_t s = 0; s < sh.num_seqs(); ++s)
      for (uint32_t t = 0; t < sh.context[s]; ++t)
        std::copy_n(in.value.begin() + in.token_row(s, t) * sh.kv_row(), sh.kv_row(),
                    expected_v.begin() + row_offset(in, s, t));
    for (uint64_t i = 0; i < expected_v.size(); ++i)
      v.add_exact(std::memcmp(&r.v_cache[2 * i], &expected_v[i], 2) == 0,
                  absl::StrFormat("element %d", i));
    checks.push_back(v);
  } else {
    for (Comparison& c : check_turbo_pool(in, r)) checks.push_back(c);
  }

  checks.push_back(compare_output(sh, r.out, ref.out, ref.max_abs_v, vs_float64::kPagedDecodeAttn,
                                  vs_float64::kRotatedDecodeAttn));
  return checks;
}

// A GPU (or any other computing backend): against the same step on cpu.
std::vector<Comparison> check_against_cpu(const LayerInputs& in, const StepResult& r,
                                          const StepResult& cpu) {
  const LayerShape& sh = in.shape;
  std::vector<Comparison> checks;
  checks.push_back(compare_slots(in, r));
  const std::vector<bool> written = written_rows(in);
  const verify::Bound& k_bound = vs_cpu::kKNormRopeBf16;
  Comparison k{.what = "K cache (whole pool)", .bound = k_bound.formula};
  for (uint64_t head = 0; head < written.size(); head += sh.head_dim) {
    if (!written[head]) {
      for (uint32_t j = 0; j < sh.head_dim; ++j)
        k.add_exact(r.k_cache[head + j] == cpu.k_cache[head + j],
                    absl::StrFormat("unwritten element %d", head + j));
      continue;
    }
    double head_max = 0;
    for (uint32_t j = 0; j < sh.head_dim; ++j)
      head_max = std::max(head_max, double(std::fabs(bf16_to_f32(cpu.k_cache[head + j]))));
    for (uint32_t j = 0; j < sh.head_dim; ++j) {
      const double want = bf16_to_f32(cpu.k_cache[head + j]);
      k.add(bf16_to_f32(r.k_cache[head + j]), want, k_bound(want, head_max),
            absl::StrFormat("element %d", head + j));
    }
  }
  checks.push_back(k);
  // Both V writes (and the rotation before the TurboQuant one) are bit-exact.
  Comparison v{.what = "V cache (whole pool)", .bound = "exact"};
  for (uint64_t i = 0; i < cpu.v_cache.size(); ++i)
    v.add_exact(r.v_cache[i] == cpu.v_cache[i], absl::StrFormat("byte %d", i));
  checks.push_back(v);
  const double max_abs_v = max_abs_attended_v(in, cpu.v_cache);
  std::vector<double> want(cpu.out.size());
  for (uint64_t i = 0; i < want.size(); ++i) want[i] = bf16_to_f32(cpu.out[i]);
  checks.push_back(compare_output(sh, r.out, want, max_abs_v, vs_cpu::kPagedDecodeAttn,
                                  vs_cpu::kRotatedDecodeAttn));
  return checks;
}

void print_timings(const StepResult& r, std::ostream& out) {
  out << absl::StrFormat("\n%-42s %8s %12s %12s %10s\n", "op (decode step)", "launches",
                         "time (us)", "bytes", "GB/s");
  double total_us = 0;
  uint64_t total_bytes = 0;
  for (const OpTiming& t : r.timings) {
    const double gbs = t.median_us > 0 ? t.bytes / (t.median_us * 1e3) : 0;
    out << absl::StrFormat("%-42s %8d %12.1f %12d %10.2f\n", t.op, t.launches, t.median_us,
                           t.bytes, gbs);
    total_us += t.median_us;
    total_bytes += t.bytes;
  }
  out << absl::StrFormat("%-42s %8s %12.1f %12d %10.2f\n", "step", "", total_us, total_bytes,
                         total_us > 0 ? total_bytes / (total_us * 1e3) : 0);
  out << absl::StrFormat("(medians of %d steps after a warm-up, from events on the step's stream; "
                         "bytes read and written by the contracts)\n",
                         kTimedIterations);
}

// The mock computes nothing: show what the step launched and check it is
// what the ops must launch.
absl::Status show_mock_launches(Device& dev, const LayerInputs& in, const StepResult& r,
                                std::ostream& out) {
  auto mock = testing::MockInspector::attach(dev);
  if (!mock.ok()) return mock.status();
  const std::vector<testing::MockLaunch> launches = mock->launches();
  const uint32_t bits = in.shape.v_bits;
  std::vector<std::string> expected(in.shape.num_seqs(), "fill_slots_from_block_table");
  if (bits != 0) {
    expected.push_back("hadamard_transform_bf16");
    expected.push_back(absl::StrFormat("reshape_and_cache_flash_bf16k_turbo%dv", bits));
  }
  expected.push_back("fused_k_norm_rope_cache_write_bf16");
  if (bits == 0) expected.push_back("reshape_and_cache_flash_v_only");
  const std::string decode =
      bits == 0 ? "paged_decode_attn_bf16" : absl::StrFormat("paged_decode_attn_bf16k_turbo%dv", bits);
  if (r.plan.num_splits > 1) {
    if (bits == 0 && r.plan.num_splits >= ops::kMinMergeSplits) {
      expected.push_back(decode + "_split_merge");
    } else {
      expected.push_back(decode + "_split");
      expected.push_back("paged_decode_attn_combine");
    }
  } else {
    expected.push_back(decode);
  }
  if (bits != 0) expected.push_back("hadamard_transform_bf16");
  out << "result: not computed (the mock backend records launches instead of running them)\n";
  if (launches.size() < expected.size()) {
    out << "check: FAILED\n";
    return absl::InternalError(absl::StrFormat(
        "the mock recorded %d launches; the decode step alone makes %d", launches.size(),
        expected.size()));
  }
  const size_t first = launches.size() - expected.size();
  out << absl::StrFormat("\nrecorded launches: %d writing the context, then the decode step:\n",
                         first);
  std::vector<std::string> got;
  for (size_t i = first; i < launches.size(); ++i) {
    out << "  " << launches[i] << "\n";
    got.push_back(launches[i].entry);
  }
  if (got != expected) {
    out << "check: FAILED\n";
    return absl::InternalError(absl::StrFormat("the decode step launched [%s]; expected [%s]",
                                               absl::StrJoin(got, ", "),
                                               absl::StrJoin(expected, ", ")));
  }
  out << "check: passed (the launches are the decode step's; nothing was computed)\n";
  return absl::OkStatus();
}

// The median step time: the sum of the ops' medians.
double step_us(const StepResult& r) {
  double us = 0;
  for (const OpTiming& t : r.timings) us += t.median_us;
  return us;
}

// --devices N: the heads split over N devices of the selected backend (rank
// r on device index r), each rank's output all-gathered, against the same
// step on one device.
absl::Status run_tensor_parallel(uint32_t v_bits, int num_devices, std::ostream& out) {
  const LayerInputs in = LayerInputs::make(LayerShape{.v_bits = v_bits}, kSeed);
  const LayerShape& sh = in.shape;
  const uint32_t n = static_cast<uint32_t>(num_devices);
  if (sh.num_kv_heads % n != 0)
    return absl::InvalidArgumentError(absl::StrFormat(
        "--devices %d: the demo layer has %d KV heads, which must split evenly (1, 2 or 4 "
        "devices)",
        n, sh.num_kv_heads));
  std::vector<std::unique_ptr<Device>> owned;
  std::vector<Device*> devs;
  for (uint32_t i = 0; i < n; ++i) {
    auto d = Device::open({.backend = "", .device_index = static_cast<int>(i)});
    if (!d.ok())
      return absl::Status(d.status().code(),
                          absl::StrFormat("--devices %d: device %d: %s", n, i,
                                          d.status().message()));
    devs.push_back(d->get());
    owned.push_back(*std::move(d));
  }
  Device& first = *devs[0];
  const std::string backend = first.backend_name();
  auto library = Communicator::library(first);
  if (!library.ok()) return library.status();
  out << absl::StrFormat("devices: %d x %s (backend %s %s), collectives: %s\n", n,
                         first.properties().name, backend, first.plugin_version(), *library);
  out << absl::StrFormat(
      "layer: %d sequences with contexts [%s]; %d query heads over %d KV heads, head_dim %d; %s "
      "KV cache\ntensor parallel: each device writes %d KV heads and decodes their %d query "
      "heads; the outputs are all-gathered\n",
      sh.num_seqs(), absl::StrJoin(sh.context, ", "), sh.num_q_heads, sh.num_kv_heads,
      sh.head_dim, v_bits == 0 ? std::string("bf16") : absl::StrFormat("TurboQuant %d-bit V", v_bits),
      sh.num_kv_heads / n, sh.num_q_heads / n);
  out.flush();

  auto comms = Communicator::create_all(devs);
  if (!comms.ok()) return comms.status();
  const bool mock = backend == "mock";
  const int timed = mock ? 0 : kTimedIterations;

  // One thread per rank: a rank's all-gather waits for its peers.
  std::vector<absl::StatusOr<StepResult>> results(n, absl::UnknownError("not run"));
  std::vector<std::vector<uint16_t>> gathered(n);
  std::vector<std::thread> threads;
  for (uint32_t r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      Device& dev = *devs[r];
      Communicator& comm = *(*comms)[r];
      const OutputHook gather = [&](DevicePtr o, uint64_t elements, Stream stream) -> absl::Status {
        auto buf = dev.alloc(elements * n * 2);
        if (!buf.ok()) return buf.status();
        absl::Status s = dev.memset(*buf, 0xff, elements * n * 2);
        if (s.ok()) s = comm.all_gather(o, *buf, elements, DataType::kBF16, stream);
        if (s.ok()) s = dev.synchronize(stream);
        gathered[r].resize(elements * n);
        if (s.ok()) s = dev.copy_d2h(*buf, gathered[r]);
        const absl::Status freed = dev.free(*buf);
        return s.ok() ? freed : s;
      };
      results[r] = run_decode_step(dev, head_slice(in, r, n), timed, gather);
      // A failed rank must not leave the others waiting for its all-gather.
      if (!results[r].ok()) comm.abort().IgnoreError();
    });
  }
  for (std::thread& t : threads) t.join();
  for (uint32_t r = 0; r < n; ++r)
    if (!results[r].ok())
      return absl::Status(results[r].status().code(),
                          absl::StrFormat("rank %d: %s", r, results[r].status().message()));
  for (auto& c : *comms) SPARKRT_RETURN_IF_ERROR(c->destroy());

  bool ok = true;
  Comparison same{.what = "all-gathered outputs", .bound = "exact"};
  for (uint32_t r = 1; r < n; ++r)
    for (size_t i = 0; i < gathered[0].size(); ++i)
      same.add_exact(gathered[r][i] == gathered[0][i], absl::StrFormat("rank %d's element %d", r, i));
  if (mock) {
    out << "result: not computed (the mock backend records instead of running); the "
           "all-gather moved the ranks' (unwritten) outputs\n";
    // Each rank recorded one all-gather of its share of the output.
    Comparison recorded{.what = "recorded all-gathers", .bound = "exact"};
    const uint64_t share = uint64_t{sh.num_seqs()} * sh.q_row() / n;
    for (uint32_t r = 0; r < n; ++r) {
      auto inspector = testing::MockInspector::attach(*devs[r]);
      if (!inspector.ok()) return inspector.status();
      const auto calls = inspector->collectives();
      const bool one = calls.size() == 1 && calls[0].kind == SPARKRT_COLLECTIVE_ALL_GATHER &&
                       calls[0].count == share && calls[0].dtype == SPARKRT_DTYPE_BF16 &&
                       calls[0].code == 0;
      recorded.add_exact(one, absl::StrFormat("rank %d (%d calls recorded)", r, calls.size()));
    }
    same.print(out);
    recorded.print(out);
    ok = same.ok() && recorded.ok();
  } else {
    // One device, the whole layer, for the reference and the timing.
    auto single = run_decode_step(first, in, timed);
    if (!single.ok()) return single.status();
    // gathered: [rank][seq][head of the rank][dim] -> [seq][head][dim].
    const uint64_t d = sh.head_dim, local = sh.num_q_heads / n;
    std::vector<uint16_t> assembled(single->out.size());
    for (uint32_t r = 0; r < n; ++r)
      for (uint64_t s = 0; s < sh.num_seqs(); ++s)
        std::copy_n(gathered[0].begin() + ((uint64_t{r} * sh.num_seqs() + s) * local) * d,
                    local * d, assembled.begin() + (s * sh.num_q_heads + r * local) * d);
    std::vector<double> want(single->out.size());
    for (uint64_t i = 0; i < want.size(); ++i) want[i] = bf16_to_f32(single->out[i]);
    Comparison o = compare_output(sh, assembled, want, max_abs_attended_v(in, single->v_cache),
                                  vs_cpu::kPagedDecodeAttn, vs_cpu::kRotatedDecodeAttn);
    o.what = "output vs one device";
    out << absl::StrFormat("\nstep time (median of %d): one device %.1f us; %d devices:", timed,
                           step_us(*single), n);
    for (uint32_t r = 0; r < n; ++r) out << absl::StrFormat(" %.1f", step_us(*results[r]));
    out << " us (each rank's step, run at the same time; the all-gather after it is untimed)\n";
    out << "\ncheck: the tensor-parallel step against the whole layer on one device\n";
    same.print(out);
    o.print(out);
    out << absl::StrFormat("output %s the one-device step's\n",
                           assembled == single->out ? "bit-identical to" : "within the bound of");
    ok = same.ok() && o.ok();
  }
  if (!ok) {
    out << "check: FAILED\n";
    return absl::InternalError("the tensor-parallel step differs from one device (see above)");
  }
  out << "check: passed\n";
  for (Device* dev : devs) SPARKRT_RETURN_IF_ERROR(dev->close());
  return absl::OkStatus();
}

// --trace: `step` runs under a trace written to `trace_path` (none when
// empty); a trace that could not be written fails the demo.
template <typename Step>
auto traced(const std::string& trace_path, std::ostream& out, Step&& step) -> decltype(step()) {
  if (trace_path.empty()) return step();
  SPARKRT_RETURN_IF_ERROR(trace::start(trace_path));
  auto result = step();
  const absl::Status stopped = trace::stop();
  if (!result.ok()) return result;
  SPARKRT_RETURN_IF_ERROR(stopped);
  out << absl::StrFormat(
      "trace: the decode step written to %s (open it in ui.perfetto.dev or chrome://tracing)\n",
      trace_path);
  return result;
}

}  // namespace

absl::Status run_demo(uint32_t v_bits, int num_devices, const std::string& trace_path,
                      std::ostream& out) {
  if (num_devices > 1)
    return traced(trace_path, out, [&] { return run_tensor_parallel(v_bits, num_devices, out); });
  auto opened = Device::open();
  if (!opened.ok()) return opened.status();
  Device& dev = **opened;
  const std::string backend = dev.backend_name();
  out << absl::StrFormat("device: %s (backend %s %s)\n", dev.properties().name, backend,
                         dev.plugin_version());

  const LayerInputs in = LayerInputs::make(LayerShape{.v_bits = v_bits}, kSeed);
  const LayerShape& sh = in.shape;
  out << absl::StrFormat(
      "layer: %d sequences with contexts [%s] after this step; %d query heads over %d KV heads "
      "(GQA %d), head_dim %d, rotary_dim %d; %s paged KV cache of %d blocks x %d tokens, "
      "blocks scattered\n",
      sh.num_seqs(), absl::StrJoin(sh.context, ", "), sh.num_q_heads, sh.num_kv_heads,
      sh.num_q_heads / sh.num_kv_heads, sh.head_dim, sh.rotary_dim,
      v_bits == 0 ? std::string("bf16")
                  : absl::StrFormat("bf16 K, TurboQuant %d-bit V", v_bits),
      in.num_blocks, sh.block_size);
  out << (v_bits == 0
              ? "step: fill slots -> fused K (RMSNorm, RoPE, cache write) -> V write -> paged "
                "decode attention\n"
              : "step: fill slots -> rotate V -> TurboQuant write (K raw, V quantized) -> fused K "
                "(RMSNorm, RoPE, cache write over the raw K) -> paged decode attention -> rotate "
                "the output back\n");
  out.flush();

  if (backend == "mock") {
    auto r = traced(trace_path, out, [&] { return run_decode_step(dev, in, 0); });
    if (!r.ok()) return r.status();
    SPARKRT_RETURN_IF_ERROR(show_mock_launches(dev, in, *r, out));
    return dev.close();
  }

  auto r = traced(trace_path, out, [&] { return run_decode_step(dev, in, kTimedIterations); });
  if (!r.ok()) return r.status();
  out << absl::StrFormat("decode geometry: %d query heads per CTA, %s\n", r->plan.heads_per_cta,
                         r->plan.num_splits > 1
                             ? absl::StrFormat("split-KV into %d parts",
                                               r->plan.num_splits)
                             : std::string("one pass (no split)"));
  print_timings(*r, out);

  std::vector<Comparison> checks;
  if (backend == "cpu") {
    out << "\ncheck: cpu reference kernels against float64 computed from the contracts\n";
    checks = check_against_float64(in, *r);
  } else {
    out << absl::StrFormat("\ncheck: %s against the same step on the cpu reference backend\n",
                           backend);
    out.flush();
    auto cpu = Device::open({.backend = "cpu"});
    if (!cpu.ok()) return cpu.status();
    auto cr = run_decode_step(**cpu, in, 0);
    if (!cr.ok()) return cr.status();
    checks = check_against_cpu(in, *r, *cr);
    SPARKRT_RETURN_IF_ERROR((*cpu)->close());
  }
  bool ok = true;
  for (const Comparison& c : checks) {
    c.print(out);
    ok = ok && c.ok();
  }
  const Comparison& attention = checks.back();
  out << absl::StrFormat("max error of the attention output: %.3g (%.0f%% of its bound)\n",
                         attention.max_err, 100 * attention.worst_ratio);
  if (!ok) {
    out << "check: FAILED\n";
    return absl::InternalError("the decode step's results are outside their bounds (see above)");
  }
  out << "check: passed\n";
  return dev.close();
}

}  // namespace sparkrt::cli
