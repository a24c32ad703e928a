# normkit_kernels: the heaviest kernel instantiations (tests/kernels.hpp says which and why),
# emitted once per build for every test binary and every Python extension module. A target that
# links it sees their extern template declarations first (-include kernels.hpp) and links their
# one instantiation, one storage type per file of tests/kernels/ so that the four build in
# parallel. Position-independent, for the Python modules.
if(NOT TARGET normkit_kernels)
  file(GLOB normkit_kernel_sources CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/tests/kernels/*.cpp)
  add_library(normkit_kernels STATIC ${normkit_kernel_sources})
  set_target_properties(normkit_kernels PROPERTIES POSITION_INDEPENDENT_CODE ON)
  target_include_directories(normkit_kernels PRIVATE ${PROJECT_SOURCE_DIR}/tests)
  target_link_libraries(normkit_kernels PRIVATE normkit_build_flags)
  target_compile_options(normkit_kernels INTERFACE "SHELL:-include ${PROJECT_SOURCE_DIR}/tests/kernels.hpp")
endif()
