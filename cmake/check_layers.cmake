cmake_minimum_required(VERSION 3.25)
# Fails when a header or source of layer N includes a header of a higher layer.
# Run as: cmake -DSOURCE_DIR=<repo> -P cmake/check_layers.cmake
# The layers are DESIGN.md section 6; keep this table and docs/architecture.md in step.
set(_layer_diag 1)
set(_layer_tensor 1)
set(_layer_models 1)  # HF config.json -> tensors, built-in models; no Tensor/Manifest
set(_layer_embedded 1)  # src/embedded.hpp: files from configs/, data only
set(_layer_mesh 2)
set(_layer_spec 2)
set(_layer_topology 3)
set(_layer_rules 4)
set(_layer_validate 4)
set(_layer_memory 4)
set(_layer_cost 4)
set(_layer_reshard 5)
set(_layer_io 6)
set(_layer_report 7)
set(_layer_cli 8)

if(NOT SOURCE_DIR)
  message(FATAL_ERROR "pass -DSOURCE_DIR=<repository root>")
endif()

file(GLOB _files "${SOURCE_DIR}/include/shardplan/*.hpp" "${SOURCE_DIR}/src/*.cpp"
     "${SOURCE_DIR}/src/*.hpp")
set(_violations "")
foreach(_file IN LISTS _files)
  get_filename_component(_stem "${_file}" NAME_WE)
  # src/mesh_parser.cpp belongs to module mesh: take the part before the first '_'
  # unless the whole stem is a module name.
  set(_module "${_stem}")
  if(NOT DEFINED _layer_${_module})
    string(REGEX REPLACE "_.*$" "" _module "${_stem}")
  endif()
  if(NOT DEFINED _layer_${_module})
    list(APPEND _violations "${_file}: not in any layer; add it to cmake/check_layers.cmake")
    continue()
  endif()
  set(_own ${_layer_${_module}})
  file(STRINGS "${_file}" _includes REGEX "^[ \t]*#[ \t]*include[ \t]*<shardplan/")
  foreach(_line IN LISTS _includes)
    string(REGEX REPLACE ".*<shardplan/([a-z_]+)\\.hpp>.*" "\\1" _inc "${_line}")
    set(_inc_module "${_inc}")
    if(NOT DEFINED _layer_${_inc_module})
      string(REGEX REPLACE "_.*$" "" _inc_module "${_inc}")
    endif()
    if(NOT DEFINED _layer_${_inc_module})
      list(APPEND _violations "${_file}: includes unknown module header <shardplan/${_inc}.hpp>")
    elseif(_layer_${_inc_module} GREATER _own)
      list(APPEND _violations
        "${_file}: layer ${_own} (${_module}) includes <shardplan/${_inc}.hpp> of higher layer ${_layer_${_inc_module}} (${_inc_module})")
    endif()
  endforeach()
endforeach()

if(_violations)
  list(JOIN _violations "\n" _msg)
  message(FATAL_ERROR "layering violations:\n${_msg}")
endif()
list(LENGTH _files _n)
message(STATUS "layering ok: ${_n} files checked")
