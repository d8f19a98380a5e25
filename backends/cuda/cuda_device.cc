// CudaDevice: context, properties, memory, copies, streams and events.
#include "cuda_device.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "cuda_collectives.h"
#include "sparkrt/abi_names.h"

namespace sparkrt::cuda {
namespace {

bool env_is(const char* name, const char* value) {
  const char* v = std::getenv(name);
  return v != nullptr && std::strcmp(v, value) == 0;
}

// SPARKRT_CUDA_SHARED_MEMORY_OPTIN=<bytes>: report (and so allow) less
// opt-in shared memory per block than the device has, to run the geometry
// ops choose on a smaller part (101376 for a GB10) on this one.
absl::Status read_shared_optin(uint32_t& out) {
  const char* v = std::getenv("SPARKRT_CUDA_SHARED_MEMORY_OPTIN");
  if (v == nullptr || v[0] == '\0') return absl::OkStatus();
  if (!absl::SimpleAtoi(v, &out) || out < 48 * 1024) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "SPARKRT_CUDA_SHARED_MEMORY_OPTIN='%s' is not a byte count of at least 49152 (the "
        "shared memory every block may use); unset it to report the device's own limit",
        v));
  }
  return absl::OkStatus();
}

std::string hex(uint64_t v) { return absl::StrFormat("0x%x", v); }

// The open devices, compared by address only (never dereferenced here).
std::mutex g_open_mu;
absl::flat_hash_set<const void*>& open_devices() {
  static auto* set = new absl::flat_hash_set<const void*>;  // outlives every device
  return *set;
}

}  // namespace

bool CudaDevice::is_open(const SparkrtDevice* handle) {
  if (handle == nullptr) return false;
  std::lock_guard<std::mutex> lock(g_open_mu);
  return open_devices().contains(handle);
}

CudaDevice::CudaDevice(int index, CUdevice device, CUcontext context, Options options)
    : index_(index), device_(device), context_(context), options_(options) {}

absl::StatusOr<std::unique_ptr<CudaDevice>> CudaDevice::open(int index) {
  auto loaded = load_driver();
  if (!loaded.ok()) return loaded.status();
  const CudaDriver& d = **loaded;
  Options options;
  SPARKRT_RETURN_IF_ERROR(read_shared_optin(options.shared_optin));

  int count = 0;
  SPARKRT_RETURN_IF_ERROR(check(d.DeviceGetCount(&count), "cuDeviceGetCount"));
  if (index < 0 || index >= count) {
    const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
    return absl::OutOfRangeError(absl::StrFormat(
        "CUDA device index %d out of range: %d device%s visible%s; set SPARKRT_DEVICE to 0..%d",
        index, count, count == 1 ? "" : "s",
        visible ? absl::StrFormat(" (CUDA_VISIBLE_DEVICES=\"%s\")", visible) : std::string(),
        count - 1));
  }
  CUdevice dev = 0;
  SPARKRT_RETURN_IF_ERROR(check(d.DeviceGet(&dev, index), "cuDeviceGet"));
  CUcontext ctx = nullptr;
  SPARKRT_RETURN_IF_ERROR(check(d.DevicePrimaryCtxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain",
                                absl::StrFormat("CUDA device %d", index)));

  options.sync_launches = env_is("SPARKRT_SYNC_LAUNCHES", "1");
  options.use_pool = !env_is("SPARKRT_CUDA_MEMPOOL", "0");
  options.param_pointers = env_is("SPARKRT_CUDA_LAUNCH_PARAMS", "pointers");
  // From here on the destructor releases the context.
  std::unique_ptr<CudaDevice> device(new CudaDevice(index, dev, ctx, options));
  SPARKRT_RETURN_IF_ERROR(device->make_current());
  SPARKRT_RETURN_IF_ERROR(device->query_properties());
  {
    // The handle the SDK adapter gives out: the sdk::Device base's address.
    std::lock_guard<std::mutex> lock(g_open_mu);
    open_devices().insert(static_cast<const sdk::Device*>(device.get()));
  }
  return device;
}

