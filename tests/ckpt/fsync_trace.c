/* Test-only LD_PRELOAD shim (test_export_durable.cpp): appends one line per fsync() and rename()
 * the process makes to the file $WMTP_FSYNC_TRACE — "fsync PATH" (the descriptor's path, from
 * /proc/self/fd) or "rename FROM TO" — then does the real call. It shows in which order a program
 * makes a file's bytes durable, renames it and makes the rename durable, which no output file can. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void trace(const char* kind, const char* a, const char* b) {
  const char* file = getenv("WMTP_FSYNC_TRACE");
  if (!file) return;
  FILE* f = fopen(file, "a");
  if (!f) return;
  if (b) fprintf(f, "%s %s %s\n", kind, a, b);
  else fprintf(f, "%s %s\n", kind, a);
  fclose(f);
}

int fsync(int fd) {
  int (*real)(int) = (int (*)(int))dlsym(RTLD_NEXT, "fsync");
  char link[64], path[PATH_MAX];
  snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
  const ssize_t n = readlink(link, path, sizeof path - 1);
  path[n > 0 ? n : 0] = '\0';
  trace("fsync", path, NULL);
  return real(fd);
}

int rename(const char* from, const char* to) {
  int (*real)(const char*, const char*) = (int (*)(const char*, const char*))dlsym(RTLD_NEXT, "rename");
  /* Absolute, symlink-free paths, as /proc/self/fd gives them for fsync: the source exists; the
   * target may not, so its directory is resolved and its name appended. */
  char a[PATH_MAX], dir[PATH_MAX], b[PATH_MAX];
  if (!realpath(from, a)) snprintf(a, sizeof a, "%s", from);
  const char* slash = strrchr(to, '/');
  snprintf(dir, sizeof dir, "%.*s", slash ? (int)(slash - to) : 1, slash ? to : ".");
  if (realpath(dir[0] ? dir : "/", b)) {
    const size_t len = strlen(b);
    snprintf(b + len, sizeof b - len, "/%s", slash ? slash + 1 : to);
  } else {
    snprintf(b, sizeof b, "%s", to);
  }
  trace("rename", a, b);
  return real(from, to);
}
