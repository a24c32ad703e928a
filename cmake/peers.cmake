# The peers that tests and benchmarks compare against, found once: libtorch
# (NORMKIT_HAVE_TORCH) and oneDNN (NORMKIT_HAVE_DNNL). Never a dependency of the
# library target.
set(NORMKIT_HAVE_TORCH OFF)
set(NORMKIT_HAVE_DNNL OFF)
if(NORMKIT_PEERS)
  find_package(Torch QUIET)
  if(Torch_FOUND)
    set(NORMKIT_HAVE_TORCH ON)
  endif()
  # Debian's dnnl-config.cmake insists on the OpenCL headers (its GPU
  # runtime); the CPU engine needs only the library and dnnl.hpp.
  find_path(NORMKIT_DNNL_INCLUDE_DIR oneapi/dnnl/dnnl.hpp)
  find_library(NORMKIT_DNNL_LIBRARY dnnl)
  if(NORMKIT_DNNL_INCLUDE_DIR AND NORMKIT_DNNL_LIBRARY)
    set(NORMKIT_HAVE_DNNL ON)
    add_library(normkit_dnnl INTERFACE)
    target_link_libraries(normkit_dnnl INTERFACE ${NORMKIT_DNNL_LIBRARY})
  endif()
endif()
message(STATUS "normkit: OpenMP ${NORMKIT_USES_OPENMP}, libtorch peer ${NORMKIT_HAVE_TORCH}, oneDNN peer ${NORMKIT_HAVE_DNNL}, native ${NORMKIT_NATIVE}")
