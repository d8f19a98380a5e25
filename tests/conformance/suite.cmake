# The conformance suite as an object library, built into the `sparkrt` tool
# (`sparkrt conformance`) so that it ships with every installed sparkrt.
# Included from apps/sparkrt/CMakeLists.txt: the tool is built with or
# without the tests.
find_package(doctest REQUIRED)
add_library(sparkrt_conformance_suite OBJECT
  ${CMAKE_CURRENT_LIST_DIR}/suite.cc
  ${CMAKE_CURRENT_LIST_DIR}/conformance_memory_test.cc
  ${CMAKE_CURRENT_LIST_DIR}/conformance_launch_test.cc)
target_link_libraries(sparkrt_conformance_suite PUBLIC sparkrt::runtime doctest::doctest)
target_include_directories(sparkrt_conformance_suite PUBLIC ${CMAKE_CURRENT_LIST_DIR})
# Failures name tests/conformance/<file>:<line>, not the build machine's path.
target_compile_options(sparkrt_conformance_suite PRIVATE -fmacro-prefix-map=${PROJECT_SOURCE_DIR}/=)
