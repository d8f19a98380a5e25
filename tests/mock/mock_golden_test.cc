// The mock's JSON-lines log, compared with checked-in golden traces.
//
// To regenerate a golden file after an intended change, run the test with
// SPARKRT_UPDATE_GOLDEN=1 and review the diff of tests/data/golden/. A case
// that rewrites its file fails, so a run in update mode never passes.
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include "mock_test_support.h"
#include "subprocess.h"
#include "test_environment.h"

using namespace mocktest;
using absl::StatusCode;
using sparkrt::DevicePtr;
using sparkrt::KernelLaunch;

namespace {

namespace fs = std::filesystem;

// A file path unique to this process and test, removed on destruction.
class TempFile {
 public:
  explicit TempFile(const std::string& stem)
      : path_(fs::temp_directory_path() /
              (stem + "." + std::to_string(::getpid()) + ".jsonl")) {
    fs::remove(path_);
  }
  ~TempFile() {
    std::error_code ec;
    fs::remove(path_, ec);
  }
  std::string path() const { return path_.string(); }

 private:
  fs::path path_;
};

// What the process writes to stderr while `fn` runs.
template <typename Fn>
std::string capture_stderr(Fn&& fn) {
  TempFile file("sparkrt_stderr");
  std::fflush(stderr);
  const int saved = ::dup(2);
  std::FILE* f = std::fopen(file.path().c_str(), "w+");
  REQUIRE(f != nullptr);
  ::dup2(::fileno(f), 2);
  fn();
  std::fflush(stderr);
  ::dup2(saved, 2);
  ::close(saved);
  std::fclose(f);
  std::ifstream in(file.path());
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::vector<std::string> read_lines(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// tests/data/golden, or the folder SPARKRT_TEST_GOLDEN_DIR names (set with
// --set-env, by the test of the update mode below).
std::string golden_dir() {
  const char* dir = std::getenv("SPARKRT_TEST_GOLDEN_DIR");
  return dir != nullptr && *dir != '\0' ? dir : SPARKRT_TEST_DATA_DIR "/golden";
}

// Compares line by line so a failure shows the first differing line.
void check_golden(const std::string& actual_path, const std::string& golden_name) {
  const std::string golden = golden_dir() + "/" + golden_name;
  const auto actual = read_lines(actual_path);
  if (sparkrt::testing::update_golden()) {
    fs::copy_file(actual_path, golden, fs::copy_options::overwrite_existing);
    // Nothing was compared: the case must not count as a pass.
    FAIL("SPARKRT_UPDATE_GOLDEN=1: rewrote ", golden, " from this run; review its diff, then run "
         "again without SPARKRT_UPDATE_GOLDEN to check it");
  }
  const auto expected = read_lines(golden);
  INFO("golden file: ", golden, " (SPARKRT_UPDATE_GOLDEN=1 rewrites it)");
  REQUIRE_MESSAGE(!expected.empty(), "golden file missing or empty");
  for (size_t i = 0; i < std::min(actual.size(), expected.size()); ++i) {
    INFO("line ", i + 1);
    REQUIRE(actual[i] == expected[i]);
  }
  CHECK(actual.size() == expected.size());
}

}  // namespace

TEST_CASE("mock log: a decode-like sequence matches the golden JSON-lines trace") {
  use_test_kernels();
  TempFile log("sparkrt_mock_golden");
  auto dev = open_mock();
  auto mock = inspect(*dev);
  REQUIRE_OK(mock.set_log_path(log.path()));

  auto q = dev->alloc(2048);
  auto out = dev->alloc(256);
  REQUIRE(q.ok());
  REQUIRE(out.ok());
  std::vector<float> host(256);
  for (size_t i = 0; i < host.size(); ++i) host[i] = 0.5f + static_cast<float>(i);
  REQUIRE_OK(dev->copy_h2d(host, *q));
  auto rope = dev->kernel(kTwin, kRope);
  auto sdpa = dev->kernel(kTwin, kSdpa);
  REQUIRE(rope.ok());
  REQUIRE(sdpa.ok());
  auto s = dev->create_stream();
  auto start = dev->create_event();
  REQUIRE(s.ok());
  REQUIRE(start.ok());
  REQUIRE_OK(dev->record_event(*start, *s));
  REQUIRE_OK(KernelLaunch(*dev, *rope)
                 .grid({1})
                 .block({128})
                 .arg(*q)
                 .arg(*q + 1024)
                 .arg(uint32_t{8})
                 .arg(uint32_t{64})
                 .arg(uint32_t{32})
                 .arg(uint32_t{3})
                 .arg(10000.0f)
                 .arg(uint32_t{1})
                 .launch(*s));
  REQUIRE_OK(dev->memset_async(*out, 0, 256, *s));
  REQUIRE_OK(KernelLaunch(*dev, *sdpa)
                 .grid({8})
                 .block({32})
                 .arg(*q)
                 .arg(*q + 512)
                 .arg(*q + 1024)
                 .arg(DevicePtr{})
                 .arg(*out)
                 .arg(uint32_t{1})
                 .arg(uint32_t{8})
                 .arg(uint32_t{96})
                 .arg(uint32_t{64})
                 .arg(uint32_t{1})
                 .launch(*s));
  REQUIRE_OK(dev->synchronize(*s));
  REQUIRE_OK(dev->copy_d2h_async(*out, host.data(), 256, *s));
  REQUIRE_OK(dev->copy_d2d(*q, *q + 1024, 64));
  REQUIRE_OK(dev->free(*q));
  // Errors are part of the trace too (code only: messages carry addresses).
  CHECK(dev->free(*q).code() == StatusCode::kFailedPrecondition);
  REQUIRE_OK(dev->destroy_stream(*s));
  REQUIRE_OK(mock.set_log_path(""));

  // Not logged once the log is closed.
  REQUIRE_OK(dev->free(*out));
  check_golden(log.path(), "mock_decode_trace.jsonl");
}

TEST_CASE("mock log: SPARKRT_MOCK_LOG appends every device's events, open to close") {
  TempFile log("sparkrt_mock_env_log");
  ::setenv("SPARKRT_MOCK_LOG", log.path().c_str(), 1);
  {
    auto d1 = open_mock();
    auto p = d1->alloc(100);
    REQUIRE(p.ok());
    auto d2 = open_mock();
    auto p2 = d2->alloc(200);
    REQUIRE(p2.ok());
    REQUIRE_OK(d2->free(*p2));
    REQUIRE_OK(d2->close());
    REQUIRE_OK(d1->close());  // leaves p allocated: the close line says so
  }
  ::unsetenv("SPARKRT_MOCK_LOG");
  check_golden(log.path(), "mock_env_log.jsonl");
}

TEST_CASE("mock log: an unwritable SPARKRT_MOCK_LOG fails the open, naming the variable and path") {
  const std::string bad = "/nonexistent-sparkrt-dir/trace.jsonl";
  ::setenv("SPARKRT_MOCK_LOG", bad.c_str(), 1);
  auto dev = sparkrt::Device::open({.backend = "mock"});
  ::unsetenv("SPARKRT_MOCK_LOG");
  REQUIRE_FALSE(dev.ok());
  check_error(dev.status(), StatusCode::kFailedPrecondition, {"SPARKRT_MOCK_LOG", bad});
}

TEST_CASE("mock log: set_log_path to an unwritable path is an error naming it") {
  auto dev = open_mock();
  auto mock = inspect(*dev);
  const std::string bad = "/nonexistent-sparkrt-dir/trace.jsonl";
  check_error(mock.set_log_path(bad), StatusCode::kFailedPrecondition, {bad});
}

TEST_CASE("mock log: SPARKRT_MOCK_LOG on a full disk fails the open, naming the file and errno") {
  ::setenv("SPARKRT_MOCK_LOG", "/dev/full", 1);
  auto dev = sparkrt::Device::open({.backend = "mock"});
  ::unsetenv("SPARKRT_MOCK_LOG");
  REQUIRE_FALSE(dev.ok());
  check_error(dev.status(), StatusCode::kFailedPrecondition,
              {"SPARKRT_MOCK_LOG", "'/dev/full'", std::strerror(ENOSPC)});
}

TEST_CASE("mock log: a failed write refuses every later call and the close, naming the file") {
  auto dev = open_mock();
  auto mock = inspect(*dev);
  REQUIRE_OK(mock.set_log_path("/dev/full"));  // opens; nothing is written yet
  auto p = dev->alloc(256);                     // done, but its line is lost
  REQUIRE(p.ok());
  for (const absl::Status& s : {dev->free(*p), dev->synchronize(), dev->alloc(64).status()}) {
    check_error(s, StatusCode::kDataLoss, {"refused", "'/dev/full'", std::strerror(ENOSPC)});
  }
  CHECK(mock.counters().allocations == 1);
  CHECK(mock.counters().frees == 0);
  check_error(dev->close(), StatusCode::kDataLoss, {"device_close", "'/dev/full'"});

  // set_log_path reports it too, and leaving the file resumes the device.
  auto again = open_mock();
  auto inspector = inspect(*again);
  REQUIRE_OK(inspector.set_log_path("/dev/full"));
  REQUIRE(again->alloc(256).ok());
  check_error(inspector.set_log_path(""), StatusCode::kDataLoss, {"'/dev/full'"});
  CHECK(again->alloc(256).ok());
  CHECK_OK(again->close());

  // A device destroyed without close() has no caller to tell: stderr, at
  // SPARKRT_LOG's default level.
  auto dropped = open_mock();
  REQUIRE_OK(inspect(*dropped).set_log_path("/dev/full"));
  REQUIRE(dropped->alloc(256).ok());
  const std::string err = capture_stderr([&] { dropped.reset(); });
  CHECK(err.find("[sparkrt] error: device destroyed without close()") != std::string::npos);
  CHECK(err.find("'/dev/full'") != std::string::npos);
}

TEST_CASE("golden: SPARKRT_UPDATE_GOLDEN=1 rewrites the file, says so, and fails the case") {
  // The golden case runs in a child process, against a copy of its file.
  const fs::path dir = fs::temp_directory_path() / ("sparkrt_golden." + std::to_string(::getpid()));
  fs::create_directories(dir);
  const fs::path copy = dir / "mock_decode_trace.jsonl";
  std::ofstream(copy) << "{\"not\":\"the trace\"}\n";
  const std::vector<std::string> argv = {fs::read_symlink("/proc/self/exe").string(),
                                         "--test-case=*decode-like sequence matches*",
                                         "--set-env=SPARKRT_TEST_GOLDEN_DIR=" + dir.string()};
  auto update = sparkrt::testing::run_process(argv, {{"SPARKRT_UPDATE_GOLDEN", "1"}});
  INFO(update.out, update.err);
  CHECK(update.exit_code == 1);
  CHECK(update.out.find("rewrote " + copy.string()) != std::string::npos);
  CHECK(std::regex_search(update.out, std::regex("test cases: *1 \\| *0 passed \\| *1 failed")));
  CHECK(read_lines(copy) ==
        read_lines(std::string(SPARKRT_TEST_DATA_DIR) + "/golden/mock_decode_trace.jsonl"));
  // Without the variable the rewritten file is checked, and passes.
  auto check = sparkrt::testing::run_process(argv, {{"SPARKRT_UPDATE_GOLDEN", std::nullopt}});
  INFO(check.out, check.err);
  CHECK(check.exit_code == 0);
  CHECK(std::regex_search(check.out, std::regex("test cases: *1 \\| *1 passed \\| *0 failed")));
  fs::remove_all(dir);
}
