# Installation and the package config, so that find_package(normkit CONFIG)
# works against a `cmake --install` prefix as add_subdirectory does.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

install(DIRECTORY include/normkit DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
# normkit::normkit and normkit::native (its EXPORT_NAME), the opt-in -march=native target.
install(TARGETS normkit normkit_native EXPORT normkitTargets)
install(EXPORT normkitTargets NAMESPACE normkit:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/normkit)

configure_package_config_file(${CMAKE_CURRENT_LIST_DIR}/normkitConfig.cmake.in ${CMAKE_CURRENT_BINARY_DIR}/normkitConfig.cmake
                              INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/normkit)
# Header-only: the package fits any architecture.
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/normkitConfigVersion.cmake COMPATIBILITY SameMinorVersion ARCH_INDEPENDENT)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/normkitConfig.cmake ${CMAKE_CURRENT_BINARY_DIR}/normkitConfigVersion.cmake
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/normkit)
