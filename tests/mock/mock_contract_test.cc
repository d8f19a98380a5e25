// Seed-style contract tests: a two-kernel decode step (rope, then SDPA with
// an output gate) written as an op wrapper would write it, checked on the
// mock for lookups, launch geometry, argument lists and transfer counts. The
// kernels come from the test module tests/data/kernels/twin_contract.ptx.
#include "mock_test_support.h"
#include "sparkrt/status_macros.h"

using namespace mocktest;
using sparkrt::DevicePtr;
using sparkrt::Dim3;
using sparkrt::div_ceil;
using sparkrt::Kernel;
using sparkrt::KernelLaunch;
using sparkrt::Stream;

namespace {

constexpr uint32_t kRopeBlock = 128;
constexpr uint32_t kSdpaBlock = 32;

// The "twin" attention shape: NoPE (rope skipped) with an output gate.
struct TwinConfig {
  uint32_t heads = 12;
  uint32_t qk_nope_head_dim = 64;
  uint32_t qk_rope_head_dim = 32;
  uint32_t v_head_dim = 64;
  bool use_nope = true;
  bool use_output_gate = true;
  uint32_t qk_head_dim() const { return qk_nope_head_dim + qk_rope_head_dim; }
};

struct TwinKernels {
  Kernel rope;
  Kernel sdpa;

  static absl::StatusOr<TwinKernels> resolve(sparkrt::Device& dev) {
    auto rope = dev.kernel(kTwin, kRope);
    if (!rope.ok()) return rope.status();
    auto sdpa = dev.kernel(kTwin, kSdpa);
    if (!sdpa.ok()) return sdpa.status();
    return TwinKernels{*rope, *sdpa};
  }
};

// Frees every allocation it holds when the step ends, error or not.
class Hold {
 public:
  explicit Hold(sparkrt::Device& dev) : dev_(dev) {}
  ~Hold() {
    for (DevicePtr p : ptrs_) dev_.free(p).IgnoreError();
  }
  absl::StatusOr<DevicePtr> alloc(size_t bytes) {
    auto p = dev_.alloc(bytes);
    if (p.ok()) ptrs_.push_back(*p);
    return p;
  }
  absl::StatusOr<DevicePtr> upload(const std::vector<float>& v) {
    auto p = alloc(std::max<size_t>(v.size() * sizeof(float), 1));
    if (!p.ok()) return p;
    if (auto s = dev_.copy_h2d(v, *p); !s.ok()) return s;
    return p;
  }

