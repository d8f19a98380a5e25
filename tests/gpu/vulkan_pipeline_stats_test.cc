// SPARKRT_VULKAN_PIPELINE_STATS (backends/vulkan/README.md, "Pipeline
// statistics"): with 1, every pipeline the vulkan backend creates writes one
// line of the driver's compile statistics to stderr, where the device offers
// VK_KHR_pipeline_executable_properties (NVIDIA's driver does, Debian 12's
// lavapipe does not); where it does not, the switch is accepted, one note
// says so, and launches run as before. Any value other than 0 or 1 fails the
// open, naming the variable. Whether the device offers the extension is asked
// of the Vulkan loader here, not of the backend.
#define VK_NO_PROTOTYPES
#include <vulkan/vulkan.h>

#include <dlfcn.h>
#include <doctest/doctest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "gpu_backend.h"
#include "sparkrt/sparkrt.h"
#include "status_checks.h"

namespace sparkrt::gpu_test {
namespace {

constexpr char kVariable[] = "SPARKRT_VULKAN_PIPELINE_STATS";

// Sets kVariable for one scope, then removes it (the test main starts with
// no SPARKRT_* variable set).
class ScopedSwitch {
 public:
  explicit ScopedSwitch(const char* value) { setenv(kVariable, value, 1); }
  ~ScopedSwitch() { unsetenv(kVariable); }
};

// Collects what the process writes to stderr from construction to text(),
// which restores stderr and writes the collected output to it again, so that
// the test's log shows it and a report of the validation layer still fails
// the test. After a failed REQUIRE the destructor does the same.
class StderrCapture {
 public:
  StderrCapture() {
    std::fflush(stderr);
    file_ = std::tmpfile();
    REQUIRE(file_ != nullptr);
    saved_ = ::dup(2);
    REQUIRE(saved_ >= 0);
    ::dup2(::fileno(file_), 2);
  }
  ~StderrCapture() {
    if (file_ != nullptr) text();
  }

  std::string text() {
    restore();
    std::string out;
    if (file_ == nullptr) return out;
    std::rewind(file_);
    char buffer[4096];
    for (size_t n; (n = std::fread(buffer, 1, sizeof buffer, file_)) > 0;) out.append(buffer, n);
    std::fputs(out.c_str(), stderr);
    std::fclose(file_);
    file_ = nullptr;
    return out;
  }

 private:
  void restore() {
    if (saved_ < 0) return;
    std::fflush(stderr);
    ::dup2(saved_, 2);
    ::close(saved_);
    saved_ = -1;
  }

