# The fuzz targets of the readers of outside input (tests/fuzz/, and
# docs/design/errors-and-fuzzing.md, "Fuzzing"), from the main build.
#
# libFuzzer is clang's and this build uses GCC, so the targets are a project
# of their own (tests/fuzz/CMakeLists.txt), configured with clang++ and
# built as an ExternalProject after this build's libraries, which it links
# (uninstrumented) through an export() file; only the readers' sources are
# compiled there, with the sanitizers. This is the simplest way to put two
# compilers in one build: no compiler flags leak between them, and a GCC-only
# machine still builds and tests the rest. Where no clang++ can link
# -fsanitize=fuzzer (scripts/install-deps.sh installs clang and
# libclang-rt-14-dev), the fuzz tests are left out with a message.
#
# Each target runs as a ctest test labeled "fuzz" for a bounded time
# (tests/fuzz/run_fuzz.sh): its seed corpus is tests/fuzz/corpus/<name>/,
# and what it finds is left in <build>/fuzz-artifacts/.
option(TRELLIS_FUZZ
       "Build and test the fuzz targets (needs clang++ with libFuzzer)" ON)
if(NOT TRELLIS_FUZZ)
  return()
endif()
if(NOT TARGET plan)
  message(STATUS "Fuzz targets: skipped (the plan library is not built)")
  return()
endif()
if(TRELLIS_ASAN)
  # The libraries would carry GCC's sanitizer runtime, clang's executables
  # their own.
  message(STATUS "Fuzz targets: skipped under TRELLIS_ASAN")
  return()
endif()

find_program(TRELLIS_FUZZ_CXX NAMES clang++ clang++-16 clang++-15 clang++-14
             DOC "clang++ that builds the fuzz targets")
if(TRELLIS_FUZZ_CXX AND NOT TRELLIS_FUZZ_CXX_WORKS)
  # Compiles and links an empty target: clang++ alone is not enough, its
  # libFuzzer and sanitizer runtimes must be installed too. A success is
  # kept; a failure is probed again at the next configure.
  set(probe ${CMAKE_BINARY_DIR}/CMakeFiles/fuzz_probe)
  file(WRITE ${probe}.cc
       "#include <cstddef>\n#include <cstdint>\n"
       "extern \"C\" int LLVMFuzzerTestOneInput(const uint8_t*, size_t) "
       "{ return 0; }\n")
  execute_process(
    COMMAND ${TRELLIS_FUZZ_CXX} -fsanitize=fuzzer,address,undefined
            ${probe}.cc -o ${probe}
    RESULT_VARIABLE failed OUTPUT_QUIET ERROR_QUIET)
  if(failed)
    set(TRELLIS_FUZZ_CXX_WORKS OFF CACHE INTERNAL "")
  else()
    set(TRELLIS_FUZZ_CXX_WORKS ON CACHE INTERNAL "")
  endif()
endif()
if(NOT TRELLIS_FUZZ_CXX_WORKS)
  message(STATUS "Fuzz targets: skipped, no clang++ here links "
                 "-fsanitize=fuzzer (install clang and libclang-rt-14-dev: "
                 "scripts/install-deps.sh)")
  return()
endif()
message(STATUS "Fuzz targets: built with ${TRELLIS_FUZZ_CXX}")

set(fuzz_libraries framework parallel transformer data options bubbles optim
                   checkpoint health trainer convert plan)
set(fuzz_exports ${CMAKE_BINARY_DIR}/fuzz-libraries.cmake)
export(TARGETS ${fuzz_libraries} NAMESPACE trellis:: FILE ${fuzz_exports})

include(ExternalProject)
file(GLOB fuzz_sources CONFIGURE_DEPENDS ${CMAKE_CURRENT_LIST_DIR}/*_fuzz.cc)
set(fuzz_bin ${CMAKE_BINARY_DIR}/fuzz)
set(fuzz_programs "")
foreach(source ${fuzz_sources})
  get_filename_component(name ${source} NAME_WE)
  list(APPEND fuzz_programs ${fuzz_bin}/${name})
endforeach()
ExternalProject_Add(fuzz_targets
  SOURCE_DIR ${CMAKE_CURRENT_LIST_DIR}
  BINARY_DIR ${fuzz_bin}
  CMAKE_ARGS
    -DCMAKE_CXX_COMPILER=${TRELLIS_FUZZ_CXX}
    -DCMAKE_CXX_COMPILER_LAUNCHER=${CMAKE_CXX_COMPILER_LAUNCHER}
    -DTRELLIS_SOURCE_DIR=${PROJECT_SOURCE_DIR}
    -DTRELLIS_LIBRARIES=${fuzz_exports}
    -DTRELLIS_CUDA=${TRELLIS_CUDA}
    -DCUDAToolkit_ROOT=${CUDAToolkit_LIBRARY_ROOT}
  BUILD_ALWAYS ON
  BUILD_BYPRODUCTS ${fuzz_programs}
  INSTALL_COMMAND ""
  DEPENDS ${fuzz_libraries})

foreach(program ${fuzz_programs})
  get_filename_component(name ${program} NAME)
  string(REGEX REPLACE "_fuzz$" "" target ${name})
  add_test(NAME fuzz.${target}
    COMMAND ${CMAKE_CURRENT_LIST_DIR}/run_fuzz.sh ${program}
            ${CMAKE_CURRENT_LIST_DIR}/corpus/${target}
            ${CMAKE_BINARY_DIR}/fuzz-artifacts
    WORKING_DIRECTORY ${CMAKE_BINARY_DIR})
  set_tests_properties(fuzz.${target} PROPERTIES LABELS fuzz TIMEOUT 120)
endforeach()
