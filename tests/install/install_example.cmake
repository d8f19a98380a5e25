# Installs a sparkrt build, moves the installed tree (the install must be
# relocatable), then, against the moved tree:
#  - builds examples/launch_vector_add with find_package(sparkrt) and with
#    pkg-config, and runs it on the mock backend (the pkg-config build with
#    no LD_LIBRARY_PATH: the flags alone must make it start);
#  - builds the out-of-tree plugin examples/host_plugin with the SDK, runs the
#    example on it, where the result is computed and checked, and passes the
#    installed `sparkrt conformance` with it;
#  - compiles examples/c_decode (the C API alone) with the C compiler and the
#    tree's include/ and lib/ (and with pkg-config's sparkrt_c where the tool
#    is installed), and runs it on the mock and cpu backends.
#
# Inputs (-D): BUILD_DIR, EXAMPLES_DIR, WORK_DIR, GENERATOR, CXX_COMPILER,
# C_COMPILER, SANITIZE, LIBDIR, PLUGIN_SUBDIR, KERNEL_SUBDIR.

function(run)
  cmake_parse_arguments(ARG "" "" "COMMAND" ${ARGN})
  string(JOIN " " shown ${ARG_COMMAND})
  message(STATUS "$ ${shown}")
  execute_process(COMMAND ${ARG_COMMAND} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  message("${out}")
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "failed (exit code ${rc}): ${shown}")
  endif()
  set(run_output "${out}" PARENT_SCOPE)
endfunction()

file(REMOVE_RECURSE ${WORK_DIR})
set(staged ${WORK_DIR}/staged)
set(prefix ${WORK_DIR}/moved)

