# Makes a kernel folder of names that are not modules (a FIFO, a directory, a
# dangling link, a link loop, a device node, a FIFO shadowing a real module)
# next to a garbage module and a good one, for the `sparkrt modules` tests.
#
#   cmake -DDIR=<folder> -DGOOD=<a .ptx file> -P make_hostile_kernels.cmake
file(REMOVE_RECURSE ${DIR})
file(MAKE_DIRECTORY ${DIR} ${DIR}/folder.ptx)
configure_file(${GOOD} ${DIR}/good.ptx COPYONLY)
file(WRITE ${DIR}/garbage.ptx ".entry broken(.param .u32 a .param .u32 b) { ret; }\n")
file(CREATE_LINK nowhere.ptx ${DIR}/dangling.ptx SYMBOLIC)
file(CREATE_LINK self.ptx ${DIR}/self.ptx SYMBOLIC)
file(CREATE_LINK /dev/null ${DIR}/null.ptx SYMBOLIC)
execute_process(COMMAND mkfifo ${DIR}/fifo.ptx ${DIR}/vector_ops.ptx RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "mkfifo failed (${rc})")
endif()
