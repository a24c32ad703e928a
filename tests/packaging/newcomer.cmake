# A newcomer's path from the README, run with cmake -P: configure normkit's source tree with its
# default options while Catch2 and libtorch cannot be found, install it to a scratch prefix, then
# build and run the consumer against that prefix with find_package (normkit::normkit and
# normkit::native). Fails if the default configure fails or mentions Catch2, Torch or oneDNN:
# a consumer's configure needs only Eigen and xsimd, and prints nothing about the peers.
foreach(variable SOURCE_DIR CONSUMER_DIR WORK_DIR GENERATOR CXX_COMPILER)
  if(NOT DEFINED ${variable})
    message(FATAL_ERROR "newcomer.cmake needs -D${variable}=...")
  endif()
endforeach()

file(REMOVE_RECURSE ${WORK_DIR})
set(build ${WORK_DIR}/build)
set(prefix ${WORK_DIR}/prefix)

function(run step)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE failed OUTPUT_VARIABLE output ERROR_VARIABLE output)
  if(failed)
    message(FATAL_ERROR "newcomer: ${step} failed:\n${output}")
  endif()
  set(output "${output}" PARENT_SCOPE)
endfunction()

# The README's two commands, configure and install (a header-only library has nothing to build).
# Only the compiler is chosen (the one of the enclosing build); every normkit option is its default.
# --no-warn-unused-cli: the two CMAKE_DISABLE_FIND_PACKAGE_ variables are unused when nothing looks
# for those packages, which is the point; the warning would name them.
run("configure" ${CMAKE_COMMAND} --no-warn-unused-cli -S ${SOURCE_DIR} -B ${build} -G ${GENERATOR}
    -DCMAKE_CXX_COMPILER=${CXX_COMPILER}
    -DCMAKE_DISABLE_FIND_PACKAGE_Catch2=ON -DCMAKE_DISABLE_FIND_PACKAGE_Torch=ON)
if(output MATCHES "([Cc]atch2|[Tt]orch|oneDNN|dnnl)")
  message(FATAL_ERROR "newcomer: the default configure mentions ${CMAKE_MATCH_1}:\n${output}")
endif()
message(STATUS "newcomer: default configure done, no Catch2 / Torch / oneDNN in its output")
run("install" ${CMAKE_COMMAND} --install ${build} --prefix ${prefix})
if(NOT EXISTS ${prefix}/include/normkit/normkit.hpp)
  message(FATAL_ERROR "newcomer: the install has no include/normkit/normkit.hpp")
endif()

foreach(native OFF ON)
  run("consumer (native ${native}) configure" ${CMAKE_COMMAND} -S ${CONSUMER_DIR} -B ${WORK_DIR}/consumer_${native}
      -G ${GENERATOR} -DCMAKE_CXX_COMPILER=${CXX_COMPILER} -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH=${prefix}
      -DNORMKIT_CONSUMER_NATIVE=${native})
  run("consumer (native ${native}) build" ${CMAKE_COMMAND} --build ${WORK_DIR}/consumer_${native})
  run("consumer (native ${native}) run" ${WORK_DIR}/consumer_${native}/consumer)
  message(STATUS "newcomer: consumer (normkit::native ${native}): ${output}")
endforeach()