 private:
  sparkrt::Device& dev_;
  std::vector<DevicePtr> ptrs_;
};

struct HostKv {
  std::vector<float> k;
  std::vector<float> v;
  uint32_t seq_len = 0;
  void append(const std::vector<float>& k_row, const std::vector<float>& v_row) {
    k.insert(k.end(), k_row.begin(), k_row.end());
    v.insert(v.end(), v_row.begin(), v_row.end());
    ++seq_len;
  }
};

absl::Status launch_rope(sparkrt::Device& dev, const TwinKernels& k, DevicePtr q, DevicePtr kn,
                         const TwinConfig& cfg, uint32_t pos, float theta, Stream stream) {
  return KernelLaunch(dev, k.rope)
      .grid({div_ceil(cfg.heads, kRopeBlock)})
      .block({kRopeBlock})
      .arg(q)
      .arg(kn)
      .arg(cfg.heads)
      .arg(cfg.qk_nope_head_dim)
      .arg(cfg.qk_rope_head_dim)
      .arg(pos)
      .arg(theta)
      .arg(uint32_t{cfg.use_nope})
      .launch(stream);
}

absl::Status launch_sdpa(sparkrt::Device& dev, const TwinKernels& k, DevicePtr q, DevicePtr keys,
                         DevicePtr values, DevicePtr gate, DevicePtr out, uint32_t seq_len,
                         const TwinConfig& cfg, Stream stream) {
  return KernelLaunch(dev, k.sdpa)
      .grid({cfg.heads})
      .block({kSdpaBlock})
      .arg(q)
      .arg(keys)
      .arg(values)
      .arg(gate)
      .arg(out)
      .arg(seq_len)
      .arg(cfg.heads)
      .arg(cfg.qk_head_dim())
      .arg(cfg.v_head_dim)
      .arg(uint32_t{cfg.use_output_gate})
      .launch(stream);
}

// One token with host-side KV: rope on the device, KV appended on the host,
// then SDPA over the re-uploaded KV. Updates q and k in place.
absl::StatusOr<std::vector<float>> decode_token(sparkrt::Device& dev, const TwinKernels& kernels,
                                                std::vector<float>& q, std::vector<float>& k,
                                                const std::vector<float>& v,
                                                const std::vector<float>& g, HostKv& kv,
                                                const TwinConfig& cfg, uint32_t pos, float theta,
                                                Stream stream) {
  Hold hold(dev);
  SPARKRT_ASSIGN_OR_RETURN(DevicePtr dq, hold.upload(q));
  SPARKRT_ASSIGN_OR_RETURN(DevicePtr dk_new, hold.upload(k));
  SPARKRT_RETURN_IF_ERROR(launch_rope(dev, kernels, dq, dk_new, cfg, pos, theta, stream));
  SPARKRT_RETURN_IF_ERROR(dev.synchronize(stream));
  SPARKRT_RETURN_IF_ERROR(dev.copy_d2h(dq, q));
  SPARKRT_RETURN_IF_ERROR(dev.copy_d2h(dk_new, k));
  kv.append(k, v);

  SPARKRT_ASSIGN_OR_RETURN(DevicePtr dq2, hold.upload(q));
  SPARKRT_ASSIGN_OR_RETURN(DevicePtr dkeys, hold.upload(kv.k));
  SPARKRT_ASSIGN_OR_RETURN(DevicePtr dvalues, hold.upload(kv.v));
  SPARKRT_ASSIGN_OR_RETURN(DevicePtr dg, hold.upload(g));
  SPARKRT_ASSIGN_OR_RETURN(DevicePtr dout, hold.alloc(cfg.heads * cfg.v_head_dim * sizeof(float)));
  SPARKRT_RETURN_IF_ERROR(
      launch_sdpa(dev, kernels, dq2, dkeys, dvalues, dg, dout, kv.seq_len, cfg, stream));
  SPARKRT_RETURN_IF_ERROR(dev.synchronize(stream));
  std::vector<float> out(cfg.heads * cfg.v_head_dim);
  SPARKRT_RETURN_IF_ERROR(dev.copy_d2h(dout, out));
  return out;
}

// Device-resident KV: appended row by row on the device, never downloaded.
struct DeviceKv {
  DevicePtr k;
  DevicePtr v;
  uint32_t seq_len = 0;
  uint32_t cap = 0;
  size_t k_row = 0;  // floats
  size_t v_row = 0;
};

absl::StatusOr<std::vector<float>> decode_token_on_device(
    sparkrt::Device& dev, const TwinKernels& kernels, const std::vector<float>& q,
    const std::vector<float>& k, const std::vector<float>& v, const std::vector<float>& g,
    DeviceKv& kv, const TwinConfig& cfg, uint32_t pos, float theta, Stream stream) {
  if (kv.seq_len >= kv.cap) return absl::ResourceExhaustedError("device KV full");
  Hold hold(dev);
  SPARKRT_ASSIGN_OR_RETURN(DevicePtr dq, hold.upload(q));
  SPARKRT_ASSIGN_OR_RETURN(DevicePtr dk_new, hold.upload(k));
  SPARKRT_RETURN_IF_ERROR(launch_rope(dev, kernels, dq, dk_new, cfg, pos, theta, stream));
  SPARKRT_RETURN_IF_ERROR(dev.copy_d2d(dk_new, kv.k + kv.seq_len * kv.k_row * sizeof(float),
                               kv.k_row * sizeof(float)));
  SPARKRT_RETURN_IF_ERROR(dev.copy_h2d(v, kv.v + kv.seq_len * kv.v_row * sizeof(float)));
  ++kv.seq_len;
  SPARKRT_ASSIGN_OR_RETURN(DevicePtr dg, hold.upload(g));
  SPARKRT_ASSIGN_OR_RETURN(DevicePtr dout, hold.alloc(cfg.heads * cfg.v_head_dim * sizeof(float)));
  SPARKRT_RETURN_IF_ERROR(
      launch_sdpa(dev, kernels, dq, kv.k, kv.v, dg, dout, kv.seq_len, cfg, stream));
  SPARKRT_RETURN_IF_ERROR(dev.synchronize(stream));
  std::vector<float> out(cfg.heads * cfg.v_head_dim);
  SPARKRT_RETURN_IF_ERROR(dev.copy_d2h(dout, out));
  return out;
}

std::vector<float> random_floats(std::mt19937_64& gen, size_t n) {
  std::uniform_real_distribution<float> d(0.5f, 2.0f);  // non-zero
  std::vector<float> v(n);
  for (auto& x : v) x = d(gen);
  return v;
}

}  // namespace

