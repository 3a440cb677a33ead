# Install rules and the Debian package (CPack DEB): kvfs_<version>_amd64.deb.
#
#   cmake -S . -B build-pkg -DKVFS_BUILD_TESTS=OFF && cmake --build build-pkg -j2
#   (cd build-pkg && cpack -G DEB)        # -> build-pkg/kvfs_0.1.0_amd64.deb
#                                         #    + kvfs-dbgsym_0.1.0_amd64.ddeb (debug symbols)
#
# Layout of the package:
#   /usr/bin/kvfs, /usr/bin/kvfs-fsck             the daemon/CLI and the checker
#   /usr/lib/kvfs/tools/{kvfs-bench,kvfs-nfsim}   kvfs-bench finds its helpers in <exe dir>/../tools/,
#   /usr/lib/kvfs/tools/kvfs -> /usr/bin/kvfs     so it lives here; /usr/bin/kvfs-bench is a symlink
#   /usr/bin/kvfs-bench -> ../lib/kvfs/tools/kvfs-bench
#   /etc/kvfs/kvfs.conf                           default config (conffile), `kvfs mount --config`
#   /lib/systemd/system/kvfs@.service             one mount per instance (escaped mount point)
#   /usr/share/man/man1/kvfs.1.gz, man8/kvfs-fsck.8.gz
#   /usr/share/kvfs/grafana/kvfs-dashboard.json   Grafana dashboard over `kvfs mount --metrics-listen`
#   /usr/share/doc/kvfs/                          README.md and docs/{operations,semantics,design,format}.md
# mount(8) needs nothing more: mount.fuse3 (package fuse3) runs `kvfs SOURCE MOUNTPOINT -o OPTS` for
# the type fuse.kvfs.
include(GNUInstallDirs)

set(KVFS_PKG_DIR ${CMAKE_SOURCE_DIR}/packaging)

install(TARGETS kvfs kvfs-fsck RUNTIME DESTINATION bin)
install(TARGETS kvfs-bench kvfs-nfsim RUNTIME DESTINATION lib/kvfs/tools)
install(CODE "
  set(_d \"\$ENV{DESTDIR}\${CMAKE_INSTALL_PREFIX}\")
  file(MAKE_DIRECTORY \"\${_d}/bin\" \"\${_d}/lib/kvfs/tools\")
  file(CREATE_LINK ../lib/kvfs/tools/kvfs-bench \"\${_d}/bin/kvfs-bench\" SYMBOLIC)
  file(CREATE_LINK ../../../bin/kvfs \"\${_d}/lib/kvfs/tools/kvfs\" SYMBOLIC)
")

install(FILES ${KVFS_PKG_DIR}/kvfs.conf DESTINATION /etc/kvfs PERMISSIONS OWNER_READ OWNER_WRITE GROUP_READ WORLD_READ)
install(FILES ${KVFS_PKG_DIR}/kvfs@.service DESTINATION /lib/systemd/system
        PERMISSIONS OWNER_READ OWNER_WRITE GROUP_READ WORLD_READ)

install(FILES ${KVFS_PKG_DIR}/grafana/kvfs-dashboard.json DESTINATION share/kvfs/grafana
        PERMISSIONS OWNER_READ OWNER_WRITE GROUP_READ WORLD_READ)

install(FILES ${CMAKE_SOURCE_DIR}/README.md ${CMAKE_SOURCE_DIR}/docs/operations.md ${CMAKE_SOURCE_DIR}/docs/semantics.md
              ${CMAKE_SOURCE_DIR}/docs/design.md ${CMAKE_SOURCE_DIR}/docs/format.md
        DESTINATION share/doc/kvfs PERMISSIONS OWNER_READ OWNER_WRITE GROUP_READ WORLD_READ)

# Man pages: compressed at build time (Debian policy 12.1).
set(KVFS_MAN_OUT ${CMAKE_BINARY_DIR}/man)
set(KVFS_MAN_GZ)
foreach(page kvfs.1 kvfs-fsck.8)
  string(REGEX REPLACE ".*\\.([0-9])$" "\\1" sec ${page})
  add_custom_command(OUTPUT ${KVFS_MAN_OUT}/${page}.gz
    COMMAND ${CMAKE_COMMAND} -E make_directory ${KVFS_MAN_OUT}
    COMMAND gzip -9nc ${KVFS_PKG_DIR}/man/${page} > ${KVFS_MAN_OUT}/${page}.gz
    DEPENDS ${KVFS_PKG_DIR}/man/${page} VERBATIM)
  list(APPEND KVFS_MAN_GZ ${KVFS_MAN_OUT}/${page}.gz)
  install(FILES ${KVFS_MAN_OUT}/${page}.gz DESTINATION share/man/man${sec})
endforeach()
add_custom_target(kvfs_manpages ALL DEPENDS ${KVFS_MAN_GZ})

set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME kvfs)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_PACKAGE_CONTACT "kvfs maintainers <kvfs@localhost>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "FUSE file system for LLM KV-cache chunk files over a shared export")
set(CPACK_PACKAGE_DESCRIPTION
    "kvfs is mounted over an NFS export and packs the small per-chunk files written by inference\n\
servers' KV-cache connectors (vLLM, LMCache, SGLang) into large append-only segments, with a local\n\
RocksDB index and an in-memory cache. Several nodes can share one export.")
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)  # kvfs_<version>_<arch>.deb
set(CPACK_DEBIAN_PACKAGE_SECTION admin)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
# Shared libraries (libfuse3-3, librocksdb7.8, liburing2, libxxhash0, libspdlog1.10, libfmt9,
# libcpp-httplib0.11, libsystemd0, libcurl4, libtinyxml2-9, libstdc++6, ...) are found by dpkg-shlibdeps; fuse3 (fusermount3, mount.fuse3) is a program dependency.
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_DEPENDS "fuse3")
set(CPACK_DEBIAN_PACKAGE_CONTROL_EXTRA ${KVFS_PKG_DIR}/debian/conffiles ${KVFS_PKG_DIR}/debian/postinst
    ${KVFS_PKG_DIR}/debian/postrm)
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION TRUE)
# Stripped binaries in the package (RelWithDebInfo binaries are ~150 MB with their DWARF); the debug
# symbols go to kvfs-dbgsym_<version>_<arch>.ddeb (/usr/lib/debug/.build-id/xx/yyyy.debug, found by gdb
# through the build id). Install it next to the package to debug a core file.
set(CPACK_DEBIAN_DEBUGINFO_PACKAGE ON)
set(CPACK_SOURCE_GENERATOR "")
include(CPack)
