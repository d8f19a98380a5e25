# sparkrt_add_backend(<name> SOURCES ... [OUTPUT_DIR dir] [NO_INSTALL])
#
# Builds a backend plugin as a loadable module named
# libsparkrt_backend_<name>.so in the build tree's plugin folder (or OUTPUT_DIR),
# against the plugin SDK only: plugins never link the runtime.
function(sparkrt_add_backend name)
  cmake_parse_arguments(ARG "NO_INSTALL" "OUTPUT_DIR;TARGET" "SOURCES;LIBRARIES" ${ARGN})
  set(target sparkrt_backend_${name})
  if(ARG_TARGET)
    set(target ${ARG_TARGET})
  endif()
  if(NOT ARG_OUTPUT_DIR)
    set(ARG_OUTPUT_DIR ${SPARKRT_BUILD_PLUGIN_DIR})
  endif()
  add_library(${target} MODULE ${ARG_SOURCES})
  target_link_libraries(${target} PRIVATE sparkrt::plugin_sdk ${ARG_LIBRARIES})
  # In-tree plugins report the project's version (SPARKRT_DEFINE_PLUGIN's third argument).
  target_compile_definitions(${target} PRIVATE SPARKRT_VERSION="${PROJECT_VERSION}")
  set_target_properties(${target} PROPERTIES
    PREFIX "lib"
    OUTPUT_NAME sparkrt_backend_${name}
    LIBRARY_OUTPUT_DIRECTORY ${ARG_OUTPUT_DIR})
  # Only the entry symbol is exported; fail at link time on undefined symbols.
  target_link_options(${target} PRIVATE -Wl,--no-undefined)
  if(NOT ARG_NO_INSTALL)
    install(TARGETS ${target} LIBRARY DESTINATION ${SPARKRT_PLUGIN_SUBDIR})
  endif()
endfunction()
