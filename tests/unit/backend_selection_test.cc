// Backend selection reads the environment, so each case runs the probe
// program in a child process with its own environment.
#include <doctest/doctest.h>

#include <string>

#include "subprocess.h"

using sparkrt::testing::run_process;
using Env = std::map<std::string, std::optional<std::string>>;

namespace {

Env clean(Env extra = {}) {
  Env env{{"SPARKRT_BACKEND", std::nullopt},     {"SPARKRT_DEVICE", std::nullopt},
          {"SPARKRT_PLUGIN_PATH", std::nullopt}, {"SPARKRT_KERNEL_PATH", std::nullopt},
          {"SPARKRT_LOG", std::nullopt},         {"SPARKRT_HOST_DEVICES", std::nullopt}};
  for (auto& [k, v] : extra) env[k] = v;
  return env;
}

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

}  // namespace

TEST_CASE("selection: SPARKRT_BACKEND=mock opens the mock") {
  auto r = run_process({SPARKRT_OPEN_PROBE}, clean({{"SPARKRT_BACKEND", "mock"}}));
  CHECK_MESSAGE(r.exit_code == 0, r.err);
  CHECK(has(r.out, "backend=mock index=0"));
}

TEST_CASE("selection: auto never picks the mock") {
  // The build tree holds the mock; whatever auto does, it is not that.
  auto r = run_process({SPARKRT_OPEN_PROBE}, clean());
  CHECK_FALSE(has(r.out, "backend=mock"));
  if (r.exit_code != 0) {
    CHECK(has(r.err, "no usable backend"));
    CHECK(has(r.err, "SPARKRT_BACKEND=mock"));
  }
}

TEST_CASE("selection: auto takes the first real backend with a device") {
  auto r = run_process({SPARKRT_OPEN_PROBE},
                       clean({{"SPARKRT_PLUGIN_PATH", SPARKRT_TEST_PLUGIN_DIR}, {"SPARKRT_LOG", "debug"}}));
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  CHECK_FALSE(has(r.out, "backend=mock"));
  // cuda, vulkan, cpu come first; without a GPU that is the cpu backend.
  const bool known = has(r.out, "backend=cuda") || has(r.out, "backend=vulkan") ||
                     has(r.out, "backend=cpu");
  CHECK_MESSAGE(known, r.out);
  CHECK(has(r.err, "[sparkrt] auto: trying"));
  CHECK(has(r.err, "[sparkrt] auto: selected"));
}

TEST_CASE("selection: auto moves past plugins that fail, and skips the mock") {
  // Device index 99 exists nowhere (fakegpu has one device, cpu at most 64), so auto
  // walks every candidate and must report each one's reason.
  auto r = run_process({SPARKRT_OPEN_PROBE},
                       clean({{"SPARKRT_PLUGIN_PATH", SPARKRT_TEST_PLUGIN_DIR}, {"SPARKRT_BACKEND", "auto"},
                              {"SPARKRT_DEVICE", "99"}}));
  CHECK(r.exit_code == 1);
  CHECK(has(r.err, "no usable backend"));
  CHECK(has(r.err, "nodevice"));
  CHECK(has(r.err, "no fake hardware present"));
  CHECK(has(r.err, "wrongmajor"));
  CHECK(has(r.err, "ABI version"));
  CHECK(has(r.err, "notalibrary"));
  CHECK(has(r.err, "device index 99 requested, 1 device(s) present"));
  CHECK_FALSE(has(r.err, "backend_mock"));
}

TEST_CASE("selection: a plugin path in SPARKRT_BACKEND") {
  const std::string path = std::string(SPARKRT_TEST_PLUGIN_DIR) + "/libsparkrt_backend_fakegpu.so";
  auto ok = run_process({SPARKRT_OPEN_PROBE}, clean({{"SPARKRT_BACKEND", path}}));
  CHECK_MESSAGE(ok.exit_code == 0, ok.err);
  CHECK(has(ok.out, "backend=fakegpu"));
  auto bad = run_process({SPARKRT_OPEN_PROBE}, clean({{"SPARKRT_BACKEND", "/no/such/plugin.so"}}));
  CHECK(bad.exit_code == 1);
  CHECK(has(bad.err, "/no/such/plugin.so"));
}

TEST_CASE("selection: unknown names and bad device indices are explained") {
  auto unknown = run_process({SPARKRT_OPEN_PROBE}, clean({{"SPARKRT_BACKEND", "nonsense"}}));
  CHECK(unknown.exit_code == 1);
  CHECK(has(unknown.err, "backend 'nonsense' not found"));
  auto range = run_process({SPARKRT_OPEN_PROBE}, clean({{"SPARKRT_BACKEND", "mock"}, {"SPARKRT_DEVICE", "7"}}));
  CHECK(range.exit_code == 1);
  CHECK(has(range.err, "device index 7 requested"));
  auto junk = run_process({SPARKRT_OPEN_PROBE}, clean({{"SPARKRT_BACKEND", "mock"}, {"SPARKRT_DEVICE", "two"}}));
  CHECK(junk.exit_code == 1);
  CHECK(has(junk.err, "SPARKRT_DEVICE='two' is not a device index"));
}

TEST_CASE("selection: SPARKRT_LOG=debug reports each load decision") {
  auto r = run_process({SPARKRT_OPEN_PROBE}, clean({{"SPARKRT_BACKEND", "mock"}, {"SPARKRT_LOG", "debug"}}));
  CHECK(r.exit_code == 0);
  CHECK(has(r.err, "[sparkrt] opening backend 'mock'"));
  CHECK(has(r.err, "[sparkrt] plugin "));
  CHECK(has(r.err, "loaded: backend 'mock'"));
  auto quiet = run_process({SPARKRT_OPEN_PROBE}, clean({{"SPARKRT_BACKEND", "mock"}}));
  CHECK_FALSE(has(quiet.err, "[sparkrt]"));
}