absl::Status CudaDevice::query_properties() {
  const CudaDriver& d = driver();
  SPARKRT_RETURN_IF_ERROR(check(d.DriverGetVersion(&driver_version_), "cuDriverGetVersion"));

  char name[256] = {};
  SPARKRT_RETURN_IF_ERROR(SPARKRT_CU(DeviceGetName, name, sizeof(name) - 1, device_));
  name_ = name;
  size_t total = 0;
  SPARKRT_RETURN_IF_ERROR(SPARKRT_CU(DeviceTotalMem, &total, device_));

  auto attr = [&](CUdevice_attribute a, uint32_t& out) -> absl::Status {
    int v = 0;
    SPARKRT_RETURN_IF_ERROR(check(d.DeviceGetAttribute(&v, a, device_), "cuDeviceGetAttribute",
                                  absl::StrFormat("attribute %d", static_cast<int>(a))));
    out = static_cast<uint32_t>(v);
    return absl::OkStatus();
  };
  SparkrtDeviceProperties& p = props_;
  p.struct_size = sizeof(p);
  std::snprintf(p.name, sizeof(p.name), "%s", name);
  std::snprintf(p.driver, sizeof(p.driver), "CUDA driver API %d.%d", driver_version_ / 1000,
                driver_version_ % 1000 / 10);
  p.total_memory = total;
  SPARKRT_RETURN_IF_ERROR(attr(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, p.multiprocessor_count));
  SPARKRT_RETURN_IF_ERROR(attr(CU_DEVICE_ATTRIBUTE_WARP_SIZE, p.warp_size));
  SPARKRT_RETURN_IF_ERROR(attr(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK, p.max_threads_per_block));
  SPARKRT_RETURN_IF_ERROR(attr(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X, p.max_block_dim[0]));
  SPARKRT_RETURN_IF_ERROR(attr(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y, p.max_block_dim[1]));
  SPARKRT_RETURN_IF_ERROR(attr(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z, p.max_block_dim[2]));
  SPARKRT_RETURN_IF_ERROR(attr(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X, p.max_grid_dim[0]));
  SPARKRT_RETURN_IF_ERROR(attr(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y, p.max_grid_dim[1]));
  SPARKRT_RETURN_IF_ERROR(attr(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z, p.max_grid_dim[2]));
  SPARKRT_RETURN_IF_ERROR(
      attr(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK, p.max_shared_memory_per_block));
  SPARKRT_RETURN_IF_ERROR(attr(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN,
                               p.max_shared_memory_per_block_optin));
  if (options_.shared_optin != 0) {
    if (options_.shared_optin > p.max_shared_memory_per_block_optin) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "SPARKRT_CUDA_SHARED_MEMORY_OPTIN=%d is more than CUDA device %d (%s) allows per "
          "block (%d bytes); it can only lower the limit",
          options_.shared_optin, index_, name, p.max_shared_memory_per_block_optin));
    }
    p.max_shared_memory_per_block_optin = options_.shared_optin;
  }
  SPARKRT_RETURN_IF_ERROR(
      attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, p.compute_capability_major));
  SPARKRT_RETURN_IF_ERROR(
      attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, p.compute_capability_minor));
  std::snprintf(p.architecture, sizeof(p.architecture), "sm_%u%u", p.compute_capability_major,
                p.compute_capability_minor);
  p.image_formats = (1u << SPARKRT_IMAGE_PTX) | (1u << SPARKRT_IMAGE_CUBIN);

  // Launch attributes need cuLaunchKernelEx. A driver that does not know the
  // cluster attribute answers an error: no clusters, then.
  if (d.LaunchKernelEx != nullptr) {
    int clusters = 0;
    if (d.DeviceGetAttribute(&clusters, CU_DEVICE_ATTRIBUTE_CLUSTER_LAUNCH, device_) !=
        CUDA_SUCCESS)
      clusters = 0;
    p.supports_clusters = clusters != 0 ? 1 : 0;
    // 8 blocks is the portable cluster size; more needs a per-kernel opt-in.
    p.max_cluster_size = clusters != 0 ? 8 : 0;
    // Programmatic dependent launch came with Hopper (sm_90).
    p.supports_dependent_launch = p.compute_capability_major >= 9 ? 1 : 0;
  }

  uint32_t pools_supported = 0;
  SPARKRT_RETURN_IF_ERROR(attr(CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED, pools_supported));
  if (options_.use_pool && pools_supported != 0 && d.MemPoolCreate != nullptr &&
      d.MemPoolDestroy != nullptr && d.MemPoolSetAttribute != nullptr &&
      d.MemAllocFromPoolAsync != nullptr && d.MemFreeAsync != nullptr) {
    CUmemPoolProps pool_props{};
    pool_props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    pool_props.handleTypes = CU_MEM_HANDLE_TYPE_NONE;
    pool_props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    pool_props.location.id = device_;
    SPARKRT_RETURN_IF_ERROR(SPARKRT_CU(MemPoolCreate, &pool_, &pool_props));
    // Keep freed memory in the pool instead of returning it to the driver at
    // every synchronisation: that is what makes alloc/free cheap.
    cuuint64_t keep = ~cuuint64_t{0};
    SPARKRT_RETURN_IF_ERROR(
        SPARKRT_CU(MemPoolSetAttribute, pool_, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &keep));
  }
  return absl::OkStatus();
}

