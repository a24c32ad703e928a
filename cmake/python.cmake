# The Python package, when an interpreter with its development files and pybind11 are found
# (Debian: python3-dev, pybind11-dev; numpy at run time). Choose the interpreter with
# -DPython_EXECUTABLE=/usr/bin/python3: find_package(Python) takes the first python3 on PATH,
# which may not be the one that has numpy and torch.
set(NORMKIT_HAVE_PYTHON OFF)
find_package(Python 3.8 COMPONENTS Interpreter Development.Module)
if(Python_FOUND)
  find_package(pybind11 2.6 CONFIG QUIET)
endif()
if(Python_FOUND AND pybind11_FOUND)
  set(NORMKIT_HAVE_PYTHON ON)
  set(NORMKIT_PYTHON_INSTALL_DIR "lib/python${Python_VERSION_MAJOR}.${Python_VERSION_MINOR}/site-packages"
      CACHE STRING "Where `cmake --install --component python` puts the normkit package (relative to the prefix, or absolute)")
  message(STATUS "normkit: Python package for ${Python_EXECUTABLE} (${Python_VERSION}), pybind11 ${pybind11_VERSION}")
  if(NOT TARGET normkit_build_flags)
    include(${PROJECT_SOURCE_DIR}/cmake/warnings.cmake)
  endif()
  include(${PROJECT_SOURCE_DIR}/cmake/kernels.cmake)
  add_subdirectory(python)
else()
  message(STATUS "normkit: Python package not built (needs the Python interpreter and development files, and pybind11)")
endif()
