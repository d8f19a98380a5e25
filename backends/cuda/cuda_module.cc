// Modules, kernels and the launch path.
#include <algorithm>
#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "cuda_device.h"

namespace sparkrt::cuda {
namespace {

constexpr size_t kJitLogBytes = 16 * 1024;

constexpr char kElfMagic[] = {0x7f, 'E', 'L', 'F'};

const char* format_name(SparkrtImageFormat f) {
  switch (f) {
    case SPARKRT_IMAGE_PTX: return "PTX";
    case SPARKRT_IMAGE_CUBIN: return "cubin";
    case SPARKRT_IMAGE_SPIRV: return "SPIR-V";
    case SPARKRT_IMAGE_SIGNATURES: return "signatures";
  }
  return "unknown";
}

std::string trimmed(const std::string& log) {
  std::string s(log.c_str());  // the driver NUL-terminates inside the buffer
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

std::string geometry(const sdk::Launch& l) {
  return absl::StrFormat(
      "grid (%u,%u,%u), block (%u,%u,%u), %u B dynamic shared memory, stream 0x%x", l.grid[0],
      l.grid[1], l.grid[2], l.block[0], l.block[1], l.block[2], l.shared_memory_bytes, l.stream);
}

}  // namespace

// ---- modules ------------------------------------------------------------------

absl::StatusOr<std::unique_ptr<sdk::Module>> CudaDevice::load_module(
    std::string_view name, SparkrtImageFormat format, std::span<const std::byte> image) {
  const std::string what =
      absl::StrFormat("module_load(%s, %s, %u bytes)", name, format_name(format), image.size());
  if (image.empty()) return absl::InvalidArgumentError(what + ": empty image");

  std::string ptx;  // the NUL-terminated copy cuModuleLoadDataEx needs
  const void* data = image.data();
  switch (format) {
    case SPARKRT_IMAGE_PTX:
      ptx.assign(reinterpret_cast<const char*>(image.data()), image.size());
      if (ptx.find('\0') != std::string::npos) ptx.resize(ptx.find('\0'));
      data = ptx.c_str();
      break;
    case SPARKRT_IMAGE_CUBIN:
      // The driver reads the ELF header's sizes, not ours: refuse anything
      // that is not ELF rather than let it read past the buffer.
      if (image.size() < 64 || std::memcmp(image.data(), kElfMagic, sizeof(kElfMagic)) != 0)
        return absl::InvalidArgumentError(what + ": not a cubin (no ELF header)");
      break;
    default:
      return absl::InvalidArgumentError(
          absl::StrFormat("%s: image format %d is not one of PTX (1) or cubin (2)", what,
                          static_cast<int>(format)));
  }

  SPARKRT_RETURN_IF_ERROR(make_current());
  std::string error_log(kJitLogBytes, '\0');
  std::string info_log(kJitLogBytes, '\0');
  CUjit_option options[] = {CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES,
                            CU_JIT_INFO_LOG_BUFFER, CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES};
  void* values[] = {error_log.data(), reinterpret_cast<void*>(uintptr_t{kJitLogBytes - 1}),
                    info_log.data(), reinterpret_cast<void*>(uintptr_t{kJitLogBytes - 1})};
  CUmodule module = nullptr;
  CUresult r = driver().ModuleLoadDataEx(&module, data, 4, options, values);
  if (r != CUDA_SUCCESS) {
    std::string message =
        absl::StrFormat("%s on %s (%s, driver for CUDA %d.%d): ", what, name_, props_.architecture,
                        driver_version_ / 1000, driver_version_ % 1000 / 10);
    absl::StrAppend(&message, "cuModuleLoadDataEx failed: ", describe(r));
    const std::string log = trimmed(error_log);
    if (!log.empty()) absl::StrAppend(&message, "\nJIT log:\n", log);
    if (r == CUDA_ERROR_UNSUPPORTED_PTX_VERSION) {
      absl::StrAppend(&message,
                      "\nThe PTX is newer than this driver can compile: update the driver, or "
                      "provide a cubin for ",
                      props_.architecture);
    }
    return absl::Status(status_code(r), message);
  }
  auto m = std::make_unique<CudaModule>(this, std::string(name), format, module);
  std::lock_guard<std::mutex> lock(mu_);
  modules_.insert(m.get());
  return std::unique_ptr<sdk::Module>(std::move(m));
}

void CudaDevice::unregister_module(CudaModule* module) {
  std::lock_guard<std::mutex> lock(mu_);
  modules_.erase(module);
}

CudaModule::CudaModule(CudaDevice* device, std::string name, SparkrtImageFormat format,
                       CUmodule module)
    : device_(device), name_(std::move(name)), format_(format), module_(module) {}

std::string CudaModule::loaded_as() const {
  return format_ == SPARKRT_IMAGE_CUBIN
             ? absl::StrFormat("%s cubin", device_->architecture())
             : std::string("PTX, compiled by the driver's JIT");
}

CudaModule::~CudaModule() {
  if (registered_) device_->unregister_module(this);
  if (device_->make_current().ok()) (void)driver().ModuleUnload(module_);
}

void CudaModule::release_from_device() { registered_ = false; }

absl::StatusOr<sdk::Kernel*> CudaModule::get_kernel(std::string_view entry,
                                                    std::span<const SparkrtParamInfo> params) {
  const std::string what = absl::StrFormat("kernel_get(%s.%s)", name_, entry);
  std::lock_guard<std::mutex> lock(mu_);
  SPARKRT_RETURN_IF_ERROR(device_->make_current());
  const CudaDriver& d = driver();
  CUfunction f = nullptr;
  const std::string entry_str(entry);
  if (CUresult r = d.ModuleGetFunction(&f, module_, entry_str.c_str()); r != CUDA_SUCCESS) {
    if (r == CUDA_ERROR_NOT_FOUND) {
      return absl::NotFoundError(
          absl::StrFormat("%s: module %s has no entry %s (cuModuleGetFunction: %s)", what, name_,
                          entry, describe(r)));
    }
    return driver_error(r, "cuModuleGetFunction", what);
  }

  // The runtime's PTX parse and the driver must agree on the layout, or
  // launches would pass arguments at the wrong offsets.
  if (d.FuncGetParamInfo != nullptr) {
    size_t i = 0;
    for (;; ++i) {
      size_t offset = 0, size = 0;
      CUresult r = d.FuncGetParamInfo(f, i, &offset, &size);
      if (r == CUDA_ERROR_INVALID_VALUE) break;  // past the last parameter
      SPARKRT_RETURN_IF_ERROR(check(r, "cuFuncGetParamInfo", what));
      if (i >= params.size()) continue;  // count the rest, report below
      if (params[i].offset != offset || params[i].size != size) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "%s: parameter #%u is at offset %u, size %u in the PTX signature, but at offset %u, "
            "size %u in the loaded %s (cuFuncGetParamInfo); launches would place arguments "
            "where the kernel does not read them, so the entry is refused",
            what, i, params[i].offset, params[i].size, offset, size, loaded_as()));
      }
    }
    if (i != params.size()) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s: the PTX signature declares %u parameters, the loaded %s has %u "
          "(cuFuncGetParamInfo), so the entry is refused",
          what, params.size(), loaded_as(), i));
    }
  }

  if (auto it = kernels_.find(entry_str); it != kernels_.end()) return it->second.get();

  int static_shared = 0, max_dynamic = 0;
  SPARKRT_RETURN_IF_ERROR(
      check(d.FuncGetAttribute(&static_shared, CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, f),
            "cuFuncGetAttribute(SHARED_SIZE_BYTES)", what));
  SPARKRT_RETURN_IF_ERROR(
      check(d.FuncGetAttribute(&max_dynamic, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, f),
            "cuFuncGetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES)", what));
  auto kernel = std::make_unique<CudaKernel>(
      device_, absl::StrFormat("%s.%s", name_, entry), f,
      std::vector<SparkrtParamInfo>(params.begin(), params.end()),
      static_cast<uint32_t>(static_shared), static_cast<uint32_t>(max_dynamic));
  CudaKernel* k = kernel.get();
  kernels_.emplace(entry_str, std::move(kernel));
  return k;
}

