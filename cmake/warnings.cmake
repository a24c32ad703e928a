# Flags for normkit's own tests, benchmarks and examples (never imposed on
# users of the library target).
add_library(normkit_build_flags INTERFACE)
target_compile_options(normkit_build_flags INTERFACE -Wall -Wextra)
if(NORMKIT_WERROR)
  target_compile_options(normkit_build_flags INTERFACE -Werror)
endif()
if(NORMKIT_NATIVE)
  target_compile_options(normkit_build_flags INTERFACE -march=native)
endif()
target_link_libraries(normkit_build_flags INTERFACE normkit::normkit)
