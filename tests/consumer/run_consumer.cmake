# Builds and runs a consumer project the way a user would.
#   MODE=find_package: install verl from BUILD_DIR into a fresh prefix, then find_package(verl).
#   MODE=add_subdirectory: add verl's source tree to the consumer's build.
set(work ${WORK_DIR}/${MODE})
file(REMOVE_RECURSE ${work})
set(extra)
if(MODE STREQUAL "find_package")
  execute_process(COMMAND ${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${work}/prefix --component Unspecified
    RESULT_VARIABLE r OUTPUT_QUIET)
  if(NOT r EQUAL 0)
    message(FATAL_ERROR "installing verl into ${work}/prefix failed")
  endif()
  set(extra -DCMAKE_PREFIX_PATH=${work}/prefix)
else()
  set(extra -DVERL_SOURCE_DIR=${SOURCE_DIR})
endif()
execute_process(COMMAND ${CMAKE_COMMAND} -S ${CONSUMER_DIR}/${MODE} -B ${work}/build ${extra}
  -DCMAKE_CXX_COMPILER=${CXX_COMPILER} RESULT_VARIABLE r)
if(NOT r EQUAL 0)
  message(FATAL_ERROR "configuring the ${MODE} consumer failed")
endif()
execute_process(COMMAND ${CMAKE_COMMAND} --build ${work}/build RESULT_VARIABLE r)
if(NOT r EQUAL 0)
  message(FATAL_ERROR "building the ${MODE} consumer failed")
endif()
execute_process(COMMAND ${work}/build/consumer RESULT_VARIABLE r)
if(NOT r EQUAL 0)
  message(FATAL_ERROR "the ${MODE} consumer ran but gave the wrong result")
endif()