CudaDevice::~CudaDevice() {
  {
    std::lock_guard<std::mutex> lock(g_open_mu);
    open_devices().erase(static_cast<const sdk::Device*>(this));
  }
  // Destroy paths report nothing: there is no one left to tell.
  const CudaDriver& d = driver();
  // First, while the memory and streams they use still exist.
  release_communicators(this);
  if (make_current().ok()) {
    (void)d.CtxSynchronize();
    graphs_.drain([&](CUgraphExec g) { (void)d.GraphExecDestroy(g); });
    events_.drain([&](CUevent e) { (void)d.EventDestroy(e); });
    std::vector<CudaModule*> modules;
    std::map<SparkrtDevicePtr, uint64_t> allocations;
    absl::flat_hash_set<void*> host_allocations;
    {
      std::lock_guard<std::mutex> lock(mu_);
      modules.assign(modules_.begin(), modules_.end());
      modules_.clear();
      host_allocations.swap(host_allocations_);
    }
    {
      std::unique_lock lock(alloc_mu_);
      allocations.swap(allocations_);
    }
    for (CudaModule* m : modules) {
      m->release_from_device();
      delete m;
    }
    for (const auto& [ptr, bytes] : allocations) {
      if (pool_ != nullptr) {
        (void)d.MemFreeAsync(ptr, nullptr);
      } else {
        (void)d.MemFree(ptr);
      }
    }
    (void)d.CtxSynchronize();
    if (pool_ != nullptr) (void)d.MemPoolDestroy(pool_);
    for (void* p : host_allocations) (void)d.MemFreeHost(p);
    streams_.drain([&](CUstream s) { (void)d.StreamDestroy(s); });
  }
  (void)d.DevicePrimaryCtxRelease(device_);
  forget_current_context();  // the context may be gone now
}

absl::Status CudaDevice::properties(SparkrtDeviceProperties& out) {
  const size_t caller_size = out.struct_size;
  std::memcpy(&out, &props_, std::min(caller_size, sizeof(props_)));
  out.struct_size = caller_size;
  return absl::OkStatus();
}

absl::Status CudaDevice::unknown_handle(std::string_view what, uint64_t handle,
                                        std::string_view call) {
  return absl::InvalidArgumentError(absl::StrFormat(
      "%s: unknown %s handle %s: it was not created by this device or was already destroyed", call,
      what, hex(handle)));
}

// ---- memory -----------------------------------------------------------------

absl::StatusOr<SparkrtDevicePtr> CudaDevice::alloc(uint64_t bytes) {
  if (bytes == 0) return absl::InvalidArgumentError("mem_alloc: size must be > 0 bytes");
  if (bytes > props_.total_memory) {
    return absl::ResourceExhaustedError(
        absl::StrFormat("mem_alloc(%u bytes): more than the %u bytes of memory %s has", bytes,
                        props_.total_memory, name_));
  }
  SPARKRT_RETURN_IF_ERROR(make_current());
  CUdeviceptr ptr = 0;
  const std::string context = absl::StrFormat("mem_alloc(%u bytes) on %s", bytes, name_);
  if (pool_ != nullptr) {
    // Ordered on the legacy default stream, which every stream this device
    // creates synchronises with: the memory is ready for any later work.
    SPARKRT_RETURN_IF_ERROR(check(driver().MemAllocFromPoolAsync(&ptr, bytes, pool_, nullptr),
                                  "cuMemAllocFromPoolAsync", context));
  } else {
    SPARKRT_RETURN_IF_ERROR(check(driver().MemAlloc(&ptr, bytes), "cuMemAlloc", context));
  }
  std::unique_lock lock(alloc_mu_);
  allocations_[ptr] = bytes;
  return ptr;
}

