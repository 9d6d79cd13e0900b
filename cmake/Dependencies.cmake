# Third-party dependencies. launch/marlaas installs the Debian packages that provide them.
find_package(Threads REQUIRED)
find_package(Boost 1.71 REQUIRED)  # Interprocess is header-only
find_package(Protobuf REQUIRED)
find_package(GTest REQUIRED)
find_package(nlohmann_json 3.10 REQUIRED)
find_package(PkgConfig REQUIRED)
pkg_check_modules(SECCOMP REQUIRED IMPORTED_TARGET libseccomp)

include(cmake/Torch.cmake)
include(cmake/Cuda.cmake)
