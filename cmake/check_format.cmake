cmake_minimum_required(VERSION 3.25)
# Fails when a .hpp or .cpp of the repository (tracked, or new and not
# ignored) differs from what clang-format makes of it, naming each file and
# the first differences; with -DFIX=ON, formats them in place instead
# (`make format`).
# Run as: cmake -DSOURCE_DIR=<repo> -DCLANG_FORMAT=<clang-format> [-DFIX=ON]
#         -P cmake/check_format.cmake
if(NOT SOURCE_DIR OR NOT CLANG_FORMAT)
  message(FATAL_ERROR "pass -DSOURCE_DIR=<repository root> -DCLANG_FORMAT=<clang-format>")
endif()
execute_process(
  COMMAND git ls-files --cached --others --exclude-standard "*.hpp" "*.cpp"
  WORKING_DIRECTORY "${SOURCE_DIR}"
  RESULT_VARIABLE _rc OUTPUT_VARIABLE _files OUTPUT_STRIP_TRAILING_WHITESPACE)
if(NOT _rc EQUAL 0)
  message(FATAL_ERROR "git ls-files failed in ${SOURCE_DIR}")
endif()
string(REPLACE "\n" ";" _files "${_files}")
if(FIX)
  execute_process(COMMAND "${CLANG_FORMAT}" -i ${_files}
    WORKING_DIRECTORY "${SOURCE_DIR}" RESULT_VARIABLE _rc)
  if(NOT _rc EQUAL 0)
    message(FATAL_ERROR "clang-format -i failed")
  endif()
  return()
endif()
execute_process(COMMAND "${CLANG_FORMAT}" --dry-run -Werror ${_files}
  WORKING_DIRECTORY "${SOURCE_DIR}"
  RESULT_VARIABLE _rc ERROR_VARIABLE _err)
if(NOT _rc EQUAL 0)
  message(FATAL_ERROR "unformatted code (run `make format`):\n${_err}")
endif()
list(LENGTH _files _n)
message(STATUS "format ok: ${_n} files checked")
