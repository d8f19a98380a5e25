// sparkrt_gpu_bench: the CUDA backend's costs next to the raw driver, in one
// process, on the same kernel, arguments, stream kind and buffers.
//
//   sparkrt_gpu_bench [--json out.json] [--batch 512] [--reps 31]
//
// Measures
//   - host submit time per launch of empty_10_args (10 arguments): raw
//     cuLaunchKernel vs sparkrt's KernelLaunch (median over batches; goal:
//     ratio <= 1.05), the C API's sparkrt_launch vs KernelLaunch (goal:
//     ratio <= 1.05), and heap allocations per sparkrt launch;
//   - CUDA graph replay time per kernel, through sparkrt.graph.v1 and raw;
//   - module load time: first lookup through sparkrt, raw cubin load, raw
//     PTX JIT with an empty and with a warm compute cache;
//   - H2D / D2H / D2D bandwidth with pinned host memory, sparkrt vs raw
//     (goal >= 0.97 of raw).
// Prints a table; --json writes every number.
#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <functional>
#include <new>
#include <string>
#include <vector>

#include "driver_api.h"
#include "sparkrt/extensions/graph.h"
#include "sparkrt/sparkrt.h"
#include "sparkrt/sparkrt_c.h"
#include "sparkrt/verify/median.h"

// ---- heap allocation counter (covers libsparkrt and the plugin too) -------------

namespace {
std::atomic<uint64_t> g_allocations{0};
}
void* operator new(size_t n) {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(n == 0 ? 1 : n)) return p;
  throw std::bad_alloc();
}
void* operator new[](size_t n) { return operator new(n); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }
void operator delete[](void* p, size_t) noexcept { std::free(p); }

namespace {

using Clock = std::chrono::steady_clock;
using sparkrt::cuda::CudaDriver;
using sparkrt::verify::median;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "sparkrt_gpu_bench: %s\n", what.c_str());
  std::exit(1);
}

void ok(const absl::Status& s, const char* what) {
  if (!s.ok()) die(std::string(what) + ": " + std::string(s.ToString()));
}
void c_ok(sparkrt_status* s, const char* what) {
  if (s == nullptr) return;
  const std::string message = sparkrt_status_message(s);
  sparkrt_status_free(s);
  die(std::string(what) + ": " + message);
}
template <typename T>
T ok(absl::StatusOr<T> s, const char* what) {
  if (!s.ok()) die(std::string(what) + ": " + std::string(s.status().ToString()));
  return *std::move(s);
}

// ---- the raw driver ---------------------------------------------------------------

struct Raw {
  CudaDriver d;
  decltype(&::cuMemcpyHtoD_v2) MemcpyHtoD = nullptr;
  decltype(&::cuMemcpyDtoH_v2) MemcpyDtoH = nullptr;
  decltype(&::cuMemcpyDtoD_v2) MemcpyDtoD = nullptr;
  decltype(&::cuModuleGetFunction) ModuleGetFunction = nullptr;

  void load() {
    void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) die(std::string("dlopen libcuda.so.1: ") + dlerror());
#define SPARKRT_BENCH_RESOLVE(field, symbol) \
  d.field = reinterpret_cast<decltype(d.field)>(dlsym(lib, #symbol));
    SPARKRT_CUDA_ALL_FUNCTIONS(SPARKRT_BENCH_RESOLVE)
#undef SPARKRT_BENCH_RESOLVE
    MemcpyHtoD = reinterpret_cast<decltype(MemcpyHtoD)>(dlsym(lib, "cuMemcpyHtoD_v2"));
    MemcpyDtoH = reinterpret_cast<decltype(MemcpyDtoH)>(dlsym(lib, "cuMemcpyDtoH_v2"));
    MemcpyDtoD = reinterpret_cast<decltype(MemcpyDtoD)>(dlsym(lib, "cuMemcpyDtoD_v2"));
  }
};
Raw raw;

void cu(CUresult r, const char* call) {
  if (r == CUDA_SUCCESS) return;
  const char* name = "?";
  if (raw.d.GetErrorName) raw.d.GetErrorName(r, &name);
  die(std::string(call) + " failed: " + name);
}

// ---- JSON (flat enough to write by hand) -------------------------------------------

struct Json {
  std::string text = "{";
  bool first = true;
  void key(const std::string& k) {
    text += first ? "\n  " : ",\n  ";
    first = false;
    text += "\"" + k + "\": ";
  }
  void num(const std::string& k, double v) {
    key(k);
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.6g", v);
    text += buf;
  }
  void str(const std::string& k, const std::string& v) {
    key(k);
    text += "\"";
    for (char c : v) text += (c == '"' || c == '\\') ? std::string("\\") + c : std::string(1, c);
    text += "\"";
  }
  std::string done() const { return text + "\n}\n"; }
};

struct Args {
  std::string json;
  int batch = 512;  // well below the driver's queue depth: measures submission
  int reps = 61;
};

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    std::string s = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) die("missing value after " + s);
      return argv[++i];
    };
    if (s == "--json")
      a.json = next();
    else if (s == "--batch")
      a.batch = std::stoi(next());
    else if (s == "--reps")
      a.reps = std::stoi(next());
    else if (s == "--help" || s == "-h") {
      std::printf("usage: sparkrt_gpu_bench [--json out.json] [--batch N] [--reps N]\n");
      std::exit(0);
    } else
      die("unknown argument " + s + " (see --help)");
  }
  return a;
}

}  // namespace

