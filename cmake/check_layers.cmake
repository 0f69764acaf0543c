cmake_minimum_required(VERSION 3.25)
# The layering rule (docs/architecture.md): a file of layer N includes
# headers of layers <= N only, through <shardplan/...> and quoted includes
# alike, and a module's private headers (src/<module>/*.hpp) only from that
# module. Run as: cmake -DSOURCE_DIR=<repo> -P cmake/check_layers.cmake
#
# Which module a file belongs to:
#   include/shardplan/<module>.hpp        its public header
#   src/<module>/...                      a module of several files
#   src/<module>.cpp, src/<module>_x.cpp  a module of one file (or a data
#                                         header such as src/embedded.hpp)
# Keep this table and docs/architecture.md in step.
set(_layer_diag 1)
set(_layer_tensor 1)
set(_layer_embedded 1)  # src/embedded.hpp: files from configs/, data only
set(_layer_mesh 2)
set(_layer_spec 2)
set(_layer_topology 3)
set(_layer_model 3)
set(_layer_models 3)  # the Hugging Face architectures, until they become `model`
set(_layer_sharding 4)
set(_layer_rules 4)
set(_layer_validate 4)
set(_layer_memory 4)
set(_layer_cost 4)
set(_layer_reshard 5)
set(_layer_workload 5)
set(_layer_search 6)
set(_layer_io 7)
set(_layer_report 8)
set(_layer_cli 9)

if(NOT SOURCE_DIR)
  message(FATAL_ERROR "pass -DSOURCE_DIR=<repository root>")
endif()

# The module of a name: the whole of it when it is a module, else the part
# before its first '_' ("io_rules" -> "io"); empty when neither is.
function(_module_of_stem stem out)
  if(DEFINED _layer_${stem})
    set(${out} "${stem}" PARENT_SCOPE)
    return()
  endif()
  string(REGEX REPLACE "_.*$" "" _prefix "${stem}")
  if(DEFINED _layer_${_prefix})
    set(${out} "${_prefix}" PARENT_SCOPE)
  else()
    set(${out} "" PARENT_SCOPE)
  endif()
endfunction()

# The module of a file under include/shardplan/ or src/.
function(_module_of_file file out)
  file(RELATIVE_PATH _rel "${SOURCE_DIR}" "${file}")
  if(_rel MATCHES "^src/([^/]+)/")
    set(${out} "${CMAKE_MATCH_1}" PARENT_SCOPE)
    return()
  endif()
  get_filename_component(_stem "${file}" NAME_WE)
  _module_of_stem("${_stem}" _m)
  set(${out} "${_m}" PARENT_SCOPE)
endfunction()

file(GLOB_RECURSE _files "${SOURCE_DIR}/include/shardplan/*.hpp" "${SOURCE_DIR}/src/*.cpp"
     "${SOURCE_DIR}/src/*.hpp")
set(_violations "")
foreach(_file IN LISTS _files)
  _module_of_file("${_file}" _module)
  if(_module STREQUAL "" OR NOT DEFINED _layer_${_module})
    list(APPEND _violations "${_file}: not in any layer; add it to cmake/check_layers.cmake")
    continue()
  endif()
  set(_own ${_layer_${_module}})
  get_filename_component(_dir "${_file}" DIRECTORY)
  file(STRINGS "${_file}" _includes REGEX "^[ \t]*#[ \t]*include[ \t]*[<\"]")
  foreach(_line IN LISTS _includes)
    set(_inc_module "")
    set(_what "")
    if(_line MATCHES "<shardplan/([A-Za-z0-9_]+)\\.hpp>")
      set(_what "<shardplan/${CMAKE_MATCH_1}.hpp>")
      _module_of_stem("${CMAKE_MATCH_1}" _inc_module)
    elseif(_line MATCHES "\"([^\"]+)\"")
      set(_path "${CMAKE_MATCH_1}")
      set(_what "\"${_path}\"")
      if(EXISTS "${_dir}/${_path}")
        _module_of_file("${_dir}/${_path}" _inc_module)
      elseif(EXISTS "${SOURCE_DIR}/src/${_path}")
        _module_of_file("${SOURCE_DIR}/src/${_path}" _inc_module)
      else()
        list(APPEND _violations "${_file}: includes ${_what}, which is not under src/")
        continue()
      endif()
    else()
      continue()  # a system or third-party header
    endif()
    # A module's folder (src/<module>/) is private to it.
    if(_line MATCHES "\"" AND _inc_module AND NOT _inc_module STREQUAL _module)
      file(RELATIVE_PATH _inc_rel "${SOURCE_DIR}" "${_dir}/${_path}")
      if(NOT EXISTS "${_dir}/${_path}")
        set(_inc_rel "src/${_path}")
      endif()
      if(_inc_rel MATCHES "^src/[^/]+/")
        list(APPEND _violations
          "${_file}: module ${_module} includes ${_what}, a private header of module ${_inc_module}")
      endif()
    endif()
    if(_inc_module STREQUAL "" OR NOT DEFINED _layer_${_inc_module})
      list(APPEND _violations "${_file}: includes ${_what} of no known module")
    elseif(_layer_${_inc_module} GREATER _own)
      list(APPEND _violations
        "${_file}: layer ${_own} (${_module}) includes ${_what} of higher layer ${_layer_${_inc_module}} (${_inc_module})")
    endif()
  endforeach()
endforeach()

if(_violations)
  list(JOIN _violations "\n" _msg)
  message(FATAL_ERROR "layering violations:\n${_msg}")
endif()
list(LENGTH _files _n)
message(STATUS "layering ok: ${_n} files checked")
