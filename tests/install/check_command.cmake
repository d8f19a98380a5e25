# Runs one command and checks its exit code and output.
#
#   cmake -DEXPECT_RC=<n> [-DSTDOUT_MATCHES=<regex>] [-DSTDERR_MATCHES=<regex>]
#         [-DSTDOUT_EMPTY=ON] [-DSTDERR_EMPTY=ON] -P check_command.cmake -- <command> [args...]
#
# CTest alone can only tell zero from non-zero; the CLI's contract is 0, 1 or 2.
set(command)
set(seen_separator OFF)
math(EXPR last "${CMAKE_ARGC} - 1")
foreach(i RANGE ${last})
  if(seen_separator)
    list(APPEND command "${CMAKE_ARGV${i}}")
  elseif(CMAKE_ARGV${i} STREQUAL "--")
    set(seen_separator ON)
  endif()
endforeach()
if(NOT command)
  message(FATAL_ERROR "check_command.cmake: no command after --")
endif()

execute_process(COMMAND ${command} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
string(JOIN " " shown ${command})
message("$ ${shown}\nexit code: ${rc}\n--- stdout ---\n${out}--- stderr ---\n${err}--------------")

set(failures)
if(NOT rc STREQUAL EXPECT_RC)
  list(APPEND failures "exit code ${rc}, expected ${EXPECT_RC}")
endif()
if(DEFINED STDOUT_MATCHES AND NOT out MATCHES "${STDOUT_MATCHES}")
  list(APPEND failures "stdout does not match '${STDOUT_MATCHES}'")
endif()
if(DEFINED STDERR_MATCHES AND NOT err MATCHES "${STDERR_MATCHES}")
  list(APPEND failures "stderr does not match '${STDERR_MATCHES}'")
endif()
if(STDOUT_EMPTY AND NOT out STREQUAL "")
  list(APPEND failures "stdout is not empty")
endif()
if(STDERR_EMPTY AND NOT err STREQUAL "")
  list(APPEND failures "stderr is not empty")
endif()
if(failures)
  string(JOIN "\n  " text ${failures})
  message(FATAL_ERROR "check failed:\n  ${text}")
endif()
