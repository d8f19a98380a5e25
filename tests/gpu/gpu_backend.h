// The backend a GPU test executable runs against the cpu reference:
// gpu_main.cc sets it from `--backend=NAME` (cuda unless given).
#ifndef SPARKRT_TESTS_GPU_GPU_BACKEND_H_
#define SPARKRT_TESTS_GPU_GPU_BACKEND_H_

#include <string>

namespace sparkrt::gpu_test {

inline std::string& backend() {
  static std::string name = "cuda";
  return name;
}

}  // namespace sparkrt::gpu_test

#endif  // SPARKRT_TESTS_GPU_GPU_BACKEND_H_
