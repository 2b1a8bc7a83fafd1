# Passed to llama-cpp-python's build in CMAKE_ARGS (README, install):
#   -DCMAKE_PROJECT_llama.cpp_INCLUDE=$PWD/envs/llama-cpp-library-only.cmake
# llama-cpp-python's CMakeLists forces llama.cpp's `common` library on, and with it
# cpp-httplib; the Python bindings load only libllama and the ggml libraries, and the two
# unused libraries are about half of the compile (benchmarks/bench_install.py). CMake reads
# this file at the end of llama.cpp's project() call, after that forcing and before llama.cpp
# reads the option.
set(LLAMA_BUILD_COMMON OFF CACHE BOOL "llama.cpp common library (unused by the Python bindings)" FORCE)
