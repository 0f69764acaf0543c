add_library(shardplan_warnings INTERFACE)
target_compile_options(shardplan_warnings INTERFACE
  -Wall -Wextra -Wpedantic -Wshadow -Wconversion -Wsign-conversion
  -Wold-style-cast -Wnon-virtual-dtor -Woverloaded-virtual -Wcast-align
  -Wnull-dereference -Wdouble-promotion -Wextra-semi
  $<$<CXX_COMPILER_ID:GNU>:-Wlogical-op>
  $<$<BOOL:${SHARDPLAN_WERROR}>:-Werror>)