int main(int argc, char** argv) {
  const Args args = parse(argc, argv);
  // An empty compute cache of our own: the first PTX load is a true JIT, the
  // second a cache hit. Must be set before the driver initialises.
  char cache_dir[] = "/tmp/sparkrt_bench_jit_XXXXXX";
  if (mkdtemp(cache_dir) == nullptr) die("mkdtemp failed");
  setenv("CUDA_CACHE_PATH", cache_dir, 1);
  unsetenv("CUDA_CACHE_DISABLE");
  unsetenv("SPARKRT_SYNC_LAUNCHES");
  unsetenv("SPARKRT_CUDA_LAUNCH_PARAMS");

  Json json;
  {
    char date[64];
    const std::time_t now = std::time(nullptr);
    std::strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
    json.str("date", date);
  }

  // sparkrt first: its first kernel lookup is the cold module load.
  auto dev = ok(sparkrt::Device::open({.backend = "cuda"}), "open cuda device");
  const auto& props = dev->properties();
  json.str("device", props.name);
  json.str("architecture", props.architecture);
  json.num("multiprocessors", props.multiprocessor_count);

  auto t0 = Clock::now();
  auto kernel = ok(dev->kernel("vector_ops", "empty_10_args"), "kernel empty_10_args");
  const double sparkrt_first_lookup = seconds_since(t0);
  t0 = Clock::now();
  (void)ok(dev->kernel("vector_ops", "empty_10_args"), "kernel again");
  const double sparkrt_cached_lookup = seconds_since(t0);

  raw.load();
  int driver_version = 0;
  cu(raw.d.DriverGetVersion(&driver_version), "cuDriverGetVersion");
  json.num("driver_cuda_version", driver_version);
  CUdevice cudev;
  cu(raw.d.DeviceGet(&cudev, dev->index()), "cuDeviceGet");
  CUcontext ctx;
  cu(raw.d.DevicePrimaryCtxRetain(&ctx, cudev), "cuDevicePrimaryCtxRetain");
  cu(raw.d.CtxSetCurrent(ctx), "cuCtxSetCurrent");

  // ---- module loads ----
  auto image = ok(sparkrt::find_module("vector_ops", props.architecture), "find_module");
  if (!image.ptx) {
    std::fprintf(stderr, "vector_ops has no PTX: this sparkrt was built without nvcc\n");
    std::exit(1);
  }
  const std::string& ptx = *image.ptx;
  auto load_raw = [&](const void* data) {
    CUmodule m;
    auto start = Clock::now();
    cu(raw.d.ModuleLoadDataEx(&m, data, 0, nullptr, nullptr), "cuModuleLoadDataEx");
    const double t = seconds_since(start);
    cu(raw.d.ModuleUnload(m), "cuModuleUnload");
    return t;
  };
  const double ptx_cold = load_raw(ptx.c_str());
  const double ptx_warm = load_raw(ptx.c_str());
  const double cubin_load = image.cubin.empty() ? -1 : load_raw(image.cubin.data());
  double sparkrt_second_device = 0;
  {
    auto t1 = Clock::now();
    auto dev2 = ok(sparkrt::Device::open({.backend = "cuda"}), "open second device");
    auto t2 = Clock::now();
    (void)ok(dev2->kernel("vector_ops", "empty_10_args"), "kernel on second device");
    sparkrt_second_device = seconds_since(t2);
    (void)t1;
  }

  // ---- the raw kernel, from the same image sparkrt loaded ----
  CUmodule raw_module;
  cu(raw.d.ModuleLoadDataEx(
         &raw_module,
         image.cubin.empty() ? static_cast<const void*>(ptx.c_str()) : image.cubin.data(), 0,
         nullptr, nullptr),
     "cuModuleLoadDataEx");
  CUfunction raw_fn;
  cu(raw.d.ModuleGetFunction(&raw_fn, raw_module, "empty_10_args"), "cuModuleGetFunction");

  const sparkrt::DevicePtr buf = ok(dev->alloc(4096), "alloc");
  // Arguments: four pointers, u32 x3, u64, f32 x2 (never trapping: a != b).
  sparkrt::DevicePtr p0 = buf, p1 = buf + 256, p2 = buf + 512, p3 = buf + 768;
  uint32_t a = 1, b = 2, c = 3;
  uint64_t dd = 4;
  float e = 5.f, f = 6.f;
  void* raw_params[] = {&p0.addr, &p1.addr, &p2.addr, &p3.addr, &a, &b, &c, &dd, &e, &f};
  struct alignas(8) Packed {
    uint64_t p[4];
    uint32_t a, b, c, pad;
    uint64_t d;
    float e, f;
  } packed{{p0.addr, p1.addr, p2.addr, p3.addr}, a, b, c, 0, dd, e, f};
  size_t packed_size = sizeof(Packed);
  void* raw_extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, &packed, CU_LAUNCH_PARAM_BUFFER_SIZE,
                       &packed_size, CU_LAUNCH_PARAM_END};
  static_assert(sizeof(Packed) == 64);

  CUstream raw_stream;
  cu(raw.d.StreamCreate(&raw_stream, CU_STREAM_DEFAULT), "cuStreamCreate");
  const sparkrt::Stream stream = ok(dev->create_stream(), "create_stream");

  // The same device again with the plugin's other parameter-passing mode.
  setenv("SPARKRT_CUDA_LAUNCH_PARAMS", "pointers", 1);
  auto dev_ptrs = ok(sparkrt::Device::open({.backend = "cuda"}), "open (pointers mode)");
  unsetenv("SPARKRT_CUDA_LAUNCH_PARAMS");
  auto kernel_ptrs = ok(dev_ptrs->kernel("vector_ops", "empty_10_args"), "kernel (pointers)");
  const sparkrt::Stream stream_ptrs = ok(dev_ptrs->create_stream(), "create_stream (pointers)");

  auto launch_builder = [&](sparkrt::Device& d, sparkrt::Kernel k, sparkrt::Stream s) {
    return sparkrt::KernelLaunch(d, k)
        .grid({1})
        .block({32})
        .arg(p0)
        .arg(p1)
        .arg(p2)
        .arg(p3)
        .arg(a)
        .arg(b)
        .arg(c)
        .arg(dd)
        .arg(e)
        .arg(f)
        .launch(s);
  };
  sparkrt::KernelLaunch prebuilt(*dev, kernel);
  prebuilt.grid({1})
      .block({32})
      .arg(p0)
      .arg(p1)
      .arg(p2)
      .arg(p3)
      .arg(a)
      .arg(b)
      .arg(c)
      .arg(dd)
      .arg(e)
      .arg(f);

  // The same launch through the C API, on a device it opened itself.
  sparkrt_device* c_dev = nullptr;
  const sparkrt_open_options c_options{SPARKRT_C_OPEN_OPTIONS_SIZE, "cuda", 0};
  c_ok(sparkrt_device_open(&c_options, &c_dev), "sparkrt_device_open");
  sparkrt_kernel* c_kernel = nullptr;
  c_ok(sparkrt_kernel_get(c_dev, "vector_ops", "empty_10_args", &c_kernel), "sparkrt_kernel_get");
  SparkrtStream c_stream = 0;
  c_ok(sparkrt_stream_create(c_dev, &c_stream), "sparkrt_stream_create");
  const sparkrt_launch_config c_config{SPARKRT_C_LAUNCH_CONFIG_SIZE, {1, 1, 1}, {32, 1, 1}, 0,
                                       c_stream, 0, {0, 0, 0}};
  const sparkrt_arg c_args[] = {sparkrt_arg_ptr(p0.addr), sparkrt_arg_ptr(p1.addr),
                                sparkrt_arg_ptr(p2.addr), sparkrt_arg_ptr(p3.addr),
                                sparkrt_arg_u32(a),       sparkrt_arg_u32(b),
                                sparkrt_arg_u32(c),       sparkrt_arg_u64(dd),
                                sparkrt_arg_f32(e),       sparkrt_arg_f32(f)};

  struct Variant {
    const char* name;
    std::function<void()> launch;
    std::function<void()> sync;
    std::vector<double> per_launch_us;
    uint64_t allocations = 0;
  };
  auto raw_sync = [&] { cu(raw.d.StreamSynchronize(raw_stream), "cuStreamSynchronize"); };
  auto sp_sync = [&] { ok(dev->synchronize(stream), "synchronize"); };
  auto sp_sync_ptrs = [&] { ok(dev_ptrs->synchronize(stream_ptrs), "synchronize"); };
  std::vector<Variant> variants = {
      {"raw cuLaunchKernel (kernelParams)",
       [&] {
         cu(raw.d.LaunchKernel(raw_fn, 1, 1, 1, 32, 1, 1, 0, raw_stream, raw_params, nullptr),
            "cuLaunchKernel");
       },
       raw_sync,
       {}},
      {"raw cuCtxGetCurrent + cuLaunchKernel",
       [&] {
         CUcontext current;
         cu(raw.d.CtxGetCurrent(&current), "cuCtxGetCurrent");
         cu(raw.d.LaunchKernel(raw_fn, 1, 1, 1, 32, 1, 1, 0, raw_stream, raw_params, nullptr),
            "cuLaunchKernel");
       },
       raw_sync,
       {}},
      {"raw cuLaunchKernel (extra buffer)",
       [&] {
         cu(raw.d.LaunchKernel(raw_fn, 1, 1, 1, 32, 1, 1, 0, raw_stream, nullptr, raw_extra),
            "cuLaunchKernel");
       },
       raw_sync,
       {}},
      {"sparkrt KernelLaunch (buffer mode)",
       [&] { ok(launch_builder(*dev, kernel, stream), "launch"); },
       sp_sync,
       {}},
      {"sparkrt KernelLaunch (pointers mode)",
       [&] { ok(launch_builder(*dev_ptrs, kernel_ptrs, stream_ptrs), "launch"); },
       sp_sync_ptrs,
       {}},
      {"sparkrt prebuilt launch (buffer mode)",
       [&] { ok(prebuilt.launch(stream), "launch"); },
       sp_sync,
       {}},
      {"sparkrt C API sparkrt_launch (buffer mode)",
       [&] { c_ok(sparkrt_launch(c_kernel, &c_config, c_args, 10), "sparkrt_launch"); },
       [&] { c_ok(sparkrt_stream_synchronize(c_dev, c_stream), "sparkrt_stream_synchronize"); },
       {}},
  };
  // Warm-up, then interleaved batches so drift hits every variant alike.
  for (auto& v : variants) {
    for (int i = 0; i < args.batch; ++i) v.launch();
    v.sync();
  }
  for (int rep = 0; rep < args.reps; ++rep) {
    for (auto& v : variants) {
      // Every variant starts on an idle device: no earlier batch, of any
      // stream, still running.
      cu(raw.d.CtxSynchronize(), "cuCtxSynchronize");
      const uint64_t allocs_before = g_allocations.load();
      const auto start = Clock::now();
      for (int i = 0; i < args.batch; ++i) v.launch();
      const double s = seconds_since(start);
      v.allocations += g_allocations.load() - allocs_before;
      v.per_launch_us.push_back(s * 1e6 / args.batch);
    }
  }
  for (auto& v : variants) v.sync();
  const double raw_us = median(variants[0].per_launch_us);
  const double sparkrt_us = median(variants[3].per_launch_us);

  // ---- graph replay: 1000 launches captured, replayed as one ----
  constexpr int kGraphKernels = 1000;
  const auto* graphs = dev->extension_as<SparkrtGraphExtension>(SPARKRT_GRAPH_EXTENSION_NAME);
  if (graphs == nullptr) die("the cuda backend has no " SPARKRT_GRAPH_EXTENSION_NAME);
  auto gcheck = [&](SparkrtError* err, const char* what) {
    if (err == nullptr) return;
    const char* msg;
    size_t n;
    graphs->error_message(err, &msg, &n);
    die(std::string(what) + ": " + std::string(msg, n));
  };
  SparkrtGraphCaptureArgs begin{SPARKRT_GRAPH_CAPTURE_ARGS_SIZE, dev->native_handle(),
                                stream.handle};
  gcheck(graphs->begin_capture(&begin), "begin_capture");
  for (int i = 0; i < kGraphKernels; ++i) ok(prebuilt.launch(stream), "launch while capturing");
  SparkrtGraphEndCaptureArgs end{SPARKRT_GRAPH_END_CAPTURE_ARGS_SIZE, dev->native_handle(),
                                 stream.handle, 0, 0};
  gcheck(graphs->end_capture(&end), "end_capture");
  SparkrtGraphLaunchArgs replay{SPARKRT_GRAPH_LAUNCH_ARGS_SIZE, dev->native_handle(), end.graph,
                                stream.handle};

  CUgraphExec raw_exec;
  {
    cu(raw.d.StreamBeginCapture(raw_stream, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL),
       "cuStreamBeginCapture");
    for (int i = 0; i < kGraphKernels; ++i)
      cu(raw.d.LaunchKernel(raw_fn, 1, 1, 1, 32, 1, 1, 0, raw_stream, raw_params, nullptr),
         "cuLaunchKernel");
    CUgraph g;
    cu(raw.d.StreamEndCapture(raw_stream, &g), "cuStreamEndCapture");
    cu(raw.d.GraphInstantiate(&raw_exec, g, 0), "cuGraphInstantiate");
    cu(raw.d.GraphDestroy(g), "cuGraphDestroy");
  }
  const sparkrt::Event ev0 = ok(dev->create_event(), "event"),
                       ev1 = ok(dev->create_event(), "event");
  CUevent rev0, rev1;
  cu(raw.d.EventCreate(&rev0, CU_EVENT_DEFAULT), "cuEventCreate");
  cu(raw.d.EventCreate(&rev1, CU_EVENT_DEFAULT), "cuEventCreate");
  std::vector<double> graph_sparkrt_us, graph_raw_us, graph_submit_sparkrt_us, graph_submit_raw_us;
  for (int rep = 0; rep < 3 + args.reps; ++rep) {
    ok(dev->record_event(ev0, stream), "record");
    auto start = Clock::now();
    gcheck(graphs->launch(&replay), "graph launch");
    const double submit = seconds_since(start);
    ok(dev->record_event(ev1, stream), "record");
    ok(dev->synchronize_event(ev1), "event sync");
    const float ms = ok(dev->elapsed_ms(ev0, ev1), "elapsed");

    cu(raw.d.EventRecord(rev0, raw_stream), "cuEventRecord");
    start = Clock::now();
    cu(raw.d.GraphLaunch(raw_exec, raw_stream), "cuGraphLaunch");
    const double raw_submit = seconds_since(start);
    cu(raw.d.EventRecord(rev1, raw_stream), "cuEventRecord");
    cu(raw.d.EventSynchronize(rev1), "cuEventSynchronize");
    float raw_ms = 0;
    cu(raw.d.EventElapsedTime(&raw_ms, rev0, rev1), "cuEventElapsedTime");
    if (rep < 3) continue;  // warm-up
    graph_sparkrt_us.push_back(ms * 1e3 / kGraphKernels);
    graph_raw_us.push_back(raw_ms * 1e3 / kGraphKernels);
    graph_submit_sparkrt_us.push_back(submit * 1e6);
    graph_submit_raw_us.push_back(raw_submit * 1e6);
  }

  // ---- bandwidth ----
  const size_t h_bytes = size_t{256} << 20, d_bytes = size_t{1} << 30;
  void* host = ok(dev->alloc_host(h_bytes), "alloc_host");
  std::memset(host, 0x5A, h_bytes);
  const sparkrt::DevicePtr src = ok(dev->alloc(d_bytes), "alloc src");
  const sparkrt::DevicePtr dst = ok(dev->alloc(d_bytes), "alloc dst");
  ok(dev->memset(src, 0x3C, d_bytes), "memset");
  ok(dev->memset(dst, 0, d_bytes), "memset");
  struct Bw {
    const char* name;
    double bytes;  // counted bytes per op
    std::function<void()> sparkrt_op, raw_op;
    std::vector<double> sp, rw;
  };
  std::vector<Bw> bws = {
      {"H2D 256 MiB (pinned)",
       double(h_bytes),
       [&] { ok(dev->copy_h2d(host, dst, h_bytes), "copy_h2d"); },
       [&] { cu(raw.MemcpyHtoD(dst.addr, host, h_bytes), "cuMemcpyHtoD"); },
       {},
       {}},
      {"D2H 256 MiB (pinned)",
       double(h_bytes),
       [&] { ok(dev->copy_d2h(src, host, h_bytes), "copy_d2h"); },
       [&] { cu(raw.MemcpyDtoH(host, src.addr, h_bytes), "cuMemcpyDtoH"); },
       {},
       {}},
      {"D2D 1 GiB (read+write bytes)",
       2.0 * d_bytes,
       [&] { ok(dev->copy_d2d(src, dst, d_bytes), "copy_d2d"); },
       [&] {
         cu(raw.MemcpyDtoD(dst.addr, src.addr, d_bytes), "cuMemcpyDtoD");
         cu(raw.d.CtxSynchronize(), "cuCtxSynchronize");  // cuMemcpyDtoD returns early
       },
       {},
       {}},
  };
  const int bw_reps = std::max(5, args.reps / 3);
  for (auto& bw : bws) {
    bw.sparkrt_op();  // warm-up
    bw.raw_op();
    for (int r = 0; r < bw_reps; ++r) {
      auto start = Clock::now();
      bw.raw_op();
      bw.rw.push_back(bw.bytes / seconds_since(start) / 1e9);
      start = Clock::now();
      bw.sparkrt_op();
      bw.sp.push_back(bw.bytes / seconds_since(start) / 1e9);
    }
  }

  // ---- report ----
  std::printf("\nsparkrt CUDA backend on %s (%s, driver CUDA %d.%d), batch %d x %d reps\n\n",
              props.name.c_str(), props.architecture.c_str(), driver_version / 1000,
              driver_version % 1000 / 10, args.batch, args.reps);
  std::printf("%-42s %10s %10s %8s %8s\n", "launch submit (empty_10_args)", "median us", "min us",
              "vs raw", "allocs");
  for (const auto& v : variants) {
    const double us = median(v.per_launch_us);
    std::printf("%-42s %10.3f %10.3f %8.3f %8.3f\n", v.name, us,
                *std::min_element(v.per_launch_us.begin(), v.per_launch_us.end()), us / raw_us,
                double(v.allocations) / (double(args.batch) * args.reps));
  }
  const double ratio = sparkrt_us / raw_us;
  std::printf("=> sparkrt/raw submit ratio %.3f (goal <= 1.05): %s\n", ratio,
              ratio <= 1.05 ? "met" : "NOT met");
  const double c_ratio = median(variants[6].per_launch_us) / sparkrt_us;
  std::printf("=> C API/KernelLaunch submit ratio %.3f (goal <= 1.05): %s\n\n", c_ratio,
              c_ratio <= 1.05 ? "met" : "NOT met");

  std::printf("%-42s %12s %12s\n", "graph replay, 1000 kernels", "us/kernel", "submit us");
  std::printf("%-42s %12.3f %12.2f\n", "sparkrt.graph.v1", median(graph_sparkrt_us),
              median(graph_submit_sparkrt_us));
  std::printf("%-42s %12.3f %12.2f\n\n", "raw cuGraphLaunch", median(graph_raw_us),
              median(graph_submit_raw_us));

  std::printf("%-42s %12s\n", "module load (vector_ops)", "ms");
  std::printf("%-42s %12.3f\n", "sparkrt first kernel() (find+parse+load)",
              sparkrt_first_lookup * 1e3);
  std::printf("%-42s %12.3f\n", "sparkrt kernel() cached", sparkrt_cached_lookup * 1e3);
  std::printf("%-42s %12.3f\n", "sparkrt kernel() on a second device", sparkrt_second_device * 1e3);
  std::printf("%-42s %12.3f\n", "raw PTX JIT, empty cache (cold)", ptx_cold * 1e3);
  std::printf("%-42s %12.3f\n", "raw PTX, compute-cache hit (warm)", ptx_warm * 1e3);
  std::printf("%-42s %12.3f\n\n", "raw cubin load", cubin_load * 1e3);

  std::printf("%-42s %10s %10s %8s\n", "bandwidth (median)", "raw GB/s", "sparkrt", "ratio");
  bool bw_met = true;
  for (const auto& bw : bws) {
    const double r = median(bw.rw), s = median(bw.sp);
    bw_met = bw_met && s / r >= 0.97;
    std::printf("%-42s %10.1f %10.1f %8.3f\n", bw.name, r, s, s / r);
  }
  std::printf("=> bandwidth goal (>= 0.97 of raw): %s\n", bw_met ? "met" : "NOT met");

  json.num("launch_batch", args.batch);
  json.num("launch_reps", args.reps);
  const char* keys[] = {"raw_params",     "raw_get_current",  "raw_extra",
                        "sparkrt_buffer", "sparkrt_pointers", "sparkrt_prebuilt",
                        "sparkrt_c_api"};
  for (size_t i = 0; i < variants.size(); ++i) {
    json.num(std::string("launch_us_") + keys[i], median(variants[i].per_launch_us));
    json.num(std::string("launch_us_min_") + keys[i],
             *std::min_element(variants[i].per_launch_us.begin(), variants[i].per_launch_us.end()));
    json.num(std::string("allocs_per_launch_") + keys[i],
             double(variants[i].allocations) / (double(args.batch) * args.reps));
  }
  json.num("launch_ratio_sparkrt_vs_raw", ratio);
  json.num("launch_ratio_pointers_vs_raw", median(variants[4].per_launch_us) / raw_us);
  json.num("launch_ratio_c_api_vs_kernel_launch", c_ratio);
  json.num("graph_us_per_kernel_sparkrt", median(graph_sparkrt_us));
  json.num("graph_us_per_kernel_raw", median(graph_raw_us));
  json.num("graph_submit_us_sparkrt", median(graph_submit_sparkrt_us));
  json.num("graph_submit_us_raw", median(graph_submit_raw_us));
  json.num("module_ms_sparkrt_first_lookup", sparkrt_first_lookup * 1e3);
  json.num("module_ms_sparkrt_cached_lookup", sparkrt_cached_lookup * 1e3);
  json.num("module_ms_sparkrt_second_device", sparkrt_second_device * 1e3);
  json.num("module_ms_raw_ptx_cold", ptx_cold * 1e3);
  json.num("module_ms_raw_ptx_warm", ptx_warm * 1e3);
  json.num("module_ms_raw_cubin", cubin_load * 1e3);
  const char* bw_keys[] = {"h2d", "d2h", "d2d"};
  for (size_t i = 0; i < bws.size(); ++i) {
    json.num(std::string("bw_gbs_raw_") + bw_keys[i], median(bws[i].rw));
    json.num(std::string("bw_gbs_sparkrt_") + bw_keys[i], median(bws[i].sp));
    json.num(std::string("bw_ratio_") + bw_keys[i], median(bws[i].sp) / median(bws[i].rw));
  }
  if (!args.json.empty()) {
    FILE* out = std::fopen(args.json.c_str(), "w");
    if (out == nullptr) die("cannot write " + args.json);
    const std::string text = json.done();
    std::fwrite(text.data(), 1, text.size(), out);
    std::fclose(out);
  }

  // Orderly teardown.
  SparkrtGraphDestroyArgs gd{SPARKRT_GRAPH_DESTROY_ARGS_SIZE, dev->native_handle(), end.graph};
  gcheck(graphs->destroy(&gd), "graph destroy");
  cu(raw.d.GraphExecDestroy(raw_exec), "cuGraphExecDestroy");
  cu(raw.d.EventDestroy(rev0), "cuEventDestroy");
  cu(raw.d.EventDestroy(rev1), "cuEventDestroy");
  cu(raw.d.StreamDestroy(raw_stream), "cuStreamDestroy");
  cu(raw.d.ModuleUnload(raw_module), "cuModuleUnload");
  ok(dev->free_host(host), "free_host");
  c_ok(sparkrt_stream_destroy(c_dev, c_stream), "sparkrt_stream_destroy");
  c_ok(sparkrt_device_close(c_dev), "sparkrt_device_close");
  ok(dev_ptrs->close(), "close");
  ok(dev->close(), "close");
  cu(raw.d.DevicePrimaryCtxRelease(cudev), "cuDevicePrimaryCtxRelease");
  std::filesystem::remove_all(cache_dir);
  return 0;
}
