#include "cuda_driver.h"

#include <dlfcn.h>

#include <cstdlib>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace sparkrt::cuda {

CudaDriver g_cuda_driver;

namespace {

constexpr char kLibrary[] = "libcuda.so.1";

std::string visible_devices_note() {
  const char* v = std::getenv("CUDA_VISIBLE_DEVICES");
  if (v == nullptr) return "";
  return absl::StrFormat(" (CUDA_VISIBLE_DEVICES=\"%s\")", v);
}

template <typename Fn>
void resolve(void* library, Fn* field, const char* symbol) {
  *field = reinterpret_cast<Fn>(dlsym(library, symbol));
}

absl::Status load() {
  // RTLD_NOW: resolve everything up front rather than fault at first use.
  void* library = dlopen(kLibrary, RTLD_NOW | RTLD_LOCAL);
  if (library == nullptr) {
    const char* why = dlerror();
    return absl::UnavailableError(absl::StrFormat(
        "no CUDA driver: %s not found (%s); install the NVIDIA driver or choose another "
        "backend with SPARKRT_BACKEND",
        kLibrary, why != nullptr ? why : "dlopen failed"));
  }

#define SPARKRT_CUDA_RESOLVE(field, symbol) resolve(library, &g_cuda_driver.field, #symbol);
  SPARKRT_CUDA_ALL_FUNCTIONS(SPARKRT_CUDA_RESOLVE)
#undef SPARKRT_CUDA_RESOLVE

  // Collect every missing required symbol so one message says all of it.
  std::string missing;
#define SPARKRT_CUDA_CHECK_PRESENT(field, symbol) \
  if (g_cuda_driver.field == nullptr)             \
    absl::StrAppend(&missing, missing.empty() ? "" : ", ", #symbol);
  SPARKRT_CUDA_ERROR_FUNCTIONS(SPARKRT_CUDA_CHECK_PRESENT)
  SPARKRT_CUDA_REQUIRED_FUNCTIONS(SPARKRT_CUDA_CHECK_PRESENT)
#undef SPARKRT_CUDA_CHECK_PRESENT
  if (!missing.empty()) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "CUDA driver too old: %s lacks %s; install a driver for CUDA 12 or newer (CUDA 13 to "
        "JIT the bundled PTX)",
        kLibrary, missing));
  }

  if (CUresult r = g_cuda_driver.Init(0); r != CUDA_SUCCESS) {
    if (r == CUDA_ERROR_STUB_LIBRARY) {
      Dl_info info{};
      const bool named = dladdr(reinterpret_cast<void*>(g_cuda_driver.Init), &info) != 0 &&
                         info.dli_fname != nullptr;
      return absl::UnavailableError(absl::StrFormat(
          "no CUDA driver: %s%s%s is the CUDA toolkit's stub library, not a driver (cuInit: "
          "CUDA_ERROR_STUB_LIBRARY); remove its folder from LD_LIBRARY_PATH, install the NVIDIA "
          "driver, or choose another backend with SPARKRT_BACKEND",
          kLibrary, named ? " at " : "", named ? info.dli_fname : ""));
    }
    const absl::Status s = driver_error(r, "cuInit");
    if (r == CUDA_ERROR_NO_DEVICE || r == CUDA_ERROR_DEVICE_UNAVAILABLE ||
        r == CUDA_ERROR_SYSTEM_DRIVER_MISMATCH || r == CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE) {
      return absl::UnavailableError(
          absl::StrCat("no usable CUDA device: ", s.message(), visible_devices_note()));
    }
    return absl::Status(s.code(), absl::StrCat("CUDA driver initialisation: ", s.message()));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<const CudaDriver*> load_driver() {
  // Thread-safe once: a static's initialiser runs exactly once.
  static const absl::Status status = load();
  if (!status.ok()) return status;
  return &g_cuda_driver;
}

std::string describe(CUresult result) {
  const char* name = nullptr;
  const char* text = nullptr;
  if (g_cuda_driver.GetErrorName == nullptr ||
      g_cuda_driver.GetErrorName(result, &name) != CUDA_SUCCESS)
    name = nullptr;
  if (g_cuda_driver.GetErrorString == nullptr ||
      g_cuda_driver.GetErrorString(result, &text) != CUDA_SUCCESS)
    text = nullptr;
  if (name == nullptr) return absl::StrFormat("CUresult %d (unknown to this driver)", result);
  if (text == nullptr) return name;
  return absl::StrFormat("%s: %s", name, text);
}

absl::StatusCode status_code(CUresult result) {
  switch (result) {
    case CUDA_SUCCESS: return absl::StatusCode::kOk;
    case CUDA_ERROR_OUT_OF_MEMORY:
    case CUDA_ERROR_TOO_MANY_PEERS:
    case CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES: return absl::StatusCode::kResourceExhausted;
    case CUDA_ERROR_INVALID_VALUE:
    case CUDA_ERROR_INVALID_HANDLE:
    case CUDA_ERROR_INVALID_IMAGE:
    case CUDA_ERROR_INVALID_PTX:
    case CUDA_ERROR_INVALID_SOURCE:
    case CUDA_ERROR_NO_BINARY_FOR_GPU:
    case CUDA_ERROR_UNSUPPORTED_PTX_VERSION:
    case CUDA_ERROR_INVALID_DEVICE:
    case CUDA_ERROR_ILLEGAL_STATE: return absl::StatusCode::kInvalidArgument;
    case CUDA_ERROR_NOT_FOUND: return absl::StatusCode::kNotFound;
    case CUDA_ERROR_NOT_READY: return absl::StatusCode::kUnavailable;
    case CUDA_ERROR_NOT_SUPPORTED: return absl::StatusCode::kUnimplemented;
    case CUDA_ERROR_NO_DEVICE:
    case CUDA_ERROR_DEVICE_UNAVAILABLE: return absl::StatusCode::kUnavailable;
    case CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED:
    case CUDA_ERROR_STREAM_CAPTURE_INVALIDATED:
    case CUDA_ERROR_STREAM_CAPTURE_UNMATCHED:
    case CUDA_ERROR_STREAM_CAPTURE_UNJOINED:
    case CUDA_ERROR_STREAM_CAPTURE_ISOLATION:
    case CUDA_ERROR_STREAM_CAPTURE_IMPLICIT:
    case CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD:
    case CUDA_ERROR_CAPTURED_EVENT:
    case CUDA_ERROR_CALL_REQUIRES_NEWER_DRIVER:
    case CUDA_ERROR_NOT_INITIALIZED:
    case CUDA_ERROR_INVALID_CONTEXT:
    case CUDA_ERROR_CONTEXT_IS_DESTROYED: return absl::StatusCode::kFailedPrecondition;
    default:
      // Faults (illegal address, trap, ...) leave the context unusable.
      return absl::StatusCode::kInternal;
  }
}

absl::Status driver_error(CUresult result, std::string_view call, std::string_view context) {
  std::string message;
  if (!context.empty()) absl::StrAppend(&message, std::string(context), ": ");
  absl::StrAppend(&message, std::string(call), " failed: ", describe(result));
  return absl::Status(status_code(result), message);
}

}  // namespace sparkrt::cuda