  std::FILE* file_ = nullptr;
  int saved_ = -1;
};

std::vector<std::string> lines_starting(const std::string& text, const std::string& prefix) {
  std::vector<std::string> out;
  size_t at = 0;
  while (at < text.size()) {
    size_t end = text.find('\n', at);
    if (end == std::string::npos) end = text.size();
    if (text.compare(at, prefix.size(), prefix) == 0) out.push_back(text.substr(at, end - at));
    at = end + 1;
  }
  return out;
}

// Whether Vulkan device `index` (the loader's order, as the backend's) offers
// VK_KHR_pipeline_executable_properties with its pipelineExecutableInfo feature.
bool device_offers_statistics(int index) {
  void* loader = dlopen("libvulkan.so.1", RTLD_NOW | RTLD_LOCAL);
  REQUIRE_MESSAGE(loader != nullptr,
                  "libvulkan.so.1 does not open, though the backend's device did");
  auto get = reinterpret_cast<PFN_vkGetInstanceProcAddr>(dlsym(loader, "vkGetInstanceProcAddr"));
  const bool has_get = get != nullptr;
  REQUIRE_MESSAGE(has_get, "libvulkan.so.1 has no vkGetInstanceProcAddr");
  auto create = reinterpret_cast<PFN_vkCreateInstance>(get(nullptr, "vkCreateInstance"));
  const bool has_create = create != nullptr;
  REQUIRE_MESSAGE(has_create, "the loader has no vkCreateInstance");
  VkApplicationInfo app{};
  app.sType = VK_STRUCTURE_TYPE_APPLICATION_INFO;
  app.apiVersion = VK_API_VERSION_1_2;
  VkInstanceCreateInfo info{};
  info.sType = VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO;
  info.pApplicationInfo = &app;
  VkInstance instance = VK_NULL_HANDLE;
  REQUIRE(create(&info, nullptr, &instance) == VK_SUCCESS);
#define LOAD(name) auto name = reinterpret_cast<PFN_##name>(get(instance, #name))
  LOAD(vkEnumeratePhysicalDevices);
  LOAD(vkEnumerateDeviceExtensionProperties);
  LOAD(vkGetPhysicalDeviceFeatures2);
  LOAD(vkDestroyInstance);
#undef LOAD
  uint32_t n = 0;
  vkEnumeratePhysicalDevices(instance, &n, nullptr);
  std::vector<VkPhysicalDevice> devices(n);
  vkEnumeratePhysicalDevices(instance, &n, devices.data());
  REQUIRE(static_cast<uint32_t>(index) < n);
  uint32_t count = 0;
  vkEnumerateDeviceExtensionProperties(devices[index], nullptr, &count, nullptr);
  std::vector<VkExtensionProperties> extensions(count);
  vkEnumerateDeviceExtensionProperties(devices[index], nullptr, &count, extensions.data());
  bool offered = false;
  for (const auto& e : extensions)
    offered |=
        std::strcmp(e.extensionName, VK_KHR_PIPELINE_EXECUTABLE_PROPERTIES_EXTENSION_NAME) == 0;
  if (offered) {
    VkPhysicalDevicePipelineExecutablePropertiesFeaturesKHR executable{};
    executable.sType =
        VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PIPELINE_EXECUTABLE_PROPERTIES_FEATURES_KHR;
    VkPhysicalDeviceFeatures2 features{};
    features.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2;
    features.pNext = &executable;
    vkGetPhysicalDeviceFeatures2(devices[index], &features);
    offered = executable.pipelineExecutableInfo == VK_TRUE;
  }
  vkDestroyInstance(instance, nullptr);
  dlclose(loader);
  return offered;
}

// Launches vector_add_f32 on `n` elements with `block` threads a block, twice
// (the second launch reuses the first's pipeline), and checks the sums.
void add_twice(Device& dev, Kernel k, uint32_t block) {
  constexpr uint32_t n = 1000;
  std::vector<float> a(n), b(n), out(n);
  for (uint32_t i = 0; i < n; ++i) {
    a[i] = static_cast<float>(i);
    b[i] = 0.5f * static_cast<float>(i);
  }
  auto da = dev.alloc(n * 4), db = dev.alloc(n * 4), dout = dev.alloc(n * 4);
  REQUIRE_OK(da.status());
  REQUIRE_OK(db.status());
  REQUIRE_OK(dout.status());
  REQUIRE_OK(dev.copy_h2d(a, *da));
  REQUIRE_OK(dev.copy_h2d(b, *db));
  for (int i = 0; i < 2; ++i) {
    REQUIRE_OK(dev.memset(*dout, 0xFF, n * 4));
    REQUIRE_OK(KernelLaunch(dev, k)
                   .grid({div_ceil(n, block)})
                   .block({block})
                   .arg(*da)
                   .arg(*db)
                   .arg(*dout)
                   .arg(n)
                   .launch());
    REQUIRE_OK(dev.copy_d2h(*dout, out));
    uint32_t wrong = 0;
    for (uint32_t j = 0; j < n; ++j) wrong += out[j] != a[j] + b[j] ? 1 : 0;
    CHECK(wrong == 0);
  }
  for (auto p : {*da, *db, *dout}) REQUIRE_OK(dev.free(p));
}

TEST_CASE("SPARKRT_VULKAN_PIPELINE_STATS other than 0 or 1 fails the open, naming it") {
  for (const char* value : {"yes", "true", "2", "01", " 1", "1 ", "on"}) {
    INFO("value '", value, "'");
    ScopedSwitch on(value);
    auto dev = Device::open({.backend = backend()});
    REQUIRE_FALSE(dev.ok());
    CHECK(dev.status().code() == absl::StatusCode::kInvalidArgument);
    CHECK_MESSAGE(sparkrt::testing::contains(dev.status(), kVariable), dev.status().ToString());
    CHECK_MESSAGE(sparkrt::testing::contains(dev.status(), std::string("'") + value + "'"),
                  dev.status().ToString());
  }
}

TEST_CASE("SPARKRT_VULKAN_PIPELINE_STATS 0 or empty reports nothing") {
  for (const char* value : {"0", ""}) {
    INFO("value '", value, "'");
    ScopedSwitch off(value);
    StderrCapture err;
    auto dev = Device::open({.backend = backend()});
    REQUIRE_OK(dev.status());
    auto k = (*dev)->kernel("vector_ops", "vector_add_f32");
    REQUIRE_OK(k.status());
    add_twice(**dev, *k, 256);
    REQUIRE_OK((*dev)->close());
    const std::string text = err.text();
    CHECK(text.find("sparkrt vulkan pipeline") == std::string::npos);
    CHECK(text.find(kVariable) == std::string::npos);
  }
}

TEST_CASE("SPARKRT_VULKAN_PIPELINE_STATS=1 writes a line per pipeline where the driver can") {
  StderrCapture err;
  int index = 0;
  {
    ScopedSwitch on("1");
    auto dev = Device::open({.backend = backend()});
    REQUIRE_OK(dev.status());
    index = (*dev)->index();
    auto k = (*dev)->kernel("vector_ops", "vector_add_f32");
    REQUIRE_OK(k.status());
    add_twice(**dev, *k, 256);
    add_twice(**dev, *k, 128);
    // Bytes a fill of whole words cannot set: the built-in fill_bytes kernel.
    auto odd = (*dev)->alloc(64);
    REQUIRE_OK(odd.status());
    REQUIRE_OK((*dev)->memset(*odd + 1, 7, 6));
    REQUIRE_OK((*dev)->synchronize());
    REQUIRE_OK((*dev)->free(*odd));
    REQUIRE_OK((*dev)->close());
  }
  const std::string text = err.text();
  const auto all = lines_starting(text, "sparkrt vulkan pipeline ");
  const auto b256 =
      lines_starting(text, "sparkrt vulkan pipeline vector_ops.vector_add_f32 block 256x1x1: ");
  const auto b128 =
      lines_starting(text, "sparkrt vulkan pipeline vector_ops.vector_add_f32 block 128x1x1: ");
  const auto fill =
      lines_starting(text, "sparkrt vulkan pipeline sparkrt_vulkan_builtin.fill_bytes block ");
  if (device_offers_statistics(index)) {
    MESSAGE("the driver's statistics:\n", text);
    CHECK(b256.size() == 1);  // one line per pipeline, not per launch
    CHECK(b128.size() == 1);
    CHECK(fill.size() == 1);
    for (const auto& line : all) {
      INFO(line);
      const std::string stats = line.substr(line.find(": ") + 2);
      CHECK(stats.find('=') != std::string::npos);
      CHECK(stats.find("no statistics") == std::string::npos);
    }
    CHECK(text.find("does not offer") == std::string::npos);
  } else {
    MESSAGE("the device offers no pipeline statistics; the switch is accepted:\n", text);
    CHECK(all.empty());
    CHECK(lines_starting(text, std::string("sparkrt vulkan: ") + kVariable + "=1, but device ")
              .size() == 1);
    CHECK(text.find(VK_KHR_PIPELINE_EXECUTABLE_PROPERTIES_EXTENSION_NAME) != std::string::npos);
  }
}

}  // namespace
}  // namespace sparkrt::gpu_test
