/* The C API from C99 (built with -std=c99 -Wall -Wextra -Wpedantic -Werror):
 * the header compiles as C, and a program opens the mock, looks up
 * vector_add_f32, launches it with the sparkrt_arg_* functions, sees a wrong
 * launch refused, and closes; the trace calls refuse what they must. Exit
 * status 0 on success, 1 with the reason on stderr otherwise. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sparkrt/sparkrt_c.h"

static int failures = 0;

/* Reports a failed status (and frees it); 1 when `st` was an error. */
static int failed(sparkrt_status* st, const char* what) {
  if (st == NULL) return 0;
  fprintf(stderr, "%s: %s: %s\n", what, sparkrt_code_name(sparkrt_status_code(st)),
          sparkrt_status_message(st));
  sparkrt_status_free(st);
  ++failures;
  return 1;
}

static void expect(int ok, const char* what) {
  if (!ok) {
    fprintf(stderr, "check failed: %s\n", what);
    ++failures;
  }
}

int main(void) {
  sparkrt_open_options options;
  sparkrt_device* dev = NULL;
  sparkrt_device_properties props;
  sparkrt_kernel* add = NULL;
  sparkrt_kernel_info info;
  sparkrt_launch_config cfg = {SPARKRT_C_LAUNCH_CONFIG_SIZE, {4, 1, 1}, {256, 1, 1}, 0, 0, 0,
                               {0, 0, 0}};
  SparkrtDevicePtr a = 0, b = 0, out = 0;
  const uint32_t n = 1000;
  sparkrt_arg args[4];
  sparkrt_status* st;

  expect(sparkrt_c_api_version() >> 16 == SPARKRT_C_API_MAJOR, "library major == header major");

  /* No trace runs (SPARKRT_TRACE is cleared): stop has none to end. */
  expect(sparkrt_trace_enabled() == 0, "no trace runs");
  st = sparkrt_trace_stop();
  expect(sparkrt_status_code(st) == SPARKRT_FAILED_PRECONDITION, "stop without a trace is refused");
  sparkrt_status_free(st);
  st = sparkrt_trace_start(NULL);
  expect(sparkrt_status_code(st) == SPARKRT_INVALID_ARGUMENT, "a NULL trace path is refused");
  sparkrt_status_free(st);
  expect(sparkrt_trace_enabled() == 0, "a refused start starts nothing");
  st = sparkrt_trace_range_pop();
  expect(sparkrt_status_code(st) == SPARKRT_FAILED_PRECONDITION, "a pop with no range open is refused");
  sparkrt_status_free(st);

  memset(&options, 0, sizeof options);
  options.struct_size = SPARKRT_C_OPEN_OPTIONS_SIZE;
  options.backend = "mock";
  options.device_index = 0;
  if (failed(sparkrt_device_open(&options, &dev), "sparkrt_device_open")) return 1;

  memset(&props, 0, sizeof props);
  props.struct_size = SPARKRT_C_DEVICE_PROPERTIES_SIZE;
  if (!failed(sparkrt_device_properties_get(dev, &props), "sparkrt_device_properties_get"))
    expect(strcmp(props.backend, "mock") == 0, "the mock backend was opened");

  if (failed(sparkrt_kernel_get(dev, "vector_ops", "vector_add_f32", &add), "sparkrt_kernel_get")) {
    sparkrt_status_free(sparkrt_device_close(dev));
    return 1;
  }
  memset(&info, 0, sizeof info);
  info.struct_size = SPARKRT_C_KERNEL_INFO_SIZE;
  if (!failed(sparkrt_kernel_info_get(add, &info), "sparkrt_kernel_info_get"))
    expect(info.num_params == 4, "vector_add_f32 has 4 parameters");

  failed(sparkrt_alloc(dev, n * sizeof(float), &a), "sparkrt_alloc a");
  failed(sparkrt_alloc(dev, n * sizeof(float), &b), "sparkrt_alloc b");
  failed(sparkrt_alloc(dev, n * sizeof(float), &out), "sparkrt_alloc out");

  args[0] = sparkrt_arg_ptr(a);
  args[1] = sparkrt_arg_ptr(b);
  args[2] = sparkrt_arg_ptr(out);
  args[3] = sparkrt_arg_u32(n);
  failed(sparkrt_launch(add, &cfg, args, 4), "sparkrt_launch");
  failed(sparkrt_stream_synchronize(dev, 0), "sparkrt_stream_synchronize");

  /* The count as a float: a wrong kind for the .u32, refused. */
  args[3] = sparkrt_arg_f32(1000.0f);
  st = sparkrt_launch(add, &cfg, args, 4);
  expect(st != NULL, "a float for the .u32 is refused");
  expect(sparkrt_status_code(st) == SPARKRT_INVALID_ARGUMENT, "refused with INVALID_ARGUMENT");
  expect(strstr(sparkrt_status_message(st), "vector_add_f32") != NULL,
         "the message names the entry");
  sparkrt_status_free(st);
  /* And one argument short. */
  st = sparkrt_launch(add, &cfg, args, 3);
  expect(sparkrt_status_code(st) == SPARKRT_INVALID_ARGUMENT, "a missing argument is refused");
  sparkrt_status_free(st);

  failed(sparkrt_free(dev, a), "sparkrt_free a");
  failed(sparkrt_free(dev, b), "sparkrt_free b");
  failed(sparkrt_free(dev, out), "sparkrt_free out");
  failed(sparkrt_device_close(dev), "sparkrt_device_close");
  if (failures != 0) {
    fprintf(stderr, "%d failures\n", failures);
    return EXIT_FAILURE;
  }
  printf("c_header_test: ok\n");
  return EXIT_SUCCESS;
}
