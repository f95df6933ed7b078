/*
 * LD_PRELOAD shim for hosts whose kernel has no loadable modules, hence no /proc/modules:
 * Scaphandre 1.0.0 reads that file to check for the RAPL drivers and panics when it is absent,
 * and a bind mount needs the file to exist. Opens of exactly "/proc/modules" are redirected to
 * the file named by KEPLER_BENCH_MODULES; every other open passes through unchanged.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

static const char *redirect(const char *path)
{
	const char *fixture;

	if (path == NULL || strcmp(path, "/proc/modules") != 0)
		return path;
	fixture = getenv("KEPLER_BENCH_MODULES");
	return fixture != NULL ? fixture : path;
}

static mode_t mode_arg(int flags, va_list ap)
{
	return (flags & (O_CREAT | O_TMPFILE)) ? va_arg(ap, mode_t) : 0;
}

#define PASS_OPEN(name)                                                        \
	int name(const char *path, int flags, ...)                             \
	{                                                                      \
		static int (*real)(const char *, int, ...);                    \
		va_list ap;                                                    \
		mode_t mode;                                                   \
		if (real == NULL)                                              \
			real = dlsym(RTLD_NEXT, #name);                        \
		va_start(ap, flags);                                           \
		mode = mode_arg(flags, ap);                                    \
		va_end(ap);                                                    \
		return real(redirect(path), flags, mode);                      \
	}

#define PASS_OPENAT(name)                                                      \
	int name(int dirfd, const char *path, int flags, ...)                  \
	{                                                                      \
		static int (*real)(int, const char *, int, ...);               \
		va_list ap;                                                    \
		mode_t mode;                                                   \
		if (real == NULL)                                              \
			real = dlsym(RTLD_NEXT, #name);                        \
		va_start(ap, flags);                                           \
		mode = mode_arg(flags, ap);                                    \
		va_end(ap);                                                    \
		return real(dirfd, redirect(path), flags, mode);               \
	}

PASS_OPEN(open)
PASS_OPEN(open64)
PASS_OPENAT(openat)
PASS_OPENAT(openat64)
