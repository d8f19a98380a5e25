// The "slow" test backend's control extension (tests/plugins/slow_backend.cc):
// a backend whose loads can be held inside the plugin, so tests can prove what
// other threads can do while a load is in progress.
#ifndef SPARKRT_TESTS_PLUGINS_SLOW_BACKEND_H_
#define SPARKRT_TESTS_PLUGINS_SLOW_BACKEND_H_

#include <stdint.h>

#define SPARKRT_TEST_SLOW_EXTENSION "sparkrt.test.slow.v1"

typedef struct SparkrtTestSlowV1 {
  uint32_t struct_size;
  // While on, module_load of a module named slow* and kernel_get of an entry
  // named slow* wait inside the plugin until it is turned off.
  void (*hold)(int on);
  // Waits until `count` calls are waiting in a hold; 1 if they are, 0 after
  // `timeout_ms` (a test fails instead of hanging).
  int (*wait_held)(int count, int timeout_ms);
  // While on, module_load of a module whose name contains "flaky" fails.
  void (*fail)(int on);
  // module_load calls for `module`, kernel_get calls for `entry`, module
  // unloads, and calls that began while a call for the same name was still
  // in progress, since the library was loaded or reset.
  int (*loads)(const char* module);
  int (*resolutions)(const char* entry);
  int (*unloads)(void);
  int (*overlaps)(void);
  void (*reset)(void);
} SparkrtTestSlowV1;

#endif  // SPARKRT_TESTS_PLUGINS_SLOW_BACKEND_H_
