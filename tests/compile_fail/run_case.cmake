# One compile-fail case (tests/compile_fail/CMakeLists.txt says what passes).
file(STRINGS ${CASE} first_line LIMIT_COUNT 1)
if(NOT first_line MATCHES "^// expect-error: (.+)$")
  message(FATAL_ERROR "${CASE}: the first line must be `// expect-error: <regex>`")
endif()
set(expected "${CMAKE_MATCH_1}")
separate_arguments(flags UNIX_COMMAND "${FLAGS}")

execute_process(COMMAND ${COMPILER} ${flags} -fsyntax-only ${CASE} RESULT_VARIABLE result OUTPUT_VARIABLE output
                ERROR_VARIABLE output)
if(result EQUAL 0)
  message(FATAL_ERROR "${CASE} compiled, but the misuse it holds must not")
endif()
if(NOT output MATCHES "${expected}")
  message(FATAL_ERROR "${CASE} failed to compile, but not with a message matching '${expected}':\n${output}")
endif()

execute_process(COMMAND ${COMPILER} ${flags} -DNORMKIT_COMPILE_FAIL_CONTROL -fsyntax-only ${CASE}
                RESULT_VARIABLE result OUTPUT_VARIABLE output ERROR_VARIABLE output)
if(NOT result EQUAL 0)
  message(FATAL_ERROR "${CASE}: the control (the correct use, -DNORMKIT_COMPILE_FAIL_CONTROL) does not compile:\n${output}")
endif()
message(STATUS "${CASE}: rejected as expected; the control compiles")
