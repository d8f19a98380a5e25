#include <doctest/doctest.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <future>
#include <thread>
#include <vector>

#include "slow_backend.h"
#include "sparkrt/device.h"
#include "sparkrt/kernel_launch.h"
#include "sparkrt/kernel_store.h"

namespace fs = std::filesystem;

namespace {

// Sets SPARKRT_KERNEL_PATH for one scope.
class KernelPathScope {
 public:
  explicit KernelPathScope(const std::string& value) { setenv("SPARKRT_KERNEL_PATH", value.c_str(), 1); }
  ~KernelPathScope() { unsetenv("SPARKRT_KERNEL_PATH"); }
};

fs::path temp_folder(const char* name) {
  fs::path dir = fs::temp_directory_path() / (std::string("sparkrt_") + name + "_" + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

void write(const fs::path& file, const std::string& text) { std::ofstream(file) << text; }

bool contains(const absl::Status& s, std::string_view text) {
  return std::string(s.message()).find(text) != std::string::npos;
}

// Generous: each wait below ends at once when the code is right; the bound
// only turns a hang into a failure.
constexpr auto kPatience = std::chrono::seconds(10);
constexpr int kPatienceMs = 10000;

template <typename T>
bool finishes(std::future<T>& f) {
  return f.wait_for(kPatience) == std::future_status::ready;
}

// A folder of names that are not modules, next to one that is.
struct HostileFolder {
  fs::path dir = temp_folder("hostile");
  HostileFolder() {
    write(dir / "good.ptx", ".entry good_k() { ret; }\n");
    REQUIRE(mkfifo((dir / "fifo.ptx").c_str(), 0600) == 0);
    fs::create_directory(dir / "folder.ptx");
    fs::create_symlink("no_such_target.ptx", dir / "dangling.ptx");
    fs::create_symlink("self.ptx", dir / "self.ptx");
    fs::create_symlink("/dev/null", dir / "null.ptx");
  }
  ~HostileFolder() {
    unblock_fifo();
    fs::remove_all(dir);
  }
  // Lets a reader stuck opening the FIFO go (it then reads end of file).
  void unblock_fifo() const {
    const int fd = ::open((dir / "fifo.ptx").c_str(), O_WRONLY | O_NONBLOCK);
    if (fd >= 0) ::close(fd);
  }
};

// Runs find_module on another thread, so a lookup that blocks fails the test.
absl::StatusOr<sparkrt::ModuleImage> find_in_time(const HostileFolder& folder, std::string name) {
  auto f = std::async(std::launch::async, [name] { return sparkrt::find_module(name, "sm_90"); });
  if (!finishes(f)) {
    FAIL_CHECK("find_module('" << name << "') blocked");
    folder.unblock_fifo();
  }
  return f.get();
}

}  // namespace

TEST_CASE("kernel store: built modules are embedded and listed") {
  auto path = sparkrt::kernel_search_path();
  REQUIRE_FALSE(path.empty());
  CHECK(path.back() == "embedded");
  auto modules = sparkrt::list_modules();
  CHECK(std::find(modules.begin(), modules.end(), "vector_ops") != modules.end());
  auto image = sparkrt::find_module("vector_ops", "sm_90");
  REQUIRE(image.ok());
  REQUIRE(image->signatures.has_value());  // kernels/signatures/vector_ops.sig
  CHECK(image->signatures->find(".entry vector_add_f32") != std::string::npos);
  CHECK_FALSE(image->spirv.empty());  // kernels/spirv/vector_ops/
  if (!SPARKRT_HAVE_CUDA_KERNELS) {  // built without nvcc: no PTX, no cubins
    CHECK_FALSE(image->ptx.has_value());
    CHECK(image->cubin.empty());
    return;
  }
  REQUIRE(image->ptx.has_value());
  CHECK(image->ptx->find(".entry vector_add_f32") != std::string::npos);
  CHECK_FALSE(image->cubin.empty());  // the build makes sm_90 cubins
  CHECK(image->cubin_arch == "sm_90");
  CHECK(image->cubin.compare(0, 4, "\x7f" "ELF") == 0);
  auto no_cubin = sparkrt::find_module("vector_ops", "sm_1");
  REQUIRE(no_cubin.ok());
  CHECK(no_cubin->cubin.empty());
}

TEST_CASE("kernel store: SPARKRT_KERNEL_PATH comes first, in order") {
  fs::path a = temp_folder("kpath_a"), b = temp_folder("kpath_b");
  write(b / "vector_ops.ptx", ".entry from_b() { ret; }\n");
  write(a / "only_a.ptx", ".entry from_a() { ret; }\n");
  KernelPathScope scope(a.string() + ":" + b.string());
  auto path = sparkrt::kernel_search_path();
  REQUIRE(path.size() >= 3);
  CHECK(path[0] == a.string());
  CHECK(path[1] == b.string());
  auto overridden = sparkrt::find_module("vector_ops", "");
  REQUIRE(overridden.ok());
  CHECK(overridden->origin == b.string());
  REQUIRE(overridden->ptx.has_value());
  CHECK(overridden->ptx->find("from_b") != std::string::npos);
  CHECK_FALSE(overridden->signatures.has_value());
  auto only_a = sparkrt::find_module("only_a", "");
  REQUIRE(only_a.ok());
  CHECK(only_a->origin == a.string());
  auto modules = sparkrt::list_modules();
  CHECK(std::find(modules.begin(), modules.end(), "only_a") != modules.end());
  fs::remove_all(a);
  fs::remove_all(b);
}

TEST_CASE("kernel store: a missing module names the search path and what exists") {
  auto missing = sparkrt::find_module("no_such_module", "");
  REQUIRE_FALSE(missing.ok());
  CHECK(missing.status().code() == absl::StatusCode::kNotFound);
  const std::string msg(missing.status().message());
  CHECK(msg.find("no_such_module.ptx") != std::string::npos);
  CHECK(msg.find("embedded") != std::string::npos);
  CHECK(msg.find("vector_ops") != std::string::npos);
  CHECK(msg.find("SPARKRT_KERNEL_PATH") != std::string::npos);
}

TEST_CASE("kernel store: module names cannot escape the kernel folders") {
  for (const char* bad : {"../etc/passwd", "/abs", "", ".hidden", "a/b", "x..y"}) {
    CAPTURE(bad);
    auto r = sparkrt::find_module(bad, "");
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().code() == absl::StatusCode::kInvalidArgument);
  }
}

TEST_CASE("device kernel lookup: missing entry lists the module's entries") {
  auto dev = sparkrt::Device::open({.backend = "mock"});
  REQUIRE(dev.ok());
  auto k = (*dev)->kernel("vector_ops", "vector_sub_f32");
  REQUIRE_FALSE(k.ok());
  CHECK(k.status().code() == absl::StatusCode::kNotFound);
  const std::string msg(k.status().message());
  CHECK(msg.find("no entry 'vector_sub_f32'") != std::string::npos);
  CHECK(msg.find("vector_add_f32, fill_u32, axpy_f32, empty_10_args, copy_args_u32") !=
        std::string::npos);

  auto missing = (*dev)->kernel("nope", "k");
  CHECK(missing.status().code() == absl::StatusCode::kNotFound);

  auto ok1 = (*dev)->kernel("vector_ops", "fill_u32");
  auto ok2 = (*dev)->kernel("vector_ops", "fill_u32");
  REQUIRE(ok1.ok());
  REQUIRE(ok2.ok());
  CHECK(&ok1->signature() == &ok2->signature());  // cached: one record per kernel
  CHECK(ok1->module() == "vector_ops");
  CHECK(ok1->entry() == "fill_u32");
}

TEST_CASE("device kernel lookup: a module with only a signature file runs on the mock") {
  fs::path dir = temp_folder("kpath_sig");
  write(dir / "sig_only.sig", ".visible .entry k(\n\t.param .u64 p,\n\t.param .u32 n\n)\n{\n}\n");
  KernelPathScope scope(dir.string());
  auto image = sparkrt::find_module("sig_only", "sm_90");
  REQUIRE(image.ok());
  CHECK(image->signatures.has_value());
  CHECK_FALSE(image->ptx.has_value());
  auto modules = sparkrt::list_modules();
  CHECK(std::find(modules.begin(), modules.end(), "sig_only") != modules.end());
  auto dev = sparkrt::Device::open({.backend = "mock"});
  REQUIRE(dev.ok());
  auto k = (*dev)->kernel("sig_only", "k");
  REQUIRE_MESSAGE(k.ok(), k.status().ToString());
  REQUIRE(k->signature().params.size() == 2);
  CHECK(k->signature().params[1].offset == 8);
  CHECK(sparkrt::KernelLaunch(**dev, *k).grid({1}).block({32}).arg(sparkrt::DevicePtr(0)).arg(3u)
            .launch()
            .ok());
  fs::remove_all(dir);
}

TEST_CASE("device kernel lookup: a signature file that disagrees with its PTX is refused") {
  fs::path dir = temp_folder("kpath_both");
  write(dir / "both.sig", ".visible .entry k(\n\t.param .u64 p\n)\n{\n}\n");
  write(dir / "both.ptx", ".visible .entry k(.param .u32 p) { ret; }\n");
  KernelPathScope scope(dir.string());
  auto dev = sparkrt::Device::open({.backend = "mock"});
  REQUIRE(dev.ok());
  auto k = (*dev)->kernel("both", "k");
  REQUIRE_FALSE(k.ok());
  CHECK(k.status().code() == absl::StatusCode::kFailedPrecondition);
  const std::string msg(k.status().message());
  CHECK(msg.find("both.sig and both.ptx disagree") != std::string::npos);
  CHECK(msg.find("parameter #0") != std::string::npos);
  CHECK(msg.find("sparkrt signatures both.ptx > both.sig") != std::string::npos);
  fs::remove_all(dir);
}

TEST_CASE("device kernel lookup: malformed PTX on the path is an error naming the module") {
  fs::path dir = temp_folder("kpath_bad");
  write(dir / "broken.ptx", ".entry k(.param .u32 a .param .u32 b) { ret; }\n");
  KernelPathScope scope(dir.string());
  auto dev = sparkrt::Device::open({.backend = "mock"});
  REQUIRE(dev.ok());
  auto k = (*dev)->kernel("broken", "k");
  REQUIRE_FALSE(k.ok());
  CHECK(k.status().code() == absl::StatusCode::kInvalidArgument);
  const std::string msg(k.status().message());
  CHECK(msg.find("kernel module 'broken'") != std::string::npos);
  CHECK(msg.find("malformed PTX") != std::string::npos);
  CHECK(msg.find("line 1") != std::string::npos);
  fs::remove_all(dir);
}

TEST_CASE("kernel store: names that are not regular files are passed over with their reason") {
  HostileFolder folder;
  KernelPathScope scope(folder.dir.string());
  const std::pair<const char*, const char*> cases[] = {
      {"fifo", "a FIFO, not a regular file"},
      {"folder", "a directory, not a regular file"},
      {"dangling", "a dangling symbolic link to no_such_target.ptx"},
      {"self", "a symbolic link loop"},
      {"null", "a character device, not a regular file"},
  };
  for (const auto& [name, reason] : cases) {
    CAPTURE(name);
    auto image = find_in_time(folder, name);
    REQUIRE_FALSE(image.ok());
    CHECK(image.status().code() == absl::StatusCode::kNotFound);
    const std::string file = (folder.dir / (std::string(name) + ".ptx")).string();
    CHECK_MESSAGE(contains(image.status(), "passed over " + file + " (" + reason + ")"),
                  image.status().message());
    // What is listed as available is what can be loaded.
    CHECK_FALSE(contains(image.status(), std::string(", ") + name + ","));
    CHECK(contains(image.status(), "good"));
  }
  auto good = find_in_time(folder, "good");
  REQUIRE(good.ok());
  CHECK(good->skipped.empty());

  const auto listing = sparkrt::scan_modules();
  const auto& names = listing.modules;
  CHECK(std::find(names.begin(), names.end(), "good") != names.end());
  for (const auto& [name, reason] : cases) {
    CAPTURE(name);
    CHECK(std::find(names.begin(), names.end(), name) == names.end());
    const std::string file = (folder.dir / (std::string(name) + ".ptx")).string();
    CHECK(std::any_of(listing.skipped.begin(), listing.skipped.end(), [&](const auto& f) {
      return f.path == file && f.reason == reason;
    }));
  }
  CHECK(sparkrt::list_modules() == names);
}

TEST_CASE("kernel store: a FIFO does not hide the module behind it, and is reported") {
  HostileFolder folder;
  REQUIRE(mkfifo((folder.dir / "vector_ops.ptx").c_str(), 0600) == 0);
  REQUIRE(mkfifo((folder.dir / "good.sm_90.cubin").c_str(), 0600) == 0);
  KernelPathScope scope(folder.dir.string());
  auto image = find_in_time(folder, "vector_ops");
  REQUIRE(image.ok());
  CHECK(image->origin != folder.dir.string());  // the installed or embedded one
  REQUIRE(image->skipped.size() == 1);
  CHECK(image->skipped[0].path == (folder.dir / "vector_ops.ptx").string());
  CHECK(image->skipped[0].reason == "a FIFO, not a regular file");
  {
    // A cubin that is not a file is passed over; the PTX is used.
    auto good = find_in_time(folder, "good");
    REQUIRE(good.ok());
    CHECK(good->cubin.empty());
    REQUIRE(good->skipped.size() == 1);
    CHECK(good->skipped[0].path == (folder.dir / "good.sm_90.cubin").string());
  }
  ::unlink((folder.dir / "vector_ops.ptx").c_str());
}

TEST_CASE("device kernel lookup: a FIFO or link loop named like a module fails at once") {
  HostileFolder folder;
  KernelPathScope scope(folder.dir.string());
  auto dev = sparkrt::Device::open({.backend = "mock"});
  REQUIRE(dev.ok());
  for (const char* name : {"fifo", "self"}) {
    CAPTURE(name);
    auto f = std::async(std::launch::async, [&] { return (*dev)->kernel(name, "k"); });
    if (!finishes(f)) {
      FAIL_CHECK("Device::kernel blocked");
      folder.unblock_fifo();
    }
    auto k = f.get();
    REQUIRE_FALSE(k.ok());
    CHECK(k.status().code() == absl::StatusCode::kNotFound);
    CHECK_MESSAGE(contains(k.status(), "passed over"), k.status().message());
  }
  CHECK((*dev)->kernel("good", "good_k").ok());
}

TEST_CASE("kernel store: a file over the size limit is refused without being read") {
  fs::path dir = temp_folder("kpath_huge");
  {
    std::ofstream(dir / "huge.ptx") << ".entry k() { ret; }\n";
  }
  // Sparse: no disk space, and read in full would take seconds.
  fs::resize_file(dir / "huge.ptx", sparkrt::kMaxModuleFileBytes + 1);
  KernelPathScope scope(dir.string());
  auto image = sparkrt::find_module("huge", "");
  REQUIRE_FALSE(image.ok());
  CHECK(image.status().code() == absl::StatusCode::kFailedPrecondition);
  CHECK_MESSAGE(contains(image.status(), "kernel module 'huge': " + (dir / "huge.ptx").string() +
                                             " is 268435457 bytes, more than the 256 MiB limit"),
                image.status().message());
  auto dev = sparkrt::Device::open({.backend = "mock"});
  REQUIRE(dev.ok());
  auto k = (*dev)->kernel("huge", "k");
  CHECK(k.status().code() == absl::StatusCode::kFailedPrecondition);
  CHECK(contains(k.status(), "256 MiB"));
  fs::remove_all(dir);
}

TEST_CASE("kernel store: a module file that cannot be read is an error naming it and why") {
  fs::path dir = temp_folder("kpath_unreadable");
  // Reading /proc/self/mem at offset 0 fails with EIO.
  fs::create_symlink("/proc/self/mem", dir / "eio.ptx");
  write(dir / "eio.sm_90.cubin", "");
  KernelPathScope scope(dir.string());
  auto image = sparkrt::find_module("eio", "");
  REQUIRE_FALSE(image.ok());
  CHECK_MESSAGE(contains(image.status(), "kernel module 'eio': " + (dir / "eio.ptx").string() +
                                             " cannot be read: Input/output error"),
                image.status().message());

  write(dir / "locked.ptx", ".entry k() { ret; }\n");
  fs::permissions(dir / "locked.ptx", fs::perms::none);
  auto locked = sparkrt::find_module("locked", "");
  if (geteuid() != 0) {  // root reads it anyway
    REQUIRE_FALSE(locked.ok());
    CHECK_MESSAGE(contains(locked.status(), (dir / "locked.ptx").string() +
                                                " cannot be opened: Permission denied"),
                  locked.status().message());
  }
  fs::remove_all(dir);
}

// ---- Concurrency, with loads held inside the "slow" test backend -------------

namespace {

// A device of the slow test backend over modules slow, fast, third, fourth
// and slow_flaky, each with entries k, k2 and slow_k.
struct SlowDevice {
  fs::path dir = temp_folder("kpath_slow");
  std::unique_ptr<KernelPathScope> scope;
  std::unique_ptr<sparkrt::Device> dev;
  const SparkrtTestSlowV1* slow = nullptr;

