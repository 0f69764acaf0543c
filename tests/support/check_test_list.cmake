cmake_minimum_required(VERSION 3.25)
# Runs after catch_discover_tests wrote the CTest entries of the test binary:
# each entry must run exactly the TEST_CASE it is named after, and there must
# be one entry per TEST_CASE. A name the discovery cannot pass through (a `;`
# splits it into two entries, other characters are read by Catch's test spec
# parser) would give an entry that matches no test; Catch2 2 exits 0 on "No
# test cases matched", so CTest would report it passed while it never ran.
# cmake -DTEST_EXECUTABLE=<binary> -DINCLUDE_FILE=<discovery include file>
#       -P check_test_list.cmake

# The discovery's file calls add_test and set_tests_properties, which do not
# exist in script mode: these collect what it would add.
set(_failures "")
set(_entries 0)
function(add_test name)
  math(EXPR _n "${_entries} + 1")
  set(_entries ${_n} PARENT_SCOPE)
  # ARGN: the binary, the escaped name (the test spec) and the extra args.
  execute_process(COMMAND ${ARGN} --list-test-names-only
    RESULT_VARIABLE _rc OUTPUT_VARIABLE _out ERROR_VARIABLE _err)
  if(NOT _out STREQUAL "${name}\n")
    string(STRIP "${_out}" _out)
    set(_failures "${_failures}\n  \"${name}\" runs [${_out}]" PARENT_SCOPE)
  endif()
endfunction()
function(set_tests_properties)
endfunction()

string(REPLACE "_include-" "_tests-" _tests_file "${INCLUDE_FILE}")
if(NOT EXISTS "${_tests_file}")
  message(FATAL_ERROR "no test list at ${_tests_file}")
endif()
include("${_tests_file}")

# Every TEST_CASE once: the binary's own count of its test names.
execute_process(COMMAND ${TEST_EXECUTABLE} --list-test-names-only
  OUTPUT_VARIABLE _all RESULT_VARIABLE _rc)
string(REGEX MATCHALL "\n" _lines "${_all}")
list(LENGTH _lines _names)
if(_failures OR NOT _entries EQUAL _names)
  message(FATAL_ERROR "the CTest entries of ${TEST_EXECUTABLE} "
    "(${_entries} for ${_names} TEST_CASEs) do not each run their test; "
    "rename the test (no `;` in a name):${_failures}")
endif()