TEST_CASE("mock contract: resolving the twin kernels looks up both entries in order") {
  use_test_kernels();
  auto dev = open_mock();
  auto mock = inspect(*dev);
  REQUIRE(TwinKernels::resolve(*dev).ok());
  using Pair = std::pair<std::string, std::string>;
  CHECK(mock.lookups() == std::vector<Pair>{{kTwin, kRope}, {kTwin, kSdpa}});
}

TEST_CASE("mock contract: twin geometry, arguments and transfers of one decode step") {
  const uint64_t seed = fresh_seed();
  INFO("seed ", seed);
  std::mt19937_64 gen(seed);
  use_test_kernels();
  auto dev = open_mock();
  auto mock = inspect(*dev);
  auto kernels = TwinKernels::resolve(*dev);
  REQUIRE(kernels.ok());
  // Stream handles are the device's to issue; use the third one made.
  Stream stream;
  for (int i = 0; i < 3; ++i) {
    auto s = dev->create_stream();
    REQUIRE(s.ok());
    stream = *s;
  }

  const TwinConfig cfg;
  auto q = random_floats(gen, cfg.heads * cfg.qk_head_dim());
  auto k = random_floats(gen, cfg.heads * cfg.qk_head_dim());
  const auto v = random_floats(gen, cfg.heads * cfg.v_head_dim);
  const auto g = random_floats(gen, cfg.heads * cfg.v_head_dim);
  const auto q_in = q;
  const auto k_in = k;
  HostKv kv;
  auto out = decode_token(*dev, *kernels, q, k, v, g, kv, cfg, 3, 10000.0f, stream);
  REQUIRE_MESSAGE(out.ok(), out.status().ToString());
  CHECK(kv.seq_len == 1);

  const auto launches = mock.launches();
  REQUIRE_MESSAGE(launches.size() == 2, "rope then sdpa_gate");
  const MockLaunch& rope = launches[0];
  INFO(rope);
  CHECK(rope.entry == kRope);
  CHECK(rope.grid == Dim3{div_ceil(cfg.heads, kRopeBlock), 1, 1});
  CHECK(rope.block == Dim3{kRopeBlock, 1, 1});
  CHECK(rope.shared_mem == 0);
  CHECK(rope.stream == stream);
  REQUIRE(rope.args.size() == 8);
  CHECK(rope.args[2] == MockArg::of(cfg.heads));
  CHECK(rope.args[5] == MockArg::of(uint32_t{3}));
  CHECK(rope.args[6] == MockArg::of(10000.0f));
  CHECK_MESSAGE(rope.args[7] == MockArg::of(uint32_t{1}), "twin is NoPE");

  const MockLaunch& sdpa = launches[1];
  INFO(sdpa);
  CHECK(sdpa.entry == kSdpa);
  CHECK(sdpa.grid == Dim3{cfg.heads, 1, 1});
  CHECK(sdpa.block == Dim3{kSdpaBlock, 1, 1});
  CHECK(sdpa.shared_mem == 0);
  CHECK(sdpa.stream == stream);
  REQUIRE(sdpa.args.size() == 10);
  CHECK(sdpa.args[5] == MockArg::of(uint32_t{1}));  // seq_len
  CHECK(sdpa.args[7] == MockArg::of(cfg.qk_head_dim()));
  CHECK_MESSAGE(sdpa.args[9] == MockArg::of(uint32_t{1}), "twin uses output gate");
  for (size_t i = 0; i < 5; ++i) CHECK(sdpa.args[i].kind == sparkrt::ArgKind::kPtr);

  // Every pointer argument pointed at the start of an allocation of the step
  // (freed by now), and rope's two buffers are distinct.
  for (size_t i : {0, 1}) {
    auto info = mock.pointer_info(DevicePtr(*rope.args[i].as<uint64_t>()));
    REQUIRE(info.ok());
    CHECK(info->offset == 0);
    CHECK_FALSE(info->live);
  }
  CHECK(rope.args[0] != rope.args[1]);

  // The mock moves bytes but computes nothing: q and k come back unchanged.
  CHECK(q == q_in);
  CHECK(k == k_in);
  CHECK(out->size() == cfg.heads * cfg.v_head_dim);

  const auto c = mock.counters();
  CHECK(c.h2d_blocking == 6);
  CHECK(c.d2h_blocking == 3);
  CHECK(c.syncs == 2);
  CHECK(mock.stream_counters(stream).syncs == 2);
  CHECK(mock.stream_counters(stream).launches == 2);
  CHECK(c.allocations == 7);
  CHECK(c.frees == 7);
  CHECK(c.live_bytes == 0);
}

