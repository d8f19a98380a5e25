// The plugin SDK's error path when host memory runs out. A null SparkrtError*
// means success in the ABI, so an error that cannot be allocated must still
// come back as an error: the SDK's static out-of-memory error, which
// error_destroy leaves alone. The adapter is driven in process, with the
// global allocator replaced so that chosen allocations fail.
#include <cstdlib>
#include <cstring>
#include <limits>
#include <new>
#include <string_view>

#include <doctest/doctest.h>
#include "sparkrt/plugin_sdk.h"

namespace {

// Allocations of this thread to let through, then how many to fail.
thread_local long t_pass = 0;
thread_local long t_fail = 0;

bool fail_this_allocation() {
  if (t_fail == 0) return false;
  if (t_pass > 0) {
    --t_pass;
    return false;
  }
  if (t_fail != std::numeric_limits<long>::max()) --t_fail;
  return true;
}

void fail_allocations(long pass, long fail) {
  t_pass = pass;
  t_fail = fail;
}
void stop_failing() { fail_allocations(0, 0); }

void* allocate(size_t size) {
  if (fail_this_allocation()) return nullptr;
  return std::malloc(size ? size : 1);
}

}  // namespace

// Every unaligned form, so that each new pairs with the delete below (the
// aligned forms stay the toolchain's, paired with their own deletes).
void* operator new(size_t size) {
  if (void* p = allocate(size)) return p;
  throw std::bad_alloc();
}
void* operator new[](size_t size) { return operator new(size); }
void* operator new(size_t size, const std::nothrow_t&) noexcept { return allocate(size); }
void* operator new[](size_t size, const std::nothrow_t&) noexcept { return allocate(size); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }
void operator delete[](void* p, size_t) noexcept { std::free(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { std::free(p); }

namespace {

constexpr long kAll = std::numeric_limits<long>::max();

// device_count fails with a message too long for the string's inline buffer;
// from the moment the status exists, allocations fail as the test chose.
long g_pass = 0;
long g_fail = 0;

class OutOfMemoryBackend final : public sparkrt::sdk::Backend {
 public:
  absl::StatusOr<int> device_count() override {
    absl::Status status = absl::UnavailableError(
        "no device on this machine: a message longer than any inline string buffer");
    fail_allocations(g_pass, g_fail);
    return status;
  }
  absl::StatusOr<std::unique_ptr<sparkrt::sdk::Device>> open_device(int) override {
    return absl::UnimplementedError("no devices");
  }
};

const SparkrtPluginApi& api() {
  return *sparkrt::sdk::detail::make_api<OutOfMemoryBackend>("oom", "0.0.0");
}

struct Result {
  bool ok = false;
  int32_t code = 0;
  std::string message;
};

// One device_count call with the allocations after the backend's status
// failing as given; the error read back and destroyed.
Result device_count_failing(long pass, long fail) {
  g_pass = pass;
  g_fail = fail;
  SparkrtDeviceCountArgs args{SPARKRT_DEVICE_COUNT_ARGS_SIZE, -1};
  SparkrtError* error = api().device_count(&args);
  stop_failing();
  Result r;
  r.ok = error == nullptr;
  if (error == nullptr) return r;
  r.code = api().error_code(error);
  const char* msg = nullptr;
  size_t size = 0;
  api().error_message(error, &msg, &size);
  r.message.assign(msg, size);
  api().error_destroy(error);
  return r;
}

constexpr int32_t kResourceExhausted = static_cast<int32_t>(absl::StatusCode::kResourceExhausted);

TEST_CASE("sdk errors: with memory, the backend's status crosses as it is") {
  const Result r = device_count_failing(0, 0);
  REQUIRE_FALSE(r.ok);
  CHECK(r.code == static_cast<int32_t>(absl::StatusCode::kUnavailable));
  CHECK(r.message.find("no device on this machine") == 0);
}

TEST_CASE("sdk errors: an error object that cannot be allocated is out of memory, never OK") {
  const Result r = device_count_failing(0, 1);
  REQUIRE_FALSE(r.ok);
  CHECK(r.code == kResourceExhausted);
  CHECK(r.message.find("out of host memory") != std::string::npos);
}

TEST_CASE("sdk errors: a message that cannot be copied is out of memory") {
  const Result r = device_count_failing(1, 1);
  REQUIRE_FALSE(r.ok);
  CHECK(r.code == kResourceExhausted);
  CHECK(r.message.find("out of host memory") != std::string::npos);
}

TEST_CASE("sdk errors: with no memory at all, the static error comes back and is never freed") {
  // Twice: error_destroy left the static error intact the first time.
  for (int i = 0; i < 2; ++i) {
    const Result r = device_count_failing(0, kAll);
    REQUIRE_FALSE(r.ok);
    CHECK(r.code == kResourceExhausted);
    CHECK(r.message == sparkrt::sdk::detail::kOutOfMemoryMessage);
  }
}

TEST_CASE("sdk errors: a short args struct with no memory is still an error") {
  fail_allocations(0, kAll);
  SparkrtDeviceCountArgs args{sizeof(size_t), -1};
  SparkrtError* error = api().device_count(&args);
  stop_failing();
  REQUIRE(error != nullptr);
  CHECK(api().error_code(error) == kResourceExhausted);
  api().error_destroy(error);
}

}  // namespace