absl::Status CudaDevice::free(SparkrtDevicePtr ptr) {
  {
    std::unique_lock lock(alloc_mu_);
    if (allocations_.erase(ptr) == 0) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "mem_free(%s): not an allocation of this device (never allocated, already freed, or "
          "not the start of the allocation)",
          hex(ptr)));
    }
  }
  SPARKRT_RETURN_IF_ERROR(make_current());
  if (pool_ != nullptr) {
    // Ordered after all work queued so far on the default stream and, through
    // it, on every blocking stream: kernels still reading the memory finish
    // before the pool reuses it.
    return check(driver().MemFreeAsync(ptr, nullptr), "cuMemFreeAsync",
                 absl::StrFormat("mem_free(%s)", hex(ptr)));
  }
  return check(driver().MemFree(ptr), "cuMemFree", absl::StrFormat("mem_free(%s)", hex(ptr)));
}

absl::Status CudaDevice::check_range(SparkrtDevicePtr ptr, uint64_t bytes, const char* role) const {
  {
    std::shared_lock lock(alloc_mu_);
    auto it = allocations_.upper_bound(ptr);
    if (it != allocations_.begin()) {
      --it;
      const uint64_t base = it->first, size = it->second;
      if (ptr - base < size) {
        if (bytes <= size - (ptr - base)) [[likely]]
          return absl::OkStatus();
        return absl::OutOfRangeError(absl::StrFormat(
            "%s range %s + %u bytes runs %u bytes past the end of its allocation (base %s, %u "
            "bytes)",
            role, hex(ptr), bytes, bytes - (size - (ptr - base)), hex(base), size));
      }
    }
  }
  // Not ours: accept memory the driver knows (allocated outside sparkrt),
  // refuse anything else before the copy engine can fault on it.
  CUdeviceptr start = 0;
  size_t size = 0;
  const CudaDriver& d = driver();
  if (d.PointerGetAttribute(&start, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, ptr) == CUDA_SUCCESS &&
      d.PointerGetAttribute(&size, CU_POINTER_ATTRIBUTE_RANGE_SIZE, ptr) == CUDA_SUCCESS &&
      ptr - start < size && bytes <= size - (ptr - start)) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrFormat(
      "%s %s (%u bytes) is not device memory of this device: not inside a live allocation "
      "(freed, never allocated, or from another device)",
      role, hex(ptr), bytes));
}

absl::StatusOr<void*> CudaDevice::host_alloc(uint64_t bytes) {
  if (bytes == 0) return absl::InvalidArgumentError("host_alloc: size must be > 0 bytes");
  SPARKRT_RETURN_IF_ERROR(make_current());
  void* p = nullptr;
  // PORTABLE: page-locked for every context, not only this device's.
  SPARKRT_RETURN_IF_ERROR(check(driver().MemHostAlloc(&p, bytes, CU_MEMHOSTALLOC_PORTABLE),
                                "cuMemHostAlloc", absl::StrFormat("host_alloc(%u bytes)", bytes)));
  std::lock_guard<std::mutex> lock(mu_);
  host_allocations_.insert(p);
  return p;
}

absl::Status CudaDevice::host_free(void* ptr) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (host_allocations_.erase(ptr) == 0) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "host_free(%p): not host memory from this device's host_alloc, or already freed", ptr));
    }
  }
  SPARKRT_RETURN_IF_ERROR(make_current());
  return check(driver().MemFreeHost(ptr), "cuMemFreeHost");
}

absl::Status CudaDevice::memset(SparkrtDevicePtr dst, uint8_t value, uint64_t bytes,
                                SparkrtStream stream_handle, bool blocking) {
  auto s = stream(stream_handle, "memset");
  if (!s.ok()) return s.status();
  if (bytes == 0) return absl::OkStatus();
  SPARKRT_RETURN_IF_ERROR(make_current());
  if (absl::Status r = check_range(dst, bytes, "memset destination"); !r.ok())
    return absl::Status(r.code(), absl::StrCat("memset: ", r.message()));
  const auto context = [&] {
    return absl::StrFormat("memset(%s, 0x%02x, %u bytes, stream %s)", hex(dst), value, bytes,
                           hex(stream_handle));
  };
  // Device memsets are asynchronous to the host even in their "blocking"
  // form, so blocking means: queue, then wait for the stream.
  if (CUresult r = driver().MemsetD8Async(dst, value, bytes, *s); r != CUDA_SUCCESS)
    return driver_error(r, "cuMemsetD8Async", context());
  if (blocking) {
    if (CUresult r = driver().StreamSynchronize(*s); r != CUDA_SUCCESS)
      return driver_error(r, "cuStreamSynchronize", context());
  }
  return absl::OkStatus();
}

