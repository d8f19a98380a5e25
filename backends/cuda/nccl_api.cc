#include "nccl_api.h"

#include <dlfcn.h>
#include <link.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace sparkrt::cuda::nccl {
namespace {

constexpr char kSoname[] = "libnccl.so.2";
constexpr char kEnv[] = "SPARKRT_NCCL_LIBRARY";
constexpr char kAdvice[] =
    "install NCCL 2 (for example `pip install nvidia-nccl-cu12`, or the one PyTorch ships in "
    "site-packages/nvidia/nccl/lib) and put its folder on LD_LIBRARY_PATH, or set "
    "SPARKRT_NCCL_LIBRARY to the path of libnccl.so.2";

Library g_library;

// What dlopen is given for SPARKRT_NCCL_LIBRARY: the value must name an
// existing file. A bare name gets "./" so that dlopen opens that file rather
// than searching the loader path under the same name.
absl::StatusOr<std::string> library_from_env(const char* value) {
  if (value[0] == '\0') {
    return absl::FailedPreconditionError(absl::StrFormat(
        "%s is set but empty; set it to the path of libnccl.so.2 or unset it to search the "
        "loader path for %s",
        kEnv, kSoname));
  }
  struct stat st {};
  if (::stat(value, &st) != 0) {
    const int err = errno;
    return absl::FailedPreconditionError(absl::StrFormat(
        "NCCL not found: %s=\"%s\": no such file (%s); %s", kEnv, value, std::strerror(err),
        kAdvice));
  }
  if (!S_ISREG(st.st_mode)) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "NCCL not found: %s=\"%s\" is not a regular file (a folder?); set it to the library "
        "file itself, e.g. .../nvidia/nccl/lib/libnccl.so.2",
        kEnv, value));
  }
  std::string path = value;
  if (path.find('/') == std::string::npos) path = "./" + path;
  return path;
}

std::string loaded_path(void* handle, const std::string& fallback) {
  link_map* map = nullptr;
  if (dlinfo(handle, RTLD_DI_LINKMAP, &map) == 0 && map != nullptr && map->l_name != nullptr &&
      map->l_name[0] != '\0')
    return map->l_name;
  return fallback;
}

absl::Status open_library() {
  const char* env = std::getenv(kEnv);
  std::string target = kSoname;
  std::string tried;
  if (env != nullptr) {
    auto path = library_from_env(env);
    if (!path.ok()) return path.status();
    target = *path;
    tried = absl::StrFormat("%s (from %s)", target, kEnv);
  } else {
    const char* ld = std::getenv("LD_LIBRARY_PATH");
    tried = absl::StrFormat("%s through the loader's search path (LD_LIBRARY_PATH=\"%s\", then "
                            "the ldconfig cache and the system folders)",
                            kSoname, ld != nullptr ? ld : "");
  }

  // RTLD_LOCAL: NCCL's symbols stay out of the global namespace, so another
  // NCCL in the process (PyTorch's, say) does not collide with this one.
  void* handle = dlopen(target.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* why = dlerror();
    return absl::FailedPreconditionError(absl::StrFormat(
        "NCCL not found: tried %s: %s; %s", tried, why != nullptr ? why : "dlopen failed",
        kAdvice));
  }
  g_library.path = loaded_path(handle, target);

  std::string missing;
#define SPARKRT_NCCL_RESOLVE(field, ret, params)                                         \
  g_library.field = reinterpret_cast<ret(*) params>(dlsym(handle, "nccl" #field));       \
  if (g_library.field == nullptr) absl::StrAppend(&missing, missing.empty() ? "" : ", ", \
                                                  "nccl" #field);
  SPARKRT_NCCL_REQUIRED_FUNCTIONS(SPARKRT_NCCL_RESOLVE)
#undef SPARKRT_NCCL_RESOLVE

  if (g_library.GetVersion == nullptr) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "%s is not NCCL: it has no ncclGetVersion; %s", g_library.path, kAdvice));
  }
  int code = 0;
  if (Result r = g_library.GetVersion(&code); r != kSuccess) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "%s: ncclGetVersion failed (ncclResult_t %d); %s", g_library.path, r, kAdvice));
  }
  g_library.version = code;
  // Before 2.9 the code was major * 1000 + minor * 100 + patch.
  const int major = code >= 10000 ? code / 10000 : code / 1000;
  if (major != 2 || code < kMinimumVersion) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "%s is NCCL %s (version code %d); this backend needs NCCL 2 at %s or newer (major "
        "version 2); %s",
        g_library.path, version_string(code), code, version_string(kMinimumVersion), kAdvice));
  }
  if (!missing.empty()) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "%s (NCCL %s) lacks %s; %s", g_library.path, version_string(code), missing, kAdvice));
  }
  return absl::OkStatus();
}

absl::StatusCode status_code(Result result) {
  switch (result) {
    case kInvalidArgument: return absl::StatusCode::kInvalidArgument;
    case kInvalidUsage: return absl::StatusCode::kFailedPrecondition;
    case kRemoteError:   // a peer failed or went away
    case kSystemError:   // sockets, shared memory, the network
    case kInProgress: return absl::StatusCode::kUnavailable;
    default: return absl::StatusCode::kInternal;
  }
}

}  // namespace

absl::StatusOr<const Library*> load() {
  // A static's initialiser runs exactly once, also with several threads.
  static const absl::Status status = open_library();
  if (!status.ok()) return status;
  return &g_library;
}

std::string version_string(int code) {
  if (code >= 10000) return absl::StrFormat("%d.%d.%d", code / 10000, code / 100 % 100, code % 100);
  return absl::StrFormat("%d.%d.%d", code / 1000, code / 100 % 10, code % 100);
}

absl::Status error(const Library& nccl, Result result, std::string_view call,
                   std::string_view context) {
  const char* text = nccl.GetErrorString != nullptr ? nccl.GetErrorString(result) : nullptr;
  const char* last = nccl.GetLastError != nullptr ? nccl.GetLastError(nullptr) : nullptr;
  std::string message = absl::StrFormat("%s: %s failed: %s (ncclResult_t %d)", context, call,
                                        text != nullptr ? text : "unknown result",
                                        static_cast<int>(result));
  if (last != nullptr && last[0] != '\0') absl::StrAppend(&message, "; NCCL: ", last);
  absl::StrAppend(&message, "; NCCL_DEBUG=WARN prints NCCL's own account");
  return absl::Status(status_code(result), message);
}

}  // namespace sparkrt::cuda::nccl