// ---- kernels ------------------------------------------------------------------

CudaKernel::CudaKernel(CudaDevice* device, std::string name, CUfunction function,
                       std::vector<SparkrtParamInfo> params, uint32_t static_shared_bytes,
                       uint32_t max_dynamic_shared_bytes)
    : device_(device),
      name_(std::move(name)),
      function_(function),
      params_(std::move(params)),
      static_shared_bytes_(static_shared_bytes),
      dynamic_shared_limit_(max_dynamic_shared_bytes) {
  for (const SparkrtParamInfo& p : params_)
    params_size_ = std::max(params_size_, p.offset + p.size);
}

absl::Status CudaKernel::raise_dynamic_shared(uint32_t bytes) {
  std::lock_guard<std::mutex> lock(raise_mu_);
  if (bytes <= dynamic_shared_limit_.load(std::memory_order_relaxed)) return absl::OkStatus();
  // The driver would say the same, but only against the device's own limit;
  // this also holds a lowered one (SPARKRT_CUDA_SHARED_MEMORY_OPTIN).
  const uint32_t optin = device_->shared_memory_optin();
  if (uint64_t{bytes} + static_shared_bytes_ > optin) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "launch(%s) with %u B of dynamic shared memory: the kernel has %u B static and the device "
        "allows %u B per block in total; ask for at most %u B",
        name_, bytes, static_shared_bytes_, optin,
        optin > static_shared_bytes_ ? optin - static_shared_bytes_ : 0));
  }
  CUresult r = driver().FuncSetAttribute(function_, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                         static_cast<int>(bytes));
  if (r != CUDA_SUCCESS) {
    return driver_error(
        r, "cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES)",
        absl::StrFormat("launch(%s) with %u B of dynamic shared memory (the kernel has %u B "
                        "static; the device allows %u B per block in total)",
                        name_, bytes, static_shared_bytes_, device_->shared_memory_optin()));
  }
  dynamic_shared_limit_.store(bytes, std::memory_order_release);
  return absl::OkStatus();
}