absl::Status CudaDevice::enqueue_copy(const SparkrtMemcpyArgs& c, CUstream s) {
  const CudaDriver& d = driver();
  switch (c.kind) {
    case SPARKRT_COPY_H2D:
      return check(d.MemcpyHtoDAsync(c.dst_device, c.src_host, c.bytes, s), "cuMemcpyHtoDAsync");
    case SPARKRT_COPY_D2H:
      return check(d.MemcpyDtoHAsync(c.dst_host, c.src_device, c.bytes, s), "cuMemcpyDtoHAsync");
    case SPARKRT_COPY_D2D:
      return check(d.MemcpyDtoDAsync(c.dst_device, c.src_device, c.bytes, s), "cuMemcpyDtoDAsync");
  }
  return absl::InvalidArgumentError(
      absl::StrFormat("memcpy: unknown copy kind %d", static_cast<int>(c.kind)));
}

absl::Status CudaDevice::memcpy(const SparkrtMemcpyArgs& c) {
  auto s = stream(c.stream, "memcpy");
  if (!s.ok()) return s.status();
  if (c.kind != SPARKRT_COPY_H2D && c.kind != SPARKRT_COPY_D2H && c.kind != SPARKRT_COPY_D2D)
    return absl::InvalidArgumentError(
        absl::StrFormat("memcpy: unknown copy kind %d", static_cast<int>(c.kind)));
  if (c.bytes == 0) return absl::OkStatus();
  if ((c.kind == SPARKRT_COPY_H2D && c.src_host == nullptr) ||
      (c.kind == SPARKRT_COPY_D2H && c.dst_host == nullptr)) {
    return absl::InvalidArgumentError(absl::StrFormat("memcpy %s of %u bytes: null host pointer",
                                                      abi_copy_kind_name(c.kind), c.bytes));
  }
  SPARKRT_RETURN_IF_ERROR(make_current());
  absl::Status range = absl::OkStatus();
  if (c.kind != SPARKRT_COPY_D2H) range = check_range(c.dst_device, c.bytes, "destination");
  if (range.ok() && c.kind != SPARKRT_COPY_H2D)
    range = check_range(c.src_device, c.bytes, "source");
  if (!range.ok()) {
    return absl::Status(
        range.code(), absl::StrFormat("memcpy %s of %u bytes: %s", abi_copy_kind_name(c.kind), c.bytes,
                                      range.message()));
  }
  // Queue on the stream, then wait when blocking: the driver's synchronous
  // copies return before the data has landed in some cases (pageable H2D,
  // D2D), and "blocking" here promises it has.
  absl::Status st = enqueue_copy(c, *s);
  if (st.ok() && c.blocking) st = SPARKRT_CU(StreamSynchronize, *s);
  if (!st.ok()) [[unlikely]] {
    const uint64_t dst =
        c.kind == SPARKRT_COPY_D2H ? reinterpret_cast<uintptr_t>(c.dst_host) : c.dst_device;
    const uint64_t src =
        c.kind == SPARKRT_COPY_H2D ? reinterpret_cast<uintptr_t>(c.src_host) : c.src_device;
    return absl::Status(
        st.code(), absl::StrFormat("memcpy %s %s -> %s, %u bytes, stream %s%s: %s",
                                   abi_copy_kind_name(c.kind), hex(src), hex(dst), c.bytes,
                                   hex(c.stream), c.blocking ? " (blocking)" : "", st.message()));
  }
  return absl::OkStatus();
}

// ---- streams and events -------------------------------------------------------

absl::StatusOr<SparkrtStream> CudaDevice::create_stream() {
  SPARKRT_RETURN_IF_ERROR(make_current());
  CUstream s = nullptr;
  // Blocking streams (CU_STREAM_DEFAULT) synchronise with the default stream,
  // as CUDA programmers expect; the stream-ordered allocator relies on it.
  SPARKRT_RETURN_IF_ERROR(SPARKRT_CU(StreamCreate, &s, CU_STREAM_DEFAULT));
  auto handle = streams_.insert(s);
  if (!handle) {
    (void)driver().StreamDestroy(s);
    return absl::ResourceExhaustedError(absl::StrFormat(
        "stream_create: %u streams already exist on this device; destroy unused ones",
        HandleTable<CUstream>::kCapacity));
  }
  return *handle;
}

