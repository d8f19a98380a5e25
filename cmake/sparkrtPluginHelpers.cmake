# sparkrt_add_plugin(<name> SOURCES ... [LIBRARIES ...])
#
# Builds an out-of-tree backend plugin, libsparkrt_backend_<name>.so, against
# the plugin SDK only (a plugin never links the runtime). The runtime loads it
# by name when its folder is in SPARKRT_PLUGIN_PATH, or by path:
#   SPARKRT_BACKEND=/path/to/libsparkrt_backend_<name>.so
function(sparkrt_add_plugin name)
  cmake_parse_arguments(ARG "" "" "SOURCES;LIBRARIES" ${ARGN})
  if(NOT ARG_SOURCES)
    message(FATAL_ERROR "sparkrt_add_plugin(${name}): SOURCES is required")
  endif()
  set(target sparkrt_backend_${name})
  add_library(${target} MODULE ${ARG_SOURCES})
  target_link_libraries(${target} PRIVATE sparkrt::plugin_sdk ${ARG_LIBRARIES})
  set_target_properties(${target} PROPERTIES
    PREFIX "lib"
    OUTPUT_NAME sparkrt_backend_${name}
    # Only the entry symbol needs to be visible.
    CXX_VISIBILITY_PRESET hidden
    VISIBILITY_INLINES_HIDDEN ON)
  # An undefined symbol fails the link here, not the load at run time.
  target_link_options(${target} PRIVATE -Wl,--no-undefined)
endfunction()

# sparkrt_add_conformance_test(<name> [SKIP <feature>:<reason>...])
#
# Adds the CTest test conformance.<name>: the installed `sparkrt conformance`
# against the plugin sparkrt_add_plugin(<name>) builds. Each SKIP declares a
# feature the backend cannot offer (`sparkrt conformance --list` names them);
# a reason must not contain ';'. The test is reported as skipped where the
# plugin has no usable device (exit code 77).
function(sparkrt_add_conformance_test name)
  cmake_parse_arguments(ARG "" "" "SKIP" ${ARGN})
  set(skips)
  foreach(skip IN LISTS ARG_SKIP)
    list(APPEND skips "--skip=${skip}")
  endforeach()
  add_test(NAME conformance.${name}
           COMMAND sparkrt::cli conformance --backend $<TARGET_FILE:sparkrt_backend_${name}> ${skips})
  set_tests_properties(conformance.${name} PROPERTIES
    SKIP_RETURN_CODE 77
    # doctest's summary when a filter matched nothing
    FAIL_REGULAR_EXPRESSION "test cases: *0 \\|")
endfunction()