// ---- launch -------------------------------------------------------------------

absl::Status CudaDevice::check_launch_shape(const CudaKernel& k, const sdk::Launch& l) const {
  if (k.device() != this) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "launch(%s): the kernel belongs to another device; resolve it on this one", k.name()));
  }
  if (l.arg_offsets.size() != k.num_params()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("launch(%s): %u arguments given, the kernel declares %u", k.name(),
                        l.arg_offsets.size(), k.num_params()));
  }
  return absl::InvalidArgumentError(
      absl::StrFormat("launch(%s): %u bytes of packed arguments given, the kernel declares %u",
                      k.name(), l.params.size(), k.params_size()));
}

absl::Status CudaDevice::launch_failed(CUresult result, const sdk::Launch& l,
                                       std::string_view call) const {
  const auto& k = static_cast<const CudaKernel&>(*l.kernel);
  return driver_error(result, call, absl::StrFormat("launch(%s, %s)", k.name(), geometry(l)));
}

absl::Status CudaDevice::launch_faulted(CUresult result, const sdk::Launch& l) const {
  const auto& k = static_cast<const CudaKernel&>(*l.kernel);
  return absl::Status(
      status_code(result),
      absl::StrFormat("launch(%s, %s): the kernel failed while running: %s (reported by "
                      "cuStreamSynchronize right after the launch, SPARKRT_SYNC_LAUNCHES=1)%s",
                      k.name(), geometry(l), describe(result),
                      status_code(result) == absl::StatusCode::kInternal
                          ? "; the CUDA context is now unusable: restart the process"
                          : ""));
}

namespace {

bool has_cluster(const sdk::Launch& l) {
  return (l.cluster[0] | l.cluster[1] | l.cluster[2]) != 0;
}

// Whether the launch goes through cuLaunchKernelEx: it asks for an attribute
// the device offers (launch() refused a cluster it does not). A dependent
// launch elsewhere runs as a plain one, which is always correct.
bool with_attributes(const sdk::Launch& l, const SparkrtDeviceProperties& props) {
  return has_cluster(l) ||
         ((l.flags & SPARKRT_LAUNCH_DEPENDENT) != 0 && props.supports_dependent_launch != 0);
}

}  // namespace

// A launch with attributes, through cuLaunchKernelEx (present: the device
// offers attributes only then).
CUresult CudaDevice::submit_with_attributes(const CudaKernel& k, const sdk::Launch& l,
                                            CUstream s) const {
  CUlaunchAttribute attrs[2] = {};
  unsigned int num_attrs = 0;
  if ((l.flags & SPARKRT_LAUNCH_DEPENDENT) != 0 && props_.supports_dependent_launch != 0) {
    attrs[num_attrs].id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
    attrs[num_attrs].value.programmaticStreamSerializationAllowed = 1;
    ++num_attrs;
  }
  if (has_cluster(l)) {
    attrs[num_attrs].id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
    attrs[num_attrs].value.clusterDim.x = l.cluster[0];
    attrs[num_attrs].value.clusterDim.y = l.cluster[1];
    attrs[num_attrs].value.clusterDim.z = l.cluster[2];
    ++num_attrs;
  }
  CUlaunchConfig config{};
  config.gridDimX = l.grid[0];
  config.gridDimY = l.grid[1];
  config.gridDimZ = l.grid[2];
  config.blockDimX = l.block[0];
  config.blockDimY = l.block[1];
  config.blockDimZ = l.block[2];
  config.sharedMemBytes = l.shared_memory_bytes;
  config.hStream = s;
  config.attrs = attrs;
  config.numAttrs = num_attrs;
  void* params = const_cast<std::byte*>(l.params.data());
  if (l.params.empty()) return driver().LaunchKernelEx(&config, k.function(), nullptr, nullptr);
  // The packed buffer as is: it already has the CUDA parameter layout.
  size_t size = l.params.size();
  void* extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, params, CU_LAUNCH_PARAM_BUFFER_SIZE, &size,
                   CU_LAUNCH_PARAM_END};
  return driver().LaunchKernelEx(&config, k.function(), nullptr, extra);
}

