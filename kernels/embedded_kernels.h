// Kernel images linked into libsparkrt (generated table, see CMakeLists.txt).
#ifndef SPARKRT_KERNELS_EMBEDDED_KERNELS_H_
#define SPARKRT_KERNELS_EMBEDDED_KERNELS_H_

namespace sparkrt::detail {

struct EmbeddedImage {
  const char* file;  // "vector_ops.ptx", "vector_ops.sm_90.cubin"; nullptr ends the table
  const char* begin;
  const char* end;
};

const EmbeddedImage* embedded_images();

}  // namespace sparkrt::detail

#endif  // SPARKRT_KERNELS_EMBEDDED_KERNELS_H_
