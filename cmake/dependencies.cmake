# The library's own dependencies: Eigen 3.4 and xsimd 8 (header-only), and
# OpenMP for threads when it is there. Everything comes from the distribution's
# packages (libeigen3-dev, libxsimd-dev); nothing is downloaded.
find_package(Eigen3 3.4 REQUIRED NO_MODULE)
find_package(xsimd 8 REQUIRED)

set(NORMKIT_USES_OPENMP OFF)
if(NORMKIT_OPENMP)
  find_package(OpenMP COMPONENTS CXX)
  if(OpenMP_CXX_FOUND)
    set(NORMKIT_USES_OPENMP ON)
  endif()
endif()
