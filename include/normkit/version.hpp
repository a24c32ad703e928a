// normkit's version. CMakeLists.txt reads it from here, so the package version
// and the headers' never disagree.
#pragma once

#define NORMKIT_VERSION_MAJOR 0
#define NORMKIT_VERSION_MINOR 2
#define NORMKIT_VERSION_PATCH 0

// One number for comparisons in #if: major·10000 + minor·100 + patch.
#define NORMKIT_VERSION (NORMKIT_VERSION_MAJOR * 10000 + NORMKIT_VERSION_MINOR * 100 + NORMKIT_VERSION_PATCH)