  SlowDevice() {
    for (const char* m : {"slow", "fast", "third", "fourth", "slow_flaky"})
      write(dir / (std::string(m) + ".ptx"),
            ".entry k(.param .u32 n) { ret; }\n.entry k2() { ret; }\n"
            ".entry slow_k(.param .u64 p) { ret; }\n");
    scope = std::make_unique<KernelPathScope>(dir.string());
    auto d = sparkrt::Device::open(
        {.backend = std::string(SPARKRT_TEST_PLUGIN_DIR) + "/libsparkrt_backend_slow.so"});
    REQUIRE_MESSAGE(d.ok(), d.status().message());
    dev = *std::move(d);
    slow = static_cast<const SparkrtTestSlowV1*>(dev->extension(SPARKRT_TEST_SLOW_EXTENSION));
    REQUIRE(slow != nullptr);
    slow->reset();
  }
  ~SlowDevice() {
    slow->hold(0);  // never leave a thread held
    dev.reset();
    fs::remove_all(dir);
  }
  std::future<absl::StatusOr<sparkrt::Kernel>> kernel_async(std::string module, std::string entry) {
    return std::async(std::launch::async,
                      [this, module, entry] { return dev->kernel(module, entry); });
  }
};

}  // namespace

TEST_CASE("device kernel lookup: a first load in progress blocks no other module or cached kernel") {
  SlowDevice d;
  auto cached = d.dev->kernel("fast", "k");
  REQUIRE(cached.ok());

  d.slow->hold(1);
  auto held = d.kernel_async("slow", "k");
  REQUIRE(d.slow->wait_held(1, kPatienceMs));  // inside module_load("slow"), held there

  auto others = std::async(std::launch::async, [&] {
    auto again = d.dev->kernel("fast", "k");         // cached
    auto other_entry = d.dev->kernel("fast", "k2");  // a first resolution
    auto first_load = d.dev->kernel("third", "k");   // a first load
    return again.ok() && other_entry.ok() && first_load.ok() &&
           &again->signature() == &cached->signature();
  });
  CHECK_MESSAGE(finishes(others), "lookups waited for another module's load");
  CHECK(held.wait_for(std::chrono::seconds(0)) == std::future_status::timeout);  // still held
  d.slow->hold(0);
  CHECK(others.get());
  auto k = held.get();
  REQUIRE(k.ok());
  CHECK(k->module() == "slow");
  CHECK(d.slow->loads("slow") == 1);
  CHECK(d.slow->loads("third") == 1);
}

TEST_CASE("device kernel lookup: an entry resolution in progress blocks no other lookup") {
  SlowDevice d;
  auto cached = d.dev->kernel("fast", "k");
  REQUIRE(cached.ok());

  d.slow->hold(1);
  auto held = d.kernel_async("fast", "slow_k");  // inside kernel_get("slow_k"), held there
  REQUIRE(d.slow->wait_held(1, kPatienceMs));

  auto others = std::async(std::launch::async, [&] {
    return d.dev->kernel("fast", "k").ok() && d.dev->kernel("third", "k").ok() &&
           d.dev->kernel("fourth", "k").ok();
  });
  CHECK_MESSAGE(finishes(others), "lookups waited for another entry's resolution");
  CHECK(held.wait_for(std::chrono::seconds(0)) == std::future_status::timeout);
  d.slow->hold(0);
  CHECK(others.get());
  CHECK(held.get().ok());
  CHECK(d.slow->resolutions("slow_k") == 1);
}

TEST_CASE("device kernel lookup: many threads asking for one module load it once") {
  SlowDevice d;
  constexpr int kThreads = 8;
  d.slow->hold(1);
  std::vector<std::future<absl::StatusOr<sparkrt::Kernel>>> calls;
  for (int i = 0; i < kThreads; ++i) calls.push_back(d.kernel_async("slow", "slow_k"));
  REQUIRE(d.slow->wait_held(1, kPatienceMs));
  // Give the others time to queue behind the load (the counts below hold
  // however many of them arrive before it ends).
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  CHECK(d.slow->loads("slow") == 1);
  d.slow->hold(0);
  std::vector<const sparkrt::KernelSignature*> records;
  for (auto& call : calls) {
    auto k = call.get();
    REQUIRE_MESSAGE(k.ok(), k.status().message());
    records.push_back(&k->signature());
  }
  CHECK(std::all_of(records.begin(), records.end(), [&](auto* r) { return r == records[0]; }));
  CHECK(d.slow->loads("slow") == 1);
  CHECK(d.slow->resolutions("slow_k") == 1);
  CHECK(d.slow->overlaps() == 0);
}

TEST_CASE("device kernel lookup: a failed load is reported to every waiter, then retried") {
  SlowDevice d;
  constexpr int kThreads = 4;
  d.slow->fail(1);
  d.slow->hold(1);
  std::vector<std::future<absl::StatusOr<sparkrt::Kernel>>> calls;
  for (int i = 0; i < kThreads; ++i) calls.push_back(d.kernel_async("slow_flaky", "k"));
  REQUIRE(d.slow->wait_held(1, kPatienceMs));
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  d.slow->hold(0);
  for (auto& call : calls) {
    auto k = call.get();
    REQUIRE_FALSE(k.ok());
    CHECK(k.status().code() == absl::StatusCode::kInternal);
    CHECK(contains(k.status(), "loading kernel module 'slow_flaky'"));
    CHECK(contains(k.status(), "told to fail"));
  }
  CHECK(d.slow->overlaps() == 0);  // never two loads of it at once
  const int loads = d.slow->loads("slow_flaky");
  CHECK(loads >= 1);
  CHECK(loads <= kThreads);

  // Fixed: the next lookup loads it.
  d.slow->fail(0);
  auto k = d.dev->kernel("slow_flaky", "k");
  REQUIRE_MESSAGE(k.ok(), k.status().message());
  CHECK(d.slow->loads("slow_flaky") == loads + 1);
}

TEST_CASE("device close: waits for a load in progress, then unloads every module") {
  SlowDevice d;
  REQUIRE(d.dev->kernel("fast", "k").ok());
  d.slow->hold(1);
  auto held = d.kernel_async("slow", "k");
  REQUIRE(d.slow->wait_held(1, kPatienceMs));
  auto closing = std::async(std::launch::async, [&] { return d.dev->close(); });
  // close() must not close the device under the load.
  CHECK(closing.wait_for(std::chrono::milliseconds(100)) == std::future_status::timeout);
  d.slow->hold(0);
  REQUIRE(finishes(closing));
  CHECK(closing.get().ok());
  // Loaded before close went on; its entry resolved before close or refused.
  auto k = held.get();
  if (!k.ok()) CHECK(contains(k.status(), "closed"));
  CHECK(d.slow->unloads() == 2);  // fast and slow: nothing leaked
  auto after = d.dev->kernel("third", "k");
  CHECK(after.status().code() == absl::StatusCode::kFailedPrecondition);
  CHECK(contains(after.status(), "closed"));
  CHECK(d.slow->loads("third") == 0);
}
