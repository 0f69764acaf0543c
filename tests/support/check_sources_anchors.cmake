cmake_minimum_required(VERSION 3.25)
# Every citation of docs/sources.md#ANCHOR in the repository (and every
# [text](sources.md#ANCHOR) or (#ANCHOR) link inside docs/sources.md) names a
# heading of docs/sources.md: ANCHOR is the heading's GitHub slug (lower
# case, punctuation but '-' and '_' dropped, spaces to '-').
# Run as: cmake -DSOURCE_DIR=<repo> -P tests/support/check_sources_anchors.cmake

if(NOT SOURCE_DIR)
  message(FATAL_ERROR "pass -DSOURCE_DIR=<repository root>")
endif()

set(_sources "${SOURCE_DIR}/docs/sources.md")
file(STRINGS "${_sources}" _headings REGEX "^#+ ")
set(_anchors "")
foreach(_heading IN LISTS _headings)
  string(REGEX REPLACE "^#+ +" "" _slug "${_heading}")
  string(TOLOWER "${_slug}" _slug)
  string(REGEX REPLACE "[^a-z0-9 _-]" "" _slug "${_slug}")
  string(REPLACE " " "-" _slug "${_slug}")
  list(APPEND _anchors "${_slug}")
endforeach()
list(LENGTH _anchors _anchor_count)
if(_anchor_count LESS 10)
  message(FATAL_ERROR "docs/sources.md: only ${_anchor_count} headings")
endif()

file(GLOB _files
  "${SOURCE_DIR}/README.md"
  "${SOURCE_DIR}/CMakeLists.txt"
  "${SOURCE_DIR}/docs/*.md"
  "${SOURCE_DIR}/docs/schema/*.json"
  "${SOURCE_DIR}/configs/*/*.json"
  "${SOURCE_DIR}/bench/*"
  "${SOURCE_DIR}/cmake/*"
  "${SOURCE_DIR}/scripts/*"
  "${SOURCE_DIR}/tests/CMakeLists.txt"
  "${SOURCE_DIR}/tests/unit/*"
  "${SOURCE_DIR}/tests/support/*"
  "${SOURCE_DIR}/tests/paste_back/*"
  "${SOURCE_DIR}/tests/golden*/*/*")
file(GLOB_RECURSE _code "${SOURCE_DIR}/src/*" "${SOURCE_DIR}/include/*")
list(APPEND _files ${_code})

set(_bad "")
set(_cited 0)
foreach(_file IN LISTS _files)
  if(IS_DIRECTORY "${_file}")
    continue()
  endif()
  file(READ "${_file}" _text)
  string(REGEX MATCHALL "sources\\.md#[A-Za-z0-9_-]+" _refs "${_text}")
  if(_file STREQUAL _sources)
    string(REGEX MATCHALL "\\]\\(#[A-Za-z0-9_-]+\\)" _local "${_text}")
    list(APPEND _refs ${_local})
  endif()
  foreach(_ref IN LISTS _refs)
    string(REGEX REPLACE "^.*#([A-Za-z0-9_-]+).*$" "\\1" _anchor "${_ref}")
    if(_anchor STREQUAL "ANCHOR")  # the placeholder of the docs' own example
      continue()
    endif()
    math(EXPR _cited "${_cited} + 1")
    if(NOT _anchor IN_LIST _anchors)
      file(RELATIVE_PATH _rel "${SOURCE_DIR}" "${_file}")
      list(APPEND _bad "${_rel}: docs/sources.md has no heading for #${_anchor}")
    endif()
  endforeach()
endforeach()

if(_cited EQUAL 0)
  message(FATAL_ERROR "no citation of docs/sources.md found: is SOURCE_DIR right?")
endif()
if(_bad)
  list(REMOVE_DUPLICATES _bad)
  list(JOIN _bad "\n" _report)
  message(FATAL_ERROR "${_report}")
endif()
message(STATUS "${_cited} citations of docs/sources.md, all of them headings")
