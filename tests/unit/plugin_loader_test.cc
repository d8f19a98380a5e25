#include <doctest/doctest.h>

#include <string>

#include "sparkrt/backends.h"
#include "sparkrt/device.h"
#include "sparkrt/plugin_api.h"

namespace {

std::string test_plugin(const std::string& name) {
  return std::string(SPARKRT_TEST_PLUGIN_DIR) + "/libsparkrt_backend_" + name + ".so";
}

absl::Status open_path(const std::string& path) {
  return sparkrt::Device::open({.backend = path}).status();
}

bool contains(const absl::Status& s, std::string_view text) {
  return std::string(s.message()).find(text) != std::string::npos;
}

}  // namespace

TEST_CASE("plugin loader: a missing file is NotFound naming the path") {
  const std::string path = "/nonexistent/libsparkrt_backend_ghost.so";
  auto s = open_path(path);
  CHECK(s.code() == absl::StatusCode::kNotFound);
  CHECK(contains(s, path));
  CHECK(contains(s, "no such file"));
}

TEST_CASE("plugin loader: a file that is not a library") {
  const std::string path = test_plugin("notalibrary");
  auto s = open_path(path);
  CHECK(s.code() == absl::StatusCode::kInvalidArgument);
  CHECK(contains(s, path));
  CHECK_MESSAGE(contains(s, "cannot be loaded as a shared library"), s.message());
}

TEST_CASE("plugin loader: a library without the entry symbol") {
  const std::string path = test_plugin("noentry");
  auto s = open_path(path);
  CHECK(s.code() == absl::StatusCode::kInvalidArgument);
  CHECK(contains(s, path));
  CHECK_MESSAGE(contains(s, "no 'sparkrt_plugin_api' symbol"), s.message());
}

TEST_CASE("plugin loader: an entry returning null") {
  auto s = open_path(test_plugin("nulltable"));
  CHECK(s.code() == absl::StatusCode::kInvalidArgument);
  CHECK_MESSAGE(contains(s, "returned null"), s.message());
}

TEST_CASE("plugin loader: a different major version names both versions") {
  const std::string path = test_plugin("wrongmajor");
  auto s = open_path(path);
  CHECK(s.code() == absl::StatusCode::kFailedPrecondition);
  CHECK(contains(s, path));
  const std::string both = "ABI version " + std::to_string(SPARKRT_ABI_MAJOR + 1) + "." +
                           std::to_string(SPARKRT_ABI_MINOR) + ", this runtime speaks " +
                           std::to_string(SPARKRT_ABI_MAJOR) + "." + std::to_string(SPARKRT_ABI_MINOR);
  CHECK_MESSAGE(contains(s, both), s.message());
}

TEST_CASE("plugin loader: a short table is refused before any call") {
  auto truncated = open_path(test_plugin("shortstruct"));
  CHECK(truncated.code() == absl::StatusCode::kFailedPrecondition);
  CHECK_MESSAGE(contains(truncated, "the table is truncated"), truncated.message());
  auto tiny = open_path(test_plugin("tinystruct"));
  CHECK(tiny.code() == absl::StatusCode::kInvalidArgument);
  CHECK_MESSAGE(contains(tiny, "too short to carry a version"), tiny.message());
}

TEST_CASE("plugin loader: a table with a null function") {
  auto s = open_path(test_plugin("nullfunction"));
  CHECK(s.code() == absl::StatusCode::kInvalidArgument);
  CHECK_MESSAGE(contains(s, "required function 'error_code' is null"), s.message());
}

TEST_CASE("plugin loader: a working plugin by path, and its library is shared") {
  auto a = sparkrt::Device::open({.backend = test_plugin("fakegpu")});
  REQUIRE_MESSAGE(a.ok(), a.status().ToString());
  CHECK((*a)->backend_name() == "fakegpu");
  CHECK((*a)->plugin_version() == "1.0.0");
  CHECK((*a)->properties().name == "fake test device");
  auto b = sparkrt::Device::open({.backend = test_plugin("fakegpu")});
  REQUIRE(b.ok());
  CHECK((*a)->plugin_path() == (*b)->plugin_path());
  // Unsupported operations come back as statuses, not crashes.
  auto mem = (*a)->alloc(16);
  CHECK(mem.status().code() == absl::StatusCode::kUnimplemented);
  CHECK(contains(mem.status(), "fakegpu: alloc(16 bytes)"));
  CHECK((*a)->close().ok());
  CHECK((*a)->close().ok());  // idempotent
  CHECK((*a)->alloc(16).status().code() == absl::StatusCode::kFailedPrecondition);
}

TEST_CASE("plugin loader: a backend without devices says why") {
  auto s = open_path(test_plugin("nodevice"));
  CHECK(s.code() == absl::StatusCode::kUnavailable);
  CHECK_MESSAGE(contains(s, "no fake hardware present"), s.message());
}

TEST_CASE("plugin loader: an unknown backend name lists what exists and what to set") {
  auto s = sparkrt::Device::open({.backend = "nonsense"}).status();
  CHECK(s.code() == absl::StatusCode::kNotFound);
  CHECK(contains(s, "libsparkrt_backend_nonsense.so"));
  CHECK(contains(s, "mock"));  // available
  CHECK(contains(s, "SPARKRT_BACKEND"));
  CHECK(contains(s, "sparkrt/plugins"));  // a folder searched
}

TEST_CASE("plugin discovery: probes report each plugin with its own status") {
  setenv("SPARKRT_PLUGIN_PATH", SPARKRT_TEST_PLUGIN_DIR, 1);
  auto probes = sparkrt::probe_backends();
  unsetenv("SPARKRT_PLUGIN_PATH");
  bool saw_mock = false, saw_major = false, saw_fake = false;
  for (const auto& p : probes) {
    if (p.name == "mock") saw_mock = p.status.ok() && p.device_count >= 1;
    if (p.name == "wrongmajor") saw_major = p.status.code() == absl::StatusCode::kFailedPrecondition;
    if (p.name == "fakegpu") saw_fake = p.status.ok() && p.device_count == 1 && p.version == "1.0.0";
  }
  CHECK(saw_mock);
  CHECK(saw_major);
  CHECK(saw_fake);
  auto path = sparkrt::plugin_search_path();
  CHECK(path.back().ends_with("sparkrt/plugins"));
}
