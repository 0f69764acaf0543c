# Settings every target of ours links PRIVATE; third-party code never sees them.
option(SHARDPLAN_WERROR "Treat warnings as errors" ON)
set(SHARDPLAN_SANITIZE "" CACHE STRING "Sanitizers to enable, e.g. address;undefined")
option(SHARDPLAN_CLANG_TIDY "Run clang-tidy while compiling" OFF)

add_library(shardplan_options INTERFACE)
if(SHARDPLAN_SANITIZE)
  list(JOIN SHARDPLAN_SANITIZE "," _shardplan_san)
  target_compile_options(shardplan_options INTERFACE
    -fsanitize=${_shardplan_san} -fno-sanitize-recover=all -fno-omit-frame-pointer)
  target_link_options(shardplan_options INTERFACE -fsanitize=${_shardplan_san})
endif()
if(CMAKE_BUILD_TYPE STREQUAL "Debug")
  target_compile_definitions(shardplan_options INTERFACE _GLIBCXX_ASSERTIONS)
endif()

if(SHARDPLAN_CLANG_TIDY)
  find_program(CLANG_TIDY_EXE NAMES clang-tidy REQUIRED)
  set(CMAKE_CXX_CLANG_TIDY ${CLANG_TIDY_EXE})
endif()

# format / check-format over the tracked C++ files (cmake/check_format.cmake;
# the `format` test runs the check too).
find_program(CLANG_FORMAT_EXE NAMES clang-format clang-format-14)
if(CLANG_FORMAT_EXE)
  add_custom_target(format
    COMMAND ${CMAKE_COMMAND} -DSOURCE_DIR=${CMAKE_CURRENT_SOURCE_DIR}
            -DCLANG_FORMAT=${CLANG_FORMAT_EXE} -DFIX=ON
            -P ${CMAKE_CURRENT_SOURCE_DIR}/cmake/check_format.cmake
    VERBATIM)
  add_custom_target(check-format
    COMMAND ${CMAKE_COMMAND} -DSOURCE_DIR=${CMAKE_CURRENT_SOURCE_DIR}
            -DCLANG_FORMAT=${CLANG_FORMAT_EXE}
            -P ${CMAKE_CURRENT_SOURCE_DIR}/cmake/check_format.cmake
    VERBATIM)
endif()