TEST_CASE("mock contract: with device-resident KV the second token downloads only its output") {
  const uint64_t seed = fresh_seed();
  INFO("seed ", seed);
  std::mt19937_64 gen(seed);
  use_test_kernels();
  auto dev = open_mock();
  auto mock = inspect(*dev);
  auto kernels = TwinKernels::resolve(*dev);
  REQUIRE(kernels.ok());
  const TwinConfig cfg;
  DeviceKv kv;
  kv.cap = 8;
  kv.k_row = cfg.heads * cfg.qk_head_dim();
  kv.v_row = cfg.heads * cfg.v_head_dim;
  auto kbuf = dev->alloc(kv.cap * kv.k_row * sizeof(float));
  auto vbuf = dev->alloc(kv.cap * kv.v_row * sizeof(float));
  REQUIRE(kbuf.ok());
  REQUIRE(vbuf.ok());
  kv.k = *kbuf;
  kv.v = *vbuf;

  const auto q = random_floats(gen, kv.k_row);
  const auto k0 = random_floats(gen, kv.k_row);
  const auto k1 = random_floats(gen, kv.k_row);
  const auto v = random_floats(gen, kv.v_row);
  const auto g = random_floats(gen, kv.v_row);
  REQUIRE(decode_token_on_device(*dev, *kernels, q, k0, v, g, kv, cfg, 0, 10000.0f, {}).ok());
  const uint64_t before = mock.counters().d2h_blocking;
  REQUIRE(decode_token_on_device(*dev, *kernels, q, k1, v, g, kv, cfg, 1, 10000.0f, {}).ok());
  const uint64_t pulled = mock.counters().d2h_blocking - before;
  CHECK_MESSAGE(pulled == 1, "resident KV must not be downloaded again; got ", pulled);
  CHECK(kv.seq_len == 2);

  // The appended rows really landed in the device KV, in order.
  std::vector<float> rows(2 * kv.k_row, 0.0f);
  REQUIRE_OK(dev->copy_d2h(kv.k, rows));
  CHECK(std::equal(k0.begin(), k0.end(), rows.begin()));
  CHECK(std::equal(k1.begin(), k1.end(), rows.begin() + kv.k_row));
  const auto last = mock.launches().back();
  CHECK(last.args[5] == MockArg::of(uint32_t{2}));
  CHECK(last.args[1] == MockArg::of(kv.k));
}