absl::Status CudaDevice::destroy_stream(SparkrtStream handle) {
  if (handle == 0)
    return absl::InvalidArgumentError("stream_destroy: the default stream (0) cannot be destroyed");
  CUstream s = streams_.remove(handle);
  if (s == nullptr) return unknown_handle("stream", handle, "stream_destroy");
  SPARKRT_RETURN_IF_ERROR(make_current());
  return SPARKRT_CU(StreamDestroy, s);
}

absl::Status CudaDevice::synchronize(SparkrtStream handle) {
  auto s = stream(handle, "stream_synchronize");
  if (!s.ok()) return s.status();
  SPARKRT_RETURN_IF_ERROR(make_current());
  return check(driver().StreamSynchronize(*s), "cuStreamSynchronize",
               absl::StrFormat("stream_synchronize(%s)", hex(handle)));
}

absl::StatusOr<SparkrtEvent> CudaDevice::create_event() {
  SPARKRT_RETURN_IF_ERROR(make_current());
  CUevent e = nullptr;
  // Timing enabled: events exist here to measure elapsed time.
  SPARKRT_RETURN_IF_ERROR(SPARKRT_CU(EventCreate, &e, CU_EVENT_DEFAULT));
  auto handle = events_.insert(e);
  if (!handle) {
    (void)driver().EventDestroy(e);
    return absl::ResourceExhaustedError(
        absl::StrFormat("event_create: %u events already exist on this device; destroy unused ones",
                        HandleTable<CUevent>::kCapacity));
  }
  return *handle;
}

absl::Status CudaDevice::destroy_event(SparkrtEvent handle) {
  CUevent e = events_.remove(handle);
  if (e == nullptr) return unknown_handle("event", handle, "event_destroy");
  SPARKRT_RETURN_IF_ERROR(make_current());
  return SPARKRT_CU(EventDestroy, e);
}

absl::Status CudaDevice::record_event(SparkrtEvent handle, SparkrtStream stream_handle) {
  CUevent e = events_.lookup(handle);
  if (e == nullptr) return unknown_handle("event", handle, "event_record");
  auto s = stream(stream_handle, "event_record");
  if (!s.ok()) return s.status();
  SPARKRT_RETURN_IF_ERROR(make_current());
  return SPARKRT_CU(EventRecord, e, *s);
}

absl::Status CudaDevice::synchronize_event(SparkrtEvent handle) {
  CUevent e = events_.lookup(handle);
  if (e == nullptr) return unknown_handle("event", handle, "event_synchronize");
  SPARKRT_RETURN_IF_ERROR(make_current());
  return SPARKRT_CU(EventSynchronize, e);
}

absl::Status CudaDevice::wait_event(SparkrtStream stream_handle, SparkrtEvent handle) {
  CUevent e = events_.lookup(handle);
  if (e == nullptr) return unknown_handle("event", handle, "stream_wait_event");
  auto s = stream(stream_handle, "stream_wait_event");
  if (!s.ok()) return s.status();
  SPARKRT_RETURN_IF_ERROR(make_current());
  return SPARKRT_CU(StreamWaitEvent, *s, e, 0);
}

absl::StatusOr<float> CudaDevice::elapsed_ms(SparkrtEvent start, SparkrtEvent end) {
  CUevent a = events_.lookup(start);
  if (a == nullptr) return unknown_handle("event", start, "event_elapsed (start)");
  CUevent b = events_.lookup(end);
  if (b == nullptr) return unknown_handle("event", end, "event_elapsed (end)");
  SPARKRT_RETURN_IF_ERROR(make_current());
  float ms = 0;
  CUresult r = driver().EventElapsedTime(&ms, a, b);
  if (r == CUDA_ERROR_NOT_READY) {
    return absl::UnavailableError(
        "event_elapsed: an event has not completed yet; synchronize_event(end) first");
  }
  if (r == CUDA_ERROR_INVALID_HANDLE) {
    return absl::FailedPreconditionError(
        "event_elapsed: both events must have been recorded (event_record) before their elapsed "
        "time can be read");
  }
  SPARKRT_RETURN_IF_ERROR(check(r, "cuEventElapsedTime"));
  return ms;
}

}  // namespace sparkrt::cuda