run(COMMAND ${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${staged})
file(RENAME ${staged} ${prefix})

foreach(file
    include/sparkrt/sparkrt.h include/sparkrt/device.h include/sparkrt/kernel_launch.h
    include/sparkrt/plugin_api.h include/sparkrt/plugin_sdk.h include/sparkrt/ops/kv_cache.h
    ${LIBDIR}/libsparkrt.so ${LIBDIR}/libsparkrt_ops.so
    ${PLUGIN_SUBDIR}/libsparkrt_backend_mock.so
    ${KERNEL_SUBDIR}/vector_ops.sig ${KERNEL_SUBDIR}/vector_ops.spv
    bin/sparkrt
    ${LIBDIR}/cmake/sparkrt/sparkrtConfig.cmake
    ${LIBDIR}/cmake/sparkrt/sparkrtConfigVersion.cmake
    ${LIBDIR}/cmake/sparkrt/sparkrtTargets.cmake
    ${LIBDIR}/pkgconfig/sparkrt.pc)
  if(NOT EXISTS ${prefix}/${file})
    message(FATAL_ERROR "not installed: ${file}")
  endif()
endforeach()
# Exactly the build's plugin folder ships: no test fixture, nothing missing.
file(GLOB plugins RELATIVE ${prefix}/${PLUGIN_SUBDIR} ${prefix}/${PLUGIN_SUBDIR}/*)
file(GLOB built_plugins RELATIVE ${BUILD_DIR}/${PLUGIN_SUBDIR} ${BUILD_DIR}/${PLUGIN_SUBDIR}/*)
message(STATUS "installed plugins: ${plugins}")
if(NOT plugins STREQUAL built_plugins)
  message(FATAL_ERROR "installed plugins [${plugins}] differ from the build's [${built_plugins}]")
endif()
set(EXAMPLE_DIR ${EXAMPLES_DIR}/launch_vector_add)

# The installed CLI finds the installed plugins and kernels from where the tree
# now is, not from where it was built or first installed.
set(ENV{SPARKRT_BACKEND} mock)
run(COMMAND ${prefix}/bin/sparkrt info)
if(NOT run_output MATCHES "${prefix}/${PLUGIN_SUBDIR}/libsparkrt_backend_mock\\.so")
  message(FATAL_ERROR "the installed sparkrt did not load the mock from ${prefix}/${PLUGIN_SUBDIR}")
endif()
run(COMMAND ${prefix}/bin/sparkrt modules vector_ops)
if(NOT run_output MATCHES "vector_ops \\(from ${prefix}/${KERNEL_SUBDIR}")
  message(FATAL_ERROR "the installed sparkrt did not find its kernels in ${prefix}/${KERNEL_SUBDIR}")
endif()

# A sanitized libsparkrt needs the sanitizer runtime in the executable.
set(flags "-Wall -Wextra -Werror")
if(SANITIZE)
  string(APPEND flags " -fsanitize=address,undefined -fno-omit-frame-pointer")
endif()

# 1. CMake package.
set(example_build ${WORK_DIR}/example-cmake)
run(COMMAND ${CMAKE_COMMAND} -G ${GENERATOR} -S ${EXAMPLE_DIR} -B ${example_build}
            -DCMAKE_PREFIX_PATH=${prefix} -DCMAKE_CXX_COMPILER=${CXX_COMPILER}
            "-DCMAKE_CXX_FLAGS=${flags}" -DCMAKE_BUILD_TYPE=RelWithDebInfo)
run(COMMAND ${CMAKE_COMMAND} --build ${example_build})
run(COMMAND ${example_build}/launch_vector_add)
message(STATUS "example (CMake package) passed")

# 2. pkg-config, where the tool is installed.
find_program(PKG_CONFIG pkg-config)
if(PKG_CONFIG)
  set(ENV{PKG_CONFIG_PATH} ${prefix}/${LIBDIR}/pkgconfig)
  run(COMMAND ${PKG_CONFIG} --cflags --libs sparkrt)
  string(STRIP "${run_output}" pc_flags)
  separate_arguments(pc_flags UNIX_COMMAND "${pc_flags}")
  separate_arguments(extra UNIX_COMMAND "${flags}")
  run(COMMAND ${PKG_CONFIG} --variable=libdir sparkrt)
  string(STRIP "${run_output}" pc_libdir)
  file(REAL_PATH "${pc_libdir}" pc_libdir_real)
  file(REAL_PATH "${prefix}/${LIBDIR}" libdir_real)
  if(NOT pc_libdir_real STREQUAL libdir_real)
    message(FATAL_ERROR "sparkrt.pc gives libdir ${pc_libdir}, not the moved tree's ${libdir_real}")
  endif()
  set(exe ${WORK_DIR}/example-pkgconfig)
  run(COMMAND ${CXX_COMPILER} -std=c++20 ${extra} ${EXAMPLE_DIR}/main.cc -o ${exe} ${pc_flags})
  # As a user starts it: the rpath from the flags finds libsparkrt.so.
  run(COMMAND ${CMAKE_COMMAND} -E env --unset=LD_LIBRARY_PATH ${exe})
  message(STATUS "example (pkg-config) passed")
else()
  message(STATUS "pkg-config not found: the pkg-config build of the example was not tried")
endif()

# 3. An out-of-tree plugin built with the installed SDK, loaded by path and by
#    name through SPARKRT_PLUGIN_PATH. It computes, so the example checks a + b.
set(plugin_build ${WORK_DIR}/host-plugin)
run(COMMAND ${CMAKE_COMMAND} -G ${GENERATOR} -S ${EXAMPLES_DIR}/host_plugin -B ${plugin_build}
            -DCMAKE_PREFIX_PATH=${prefix} -DCMAKE_CXX_COMPILER=${CXX_COMPILER}
            "-DCMAKE_CXX_FLAGS=${flags}" -DCMAKE_BUILD_TYPE=RelWithDebInfo)
run(COMMAND ${CMAKE_COMMAND} --build ${plugin_build})
set(plugin ${plugin_build}/libsparkrt_backend_example_host.so)
set(ENV{SPARKRT_BACKEND} ${plugin})
run(COMMAND ${example_build}/launch_vector_add)
if(NOT run_output MATCHES "all 3000 elements equal a \\+ b")
  message(FATAL_ERROR "the example did not compute and check a + b on the example_host plugin")
endif()
set(ENV{SPARKRT_PLUGIN_PATH} ${plugin_build})
set(ENV{SPARKRT_BACKEND} example_host)
run(COMMAND ${prefix}/bin/sparkrt info)
if(NOT run_output MATCHES "example_host 0\\.1\\.0: 1 device.*device 0 of backend example_host")
  message(FATAL_ERROR "sparkrt info did not find the example_host plugin through SPARKRT_PLUGIN_PATH")
endif()
# The demo's decode step needs the KV-cache kernels, which example_host does
# not run: the installed CLI must say which kernel is missing and exit 1.
execute_process(COMMAND ${prefix}/bin/sparkrt demo RESULT_VARIABLE rc OUTPUT_VARIABLE out
                ERROR_VARIABLE err)
message("${out}${err}")
if(NOT rc EQUAL 1 OR NOT err MATCHES "^sparkrt demo: [^\n]*fill_slots_from_block_table")
  message(FATAL_ERROR "sparkrt demo on example_host: expected exit code 1 and an error naming "
                      "the kernel it lacks; got ${rc}")
endif()

# The installed conformance suite passes with the plugin, by path, and skips
# the graph cases because the plugin offers no sparkrt.graph.v1.
unset(ENV{SPARKRT_PLUGIN_PATH})
unset(ENV{SPARKRT_BACKEND})
run(COMMAND ${prefix}/bin/sparkrt conformance --backend ${plugin})
if(NOT run_output MATCHES "conformance: backend example_host [^\n]*plugin ${plugin}\n"
   OR NOT run_output MATCHES "feature skipped: graphs: the plugin does not offer sparkrt\\.graph\\.v1"
   OR NOT run_output MATCHES "test cases: *[1-9][0-9]* \\| *[1-9][0-9]* passed \\| *0 failed"
   OR NOT run_output MATCHES "Status: SUCCESS")
  message(FATAL_ERROR "sparkrt conformance on example_host: expected every case to pass and the "
                      "graph cases to be skipped")
endif()
# The same from the plugin's own project: sparkrt_add_conformance_test.
get_filename_component(cmake_bin ${CMAKE_COMMAND} DIRECTORY)
run(COMMAND ${cmake_bin}/ctest --test-dir ${plugin_build} --output-on-failure)
if(NOT run_output MATCHES "conformance\\.example_host [.]* *Passed")
  message(FATAL_ERROR "ctest in the plugin's build did not pass conformance.example_host")
endif()
message(STATUS "out-of-tree plugin passed")

# The installed suite on the installed mock, by name.
run(COMMAND ${prefix}/bin/sparkrt conformance --backend mock)
if(NOT run_output MATCHES "plugin ${prefix}/${PLUGIN_SUBDIR}/libsparkrt_backend_mock\\.so\n")
  message(FATAL_ERROR "the installed sparkrt conformance did not test the installed mock")
endif()
message(STATUS "installed conformance suite passed")

# 4. The C API alone: examples/c_decode, one decode step of the KV-cache ops,
#    compiled as its comment says with nothing but the tree's include/ and
#    lib/ (no CMake package, no C++), then run on a recording and a computing
#    backend. The rpath finds libsparkrt_c.so; LD_LIBRARY_PATH is unset.
if(NOT C_COMPILER)
  message(FATAL_ERROR "install_example.cmake needs -DC_COMPILER=<the C compiler>")
endif()
foreach(file include/sparkrt/sparkrt_c.h include/sparkrt/extensions/mock.h
             ${LIBDIR}/libsparkrt_c.so ${LIBDIR}/pkgconfig/sparkrt_c.pc)
  if(NOT EXISTS ${prefix}/${file})
    message(FATAL_ERROR "not installed: ${file}")
  endif()
endforeach()
set(c_source ${EXAMPLES_DIR}/c_decode/decode_step.c)
separate_arguments(c_flags UNIX_COMMAND "-std=c11 -Wpedantic ${flags}")
set(c_builds flags)
set(c_link_flags_flags -I${prefix}/include -L${prefix}/${LIBDIR} -Wl,-rpath,${prefix}/${LIBDIR}
                       -lsparkrt_c)
if(PKG_CONFIG)
  run(COMMAND ${PKG_CONFIG} --cflags --libs sparkrt_c)
  string(STRIP "${run_output}" c_pc_flags)
  separate_arguments(c_link_flags_pkgconfig UNIX_COMMAND "${c_pc_flags}")
  list(APPEND c_builds pkgconfig)
endif()
foreach(build IN LISTS c_builds)
  set(exe ${WORK_DIR}/c-decode-${build})
  run(COMMAND ${C_COMPILER} ${c_flags} ${c_source} -o ${exe} ${c_link_flags_${build}} -lm)
  foreach(backend mock cpu)
    run(COMMAND ${CMAKE_COMMAND} -E env --unset=LD_LIBRARY_PATH SPARKRT_BACKEND=${backend} ${exe})
    set(plugin_file ${prefix}/${PLUGIN_SUBDIR}/libsparkrt_backend_${backend}.so)
    string(FIND "${run_output}" "device: ${backend} 0: " at_device)
    string(FIND "${run_output}" "(${plugin_file})\n" at_plugin)
    if(at_device EQUAL -1 OR at_plugin EQUAL -1 OR NOT run_output MATCHES "\ncheck: passed\n")
      message(FATAL_ERROR "c_decode (${build}) on ${backend}: expected a passed check on "
                          "${plugin_file}")
    endif()
    if(backend STREQUAL "cpu" AND NOT run_output MATCHES "\nattention: max \\|err\\| ")
      message(FATAL_ERROR "c_decode (${build}) on cpu did not check the attention output")
    endif()
  endforeach()
  message(STATUS "C API example (${build}) passed on mock and cpu")
endforeach()
