# Installation (included by the top-level CMakeLists.txt).
#
#   lib/librelock.so.SOVERSION, librelock.a         the libraries (SOVERSION:
#                                                   0.MINOR before 1.0, then MAJOR)
#   include/relock/relock*.h                        the public headers
#   lib/pkgconfig/relock.pc                         pkg-config
#   lib/cmake/relock/relock{Config,ConfigVersion,Targets}.cmake
#                                                   find_package(relock CONFIG):
#                                                   relock::relock (shared),
#                                                   relock::relock_static
#   bin/relock                                      the command
#   share/man/man{1,3,5}                            relock(1), relock(3), relock.conf(5)
#
# The compat proxy, the demo, the benchmarks and the tests are not installed.

include(CMakePackageConfigHelpers)
set(RELOCK_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/relock)

install(TARGETS relock relock_static EXPORT relockTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(TARGETS relock-cli RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
# The public headers, and only they, in a directory of their own: users
# write #include <relock.h>, found through pkg-config's Cflags or the CMake
# package's include directory (both include/relock); none of them includes
# hiredis or a private header.
install(FILES ${PROJECT_SOURCE_DIR}/include/relock/relock.h
  ${PROJECT_SOURCE_DIR}/include/relock/relock_async.h
  ${PROJECT_SOURCE_DIR}/include/relock/relock_async_libevent.h
  ${PROJECT_SOURCE_DIR}/include/relock/relock_async_libuv.h
  DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/relock)

# The CMake package.  The exported static target names no pkg-config
# target (they exist only in this build); relockConfig.cmake finds hiredis
# and libconfig again on the user's side and adds them.
install(EXPORT relockTargets NAMESPACE relock:: DESTINATION ${RELOCK_CMAKE_DIR})
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/relockConfig.cmake.in
  ${PROJECT_BINARY_DIR}/relockConfig.cmake INSTALL_DESTINATION ${RELOCK_CMAKE_DIR})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/relockConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY ${RELOCK_COMPATIBILITY})
install(FILES ${PROJECT_BINARY_DIR}/relockConfig.cmake
  ${PROJECT_BINARY_DIR}/relockConfigVersion.cmake DESTINATION ${RELOCK_CMAKE_DIR})

# relock.pc finds its prefix from its own place (${pcfiledir}), so an
# installation made with `cmake --install --prefix`, or moved, still works.
if(IS_ABSOLUTE "${CMAKE_INSTALL_LIBDIR}")
  set(RELOCK_PC_PREFIX "${CMAKE_INSTALL_PREFIX}")
  set(RELOCK_PC_LIBDIR "${CMAKE_INSTALL_LIBDIR}")
else()
  # From lib/pkgconfig (or lib/x86_64-linux-gnu/pkgconfig) up to the prefix.
  file(RELATIVE_PATH _relock_up "/p/${CMAKE_INSTALL_LIBDIR}/pkgconfig" "/p")
  string(REGEX REPLACE "/$" "" _relock_up "${_relock_up}")
  set(RELOCK_PC_PREFIX "\${pcfiledir}/${_relock_up}")
  set(RELOCK_PC_LIBDIR "\${prefix}/${CMAKE_INSTALL_LIBDIR}")
endif()
if(IS_ABSOLUTE "${CMAKE_INSTALL_INCLUDEDIR}")
  set(RELOCK_PC_INCLUDEDIR "${CMAKE_INSTALL_INCLUDEDIR}")
else()
  set(RELOCK_PC_INCLUDEDIR "\${prefix}/${CMAKE_INSTALL_INCLUDEDIR}")
endif()
configure_file(${PROJECT_SOURCE_DIR}/cmake/relock.pc.in ${PROJECT_BINARY_DIR}/relock.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/relock.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)

install(FILES ${PROJECT_SOURCE_DIR}/docs/man/relock.1 DESTINATION ${CMAKE_INSTALL_MANDIR}/man1)
install(FILES ${PROJECT_SOURCE_DIR}/docs/man/relock.3 DESTINATION ${CMAKE_INSTALL_MANDIR}/man3)
install(FILES ${PROJECT_SOURCE_DIR}/docs/man/relock.conf.5 DESTINATION ${CMAKE_INSTALL_MANDIR}/man5)
# The example configuration, every setting at its default with a comment:
# a starting point for /etc/relock.conf, never installed there itself.
install(FILES ${PROJECT_SOURCE_DIR}/conf/relock.conf DESTINATION ${CMAKE_INSTALL_DOCDIR}/examples)