CUresult CudaDevice::submit(const CudaKernel& k, const sdk::Launch& l, CUstream s) const {
  if (with_attributes(l, props_)) [[unlikely]]
    return submit_with_attributes(k, l, s);
  void* params = const_cast<std::byte*>(l.params.data());
  if (l.params.empty()) {
    return driver().LaunchKernel(k.function(), l.grid[0], l.grid[1], l.grid[2], l.block[0],
                                 l.block[1], l.block[2], l.shared_memory_bytes, s, nullptr,
                                 nullptr);
  }
  if (options_.param_pointers && l.arg_offsets.size() <= 64) {
    // One pointer per argument into the packed buffer, on the stack.
    void* pointers[64];
    for (size_t i = 0; i < l.arg_offsets.size(); ++i)
      pointers[i] = static_cast<std::byte*>(params) + l.arg_offsets[i];
    return driver().LaunchKernel(k.function(), l.grid[0], l.grid[1], l.grid[2], l.block[0],
                                 l.block[1], l.block[2], l.shared_memory_bytes, s, pointers,
                                 nullptr);
  }
  // The packed buffer as is: it already has the CUDA parameter layout.
  size_t size = l.params.size();
  void* extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, params, CU_LAUNCH_PARAM_BUFFER_SIZE, &size,
                   CU_LAUNCH_PARAM_END};
  return driver().LaunchKernel(k.function(), l.grid[0], l.grid[1], l.grid[2], l.block[0],
                               l.block[1], l.block[2], l.shared_memory_bytes, s, nullptr, extra);
}

absl::Status CudaDevice::launch(const sdk::Launch& l) {
  auto& k = static_cast<CudaKernel&>(*l.kernel);
  if (k.device() != this || l.arg_offsets.size() != k.num_params() ||
      l.params.size() != k.params_size()) [[unlikely]]
    return check_launch_shape(k, l);
  if (has_cluster(l) && props_.supports_clusters == 0) [[unlikely]]
    return absl::UnimplementedError(absl::StrFormat(
        "launch(%s): CUDA device %d (%s) does not support thread-block clusters (cluster %d x %d "
        "x %d requested; needs sm_90 and a CUDA 12 driver)",
        k.name(), index_, name_, l.cluster[0], l.cluster[1], l.cluster[2]));

  CUstream s = nullptr;
  if (l.stream != 0) {
    s = streams_.lookup(l.stream);
    if (s == nullptr) [[unlikely]]
      return unknown_handle("stream", l.stream, absl::StrCat("launch(", k.name(), ")"));
  }
  SPARKRT_RETURN_IF_ERROR(make_current_cached());
  // The kernel's own ceiling, not 48 KiB: by default it is 48 KiB less the
  // kernel's static shared memory.
  if (l.shared_memory_bytes != 0)
    SPARKRT_RETURN_IF_ERROR(k.reserve_dynamic_shared(l.shared_memory_bytes));

  CUresult r = submit(k, l, s);
  if (r == CUDA_ERROR_INVALID_CONTEXT || r == CUDA_ERROR_INVALID_HANDLE ||
      r == CUDA_ERROR_CONTEXT_IS_DESTROYED) [[unlikely]] {
    // Perhaps someone else switched this thread's context: make ours
    // current for real and try once more.
    forget_current_context();
    SPARKRT_RETURN_IF_ERROR(make_current());
    r = submit(k, l, s);
  }
  if (r != CUDA_SUCCESS) [[unlikely]]
    return launch_failed(r, l, with_attributes(l, props_) ? "cuLaunchKernelEx" : "cuLaunchKernel");

  if (options_.sync_launches) [[unlikely]] {
    // Wait here so an asynchronous fault is pinned on this launch. A
    // capturing stream records instead of running: nothing to wait for.
    CUstreamCaptureStatus capture = CU_STREAM_CAPTURE_STATUS_NONE;
    if (driver().StreamIsCapturing(s, &capture) == CUDA_SUCCESS &&
        capture == CU_STREAM_CAPTURE_STATUS_NONE) {
      if (CUresult f = driver().StreamSynchronize(s); f != CUDA_SUCCESS) [[unlikely]]
        return launch_faulted(f, l);
    }
  }
  return absl::OkStatus();
}

}  // namespace sparkrt::cuda
