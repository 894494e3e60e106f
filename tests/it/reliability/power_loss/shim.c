/*
 * The power-loss recorder: an LD_PRELOAD library that logs every change a
 * process makes to the files of one directory, and every sync, in the order
 * they took effect. The test builds the disk states a power cut may leave
 * from that log (see mod.rs).
 *
 * Environment: LITEJOB_POWER_DIR, the watched directory (absolute, no
 * trailing slash); LITEJOB_POWER_LOG, the log file (outside that directory).
 * Without both the library passes every call through untouched. With
 * LITEJOB_POWER_NO_DIRSYNC=1 it also drops every sync of the directory.
 *
 * What is logged: opens (and whether the open created the file), writes
 * with their data (write, pwrite, writev, pwritev), truncates, fallocates,
 * unlinks and renames of the directory's files, and syncs (fsync,
 * fdatasync) of those files and of the directory itself. The `-shm` file is
 * not logged: SQLite rebuilds it after a crash, and writes it through mmap.
 *
 * Order: a per-process mutex is held across the real call and the append of
 * its record, so a process's records are in the order of its effects; an
 * open that may create a file also holds an flock on the log, so that its
 * creation is logged before any other process's open of the file. A
 * sync logs SYNC_BEGIN before the real call and SYNC_END after it (the
 * mutex is not held meanwhile, so other threads go on): it covers the
 * writes logged before its begin, and counts once its end is logged. Every
 * process appends to one O_APPEND log, each record with one write(2), so two
 * processes on one file share one order (SQLite's locks serialize their
 * writes to the same pages).
 *
 * Record: a 48-byte little-endian header (see `struct rec`), then `nlen`
 * bytes of name, then `dlen` bytes of data.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <unistd.h>

enum {
    K_HELLO = 0,      /* a process started recording */
    K_OPEN = 1,       /* name, ino; a = 1 if this open created the file */
    K_WRITE = 2,      /* ino, a = offset, data */
    K_TRUNC = 3,      /* ino, a = new size */
    K_FALLOC = 4,     /* ino, a = offset, b = length; target = mode */
    K_UNLINK = 5,     /* name */
    K_RENAME = 6,     /* name = "old\0new" */
    K_SYNC_BEGIN = 7, /* target (0 file, 1 directory), ino, a = serial */
    K_SYNC_END = 8,   /* target, ino, a = serial, b = result (0 ok) */
    K_UNMODELLED = 9, /* name: a change the model cannot follow */
};

struct rec {
    uint32_t len;
    uint8_t kind;
    uint8_t target;
    uint16_t pad;
    uint32_t pid;
    uint32_t tid;
    uint64_t ino;
    int64_t a;
    int64_t b;
    uint32_t nlen;
    uint32_t dlen;
};

enum { FD_NONE = 0, FD_FILE = 1, FD_DIR = 2 };
#define MAX_FDS 65536
static struct {
    uint8_t kind;
    uint64_t ino;
} fds[MAX_FDS];

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t once = PTHREAD_ONCE_INIT;
static int active;
static int log_fd = -1;
static char watched[PATH_MAX];
static size_t watched_len;
static uint64_t serial;
/* LITEJOB_POWER_NO_DIRSYNC=1: a sync of the directory does nothing and is
 * not logged, as if nobody synced it (the harness's own test). */
static int no_dirsync;

static int (*real_open)(const char *, int, ...);
static int (*real_open64)(const char *, int, ...);
static int (*real_openat)(int, const char *, int, ...);
static int (*real_openat64)(int, const char *, int, ...);
static int (*real_close)(int);
static ssize_t (*real_write)(int, const void *, size_t);
static ssize_t (*real_pwrite)(int, const void *, size_t, off_t);
static ssize_t (*real_pwrite64)(int, const void *, size_t, off64_t);
static ssize_t (*real_writev)(int, const struct iovec *, int);
static ssize_t (*real_pwritev)(int, const struct iovec *, int, off_t);
static ssize_t (*real_pwritev64)(int, const struct iovec *, int, off64_t);
static int (*real_ftruncate)(int, off_t);
static int (*real_ftruncate64)(int, off64_t);
static int (*real_fallocate)(int, int, off_t, off_t);
static int (*real_fallocate64)(int, int, off64_t, off64_t);
static int (*real_posix_fallocate)(int, off_t, off_t);
static int (*real_posix_fallocate64)(int, off64_t, off64_t);
static int (*real_fsync)(int);
static int (*real_fdatasync)(int);
static int (*real_unlink)(const char *);
static int (*real_unlinkat)(int, const char *, int);
static int (*real_rename)(const char *, const char *);
static int (*real_renameat)(int, const char *, int, const char *);
static int (*real_renameat2)(int, const char *, int, const char *, unsigned);
static int (*real_dup)(int);
static int (*real_dup2)(int, int);
static int (*real_dup3)(int, int, int);

static void append(const struct rec *h, const void *name, const void *data);

static void init(void) {
#define REAL(f) real_##f = dlsym(RTLD_NEXT, #f)
    REAL(open); REAL(open64); REAL(openat); REAL(openat64); REAL(close);
    REAL(write); REAL(pwrite); REAL(pwrite64); REAL(writev); REAL(pwritev);
    REAL(pwritev64); REAL(ftruncate); REAL(ftruncate64); REAL(fallocate);
    REAL(fallocate64); REAL(posix_fallocate); REAL(posix_fallocate64);
    REAL(fsync); REAL(fdatasync); REAL(unlink); REAL(unlinkat); REAL(rename);
    REAL(renameat); REAL(renameat2); REAL(dup); REAL(dup2); REAL(dup3);
#undef REAL
    const char *dir = getenv("LITEJOB_POWER_DIR");
    const char *logp = getenv("LITEJOB_POWER_LOG");
    if (!dir || !logp || dir[0] != '/' || strlen(dir) >= sizeof(watched))
        return;
    no_dirsync = getenv("LITEJOB_POWER_NO_DIRSYNC") != 0;
    strcpy(watched, dir);
    watched_len = strlen(watched);
    while (watched_len > 1 && watched[watched_len - 1] == '/')
        watched[--watched_len] = 0;
    log_fd = real_open(logp, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    if (log_fd < 0)
        return;
    active = 1;
    struct rec h = {0};
    h.kind = K_HELLO;
    append(&h, 0, 0);
}

__attribute__((constructor)) static void start(void) { pthread_once(&once, init); }

static void ensure(void) { pthread_once(&once, init); }

static void append(const struct rec *hdr, const void *name, const void *data) {
    struct rec h = *hdr;
    h.pid = (uint32_t)getpid();
    h.tid = (uint32_t)syscall(SYS_gettid);
    h.len = (uint32_t)(sizeof h + h.nlen + h.dlen);
    char small[4096];
    char *buf = h.len <= sizeof small ? small : malloc(h.len);
    if (!buf)
        abort();
    memcpy(buf, &h, sizeof h);
    if (h.nlen)
        memcpy(buf + sizeof h, name, h.nlen);
    if (h.dlen)
        memcpy(buf + sizeof h + h.nlen, data, h.dlen);
    size_t done = 0;
    int saved = errno;
    while (done < h.len) {
        ssize_t n = real_write(log_fd, buf + done, h.len - done);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            abort(); /* a log with a hole would be read as a lie */
        done += (size_t)n;
    }
    errno = saved;
    if (buf != small)
        free(buf);
}

/* The name of `path` (relative to `dirfd`) inside the watched directory:
 * 1 and its name in `name` for a file directly in it, 2 for the directory
 * itself, 0 otherwise. */
static int locate(int dirfd, const char *path, char *name, size_t cap) {
    char abs[PATH_MAX * 2];
    if (!path)
        return 0;
    if (path[0] == '/') {
        if (strlen(path) >= sizeof abs)
            return 0;
        strcpy(abs, path);
    } else if (dirfd == AT_FDCWD) {
        if (!getcwd(abs, PATH_MAX))
            return 0;
        size_t l = strlen(abs);
        if (l + 1 + strlen(path) >= sizeof abs)
            return 0;
        abs[l] = '/';
        strcpy(abs + l + 1, path);
    } else if (dirfd >= 0 && dirfd < MAX_FDS && fds[dirfd].kind == FD_DIR) {
        if (watched_len + 1 + strlen(path) >= sizeof abs)
            return 0;
        memcpy(abs, watched, watched_len);
        abs[watched_len] = '/';
        strcpy(abs + watched_len + 1, path);
    } else {
        return 0;
    }
    size_t l = strlen(abs);
    while (l > 1 && abs[l - 1] == '/')
        abs[--l] = 0;
    while (l > 2 && abs[l - 1] == '.' && abs[l - 2] == '/') {
        abs[l -= 2] = 0;
    }
    if (strncmp(abs, watched, watched_len) != 0)
        return 0;
    if (abs[watched_len] == 0)
        return 2;
    if (abs[watched_len] != '/')
        return 0;
    const char *rest = abs + watched_len + 1;
    if (!*rest || strchr(rest, '/') || strlen(rest) >= cap)
        return 0;
    strcpy(name, rest);
    return 1;
}

static int ends_with(const char *s, const char *suffix) {
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcmp(s + a - b, suffix) == 0;
}

static int tracked(int fd) { return active && fd >= 0 && fd < MAX_FDS && fds[fd].kind != FD_NONE; }
static int tracked_file(int fd) { return active && fd >= 0 && fd < MAX_FDS && fds[fd].kind == FD_FILE; }

typedef int (*open_fn)(int, const char *, int, mode_t, int);

/* Opens through the real function `which` (0 open, 1 open64, 2 openat,
 * 3 openat64). */
static int call_open(int which, int dirfd, const char *path, int flags, mode_t mode) {
    switch (which) {
    case 0: return real_open(path, flags, mode);
    case 1: return real_open64(path, flags, mode);
    case 2: return real_openat(dirfd, path, flags, mode);
    default: return real_openat64(dirfd, path, flags, mode);
    }
}

static int do_open(int which, int dirfd, const char *path, int flags, mode_t mode) {
    ensure();
    char name[NAME_MAX + 1];
    int where = active ? locate(dirfd, path, name, sizeof name) : 0;
    if (where == 0 || (where == 1 && ends_with(name, "-shm")))
        return call_open(which, dirfd, path, flags, mode);
    pthread_mutex_lock(&lock);
    /* Another process may open the file between this open's creation of it
     * and its record: its open would be logged first, an open of a file not
     * yet created. The log's flock makes create-and-record one step for all
     * the processes. */
    int xlock = (flags & O_CREAT) && where == 1 && log_fd >= 0;
    if (xlock)
        flock(log_fd, LOCK_EX);
    int fd, created = 0;
    if ((flags & O_CREAT) && !(flags & O_EXCL) && where == 1) {
        /* Whether this open creates the file: try exclusively first. */
        for (;;) {
            fd = call_open(which, dirfd, path, flags | O_EXCL, mode);
            if (fd >= 0) {
                created = 1;
                break;
            }
            if (errno != EEXIST)
                break;
            fd = call_open(which, dirfd, path, flags & ~O_CREAT, mode);
            if (fd >= 0 || errno != ENOENT)
                break;
        }
    } else {
        fd = call_open(which, dirfd, path, flags, mode);
        created = fd >= 0 && (flags & O_CREAT) && (flags & O_EXCL);
    }
    if (fd >= 0 && fd < MAX_FDS) {
        int saved = errno;
        struct stat st;
        if (fstat(fd, &st) == 0) {
            fds[fd].kind = where == 2 ? FD_DIR : FD_FILE;
            fds[fd].ino = st.st_ino;
            if (where == 1) {
                struct rec h = {0};
                h.kind = K_OPEN;
                h.ino = st.st_ino;
                h.a = created;
                h.nlen = (uint32_t)strlen(name);
                append(&h, name, 0);
                if ((flags & O_TRUNC) && !created && (flags & O_ACCMODE) != O_RDONLY) {
                    struct rec t = {0};
                    t.kind = K_TRUNC;
                    t.ino = st.st_ino;
                    t.a = 0;
                    append(&t, 0, 0);
                }
            }
        }
        errno = saved;
    }
    if (xlock) {
        int saved = errno;
        flock(log_fd, LOCK_UN);
        errno = saved;
    }
    pthread_mutex_unlock(&lock);
    return fd;
}

static mode_t mode_of(int flags, va_list ap) {
    if ((flags & O_CREAT) || (flags & O_TMPFILE) == O_TMPFILE)
        return (mode_t)va_arg(ap, int);
    return 0;
}

int open(const char *path, int flags, ...) {
    va_list ap;
    va_start(ap, flags);
    mode_t m = mode_of(flags, ap);
    va_end(ap);
    return do_open(0, AT_FDCWD, path, flags, m);
}

int open64(const char *path, int flags, ...) {
    va_list ap;
    va_start(ap, flags);
    mode_t m = mode_of(flags, ap);
    va_end(ap);
    return do_open(1, AT_FDCWD, path, flags, m);
}

int openat(int dirfd, const char *path, int flags, ...) {
    va_list ap;
    va_start(ap, flags);
    mode_t m = mode_of(flags, ap);
    va_end(ap);
    return do_open(2, dirfd, path, flags, m);
}

int openat64(int dirfd, const char *path, int flags, ...) {
    va_list ap;
    va_start(ap, flags);
    mode_t m = mode_of(flags, ap);
    va_end(ap);
    return do_open(3, dirfd, path, flags, m);
}

int __open_2(const char *path, int flags) { return do_open(0, AT_FDCWD, path, flags, 0); }
int __open64_2(const char *path, int flags) { return do_open(1, AT_FDCWD, path, flags, 0); }
int __openat_2(int dirfd, const char *path, int flags) { return do_open(2, dirfd, path, flags, 0); }
int __openat64_2(int dirfd, const char *path, int flags) { return do_open(3, dirfd, path, flags, 0); }
int creat(const char *path, mode_t mode) { return do_open(0, AT_FDCWD, path, O_CREAT | O_WRONLY | O_TRUNC, mode); }
int creat64(const char *path, mode_t mode) { return do_open(1, AT_FDCWD, path, O_CREAT | O_WRONLY | O_TRUNC, mode); }

int close(int fd) {
    ensure();
    if (!tracked(fd))
        return real_close(fd);
    pthread_mutex_lock(&lock);
    int r = real_close(fd);
    fds[fd].kind = FD_NONE;
    pthread_mutex_unlock(&lock);
    return r;
}

static void log_write(int fd, int64_t off, const void *data, size_t n) {
    struct rec h = {0};
    h.kind = K_WRITE;
    h.ino = fds[fd].ino;
    h.a = off;
    h.dlen = (uint32_t)n;
    append(&h, 0, data);
}

ssize_t write(int fd, const void *buf, size_t n) {
    ensure();
    if (!tracked_file(fd))
        return real_write(fd, buf, n);
    pthread_mutex_lock(&lock);
    ssize_t r = real_write(fd, buf, n);
    if (r > 0) {
        int saved = errno;
        /* After the write the offset is its end, O_APPEND or not. */
        off_t end = lseek(fd, 0, SEEK_CUR);
        log_write(fd, (int64_t)end - r, buf, (size_t)r);
        errno = saved;
    }
    pthread_mutex_unlock(&lock);
    return r;
}

ssize_t pwrite(int fd, const void *buf, size_t n, off_t off) {
    ensure();
    if (!tracked_file(fd))
        return real_pwrite(fd, buf, n, off);
    pthread_mutex_lock(&lock);
    ssize_t r = real_pwrite(fd, buf, n, off);
    if (r > 0)
        log_write(fd, off, buf, (size_t)r);
    pthread_mutex_unlock(&lock);
    return r;
}

ssize_t pwrite64(int fd, const void *buf, size_t n, off64_t off) {
    ensure();
    if (!tracked_file(fd))
        return real_pwrite64(fd, buf, n, off);
    pthread_mutex_lock(&lock);
    ssize_t r = real_pwrite64(fd, buf, n, off);
    if (r > 0)
        log_write(fd, off, buf, (size_t)r);
    pthread_mutex_unlock(&lock);
    return r;
}

/* The first `n` bytes the vector holds, in one buffer. */
static char *gather(const struct iovec *iov, int cnt, size_t n) {
    char *buf = malloc(n ? n : 1);
    if (!buf)
        abort();
    size_t done = 0;
    for (int i = 0; i < cnt && done < n; i++) {
        size_t take = iov[i].iov_len < n - done ? iov[i].iov_len : n - done;
        memcpy(buf + done, iov[i].iov_base, take);
        done += take;
    }
    return buf;
}

ssize_t writev(int fd, const struct iovec *iov, int cnt) {
    ensure();
    if (!tracked_file(fd))
        return real_writev(fd, iov, cnt);
    pthread_mutex_lock(&lock);
    ssize_t r = real_writev(fd, iov, cnt);
    if (r > 0) {
        int saved = errno;
        off_t end = lseek(fd, 0, SEEK_CUR);
        char *buf = gather(iov, cnt, (size_t)r);
        log_write(fd, (int64_t)end - r, buf, (size_t)r);
        free(buf);
        errno = saved;
    }
    pthread_mutex_unlock(&lock);
    return r;
}

ssize_t pwritev(int fd, const struct iovec *iov, int cnt, off_t off) {
    ensure();
    if (!tracked_file(fd))
        return real_pwritev(fd, iov, cnt, off);
    pthread_mutex_lock(&lock);
    ssize_t r = real_pwritev(fd, iov, cnt, off);
    if (r > 0) {
        char *buf = gather(iov, cnt, (size_t)r);
        log_write(fd, off, buf, (size_t)r);
        free(buf);
    }
    pthread_mutex_unlock(&lock);
    return r;
}

ssize_t pwritev64(int fd, const struct iovec *iov, int cnt, off64_t off) {
    ensure();
    if (!tracked_file(fd))
        return real_pwritev64(fd, iov, cnt, off);
    pthread_mutex_lock(&lock);
    ssize_t r = real_pwritev64(fd, iov, cnt, off);
    if (r > 0) {
        char *buf = gather(iov, cnt, (size_t)r);
        log_write(fd, off, buf, (size_t)r);
        free(buf);
    }
    pthread_mutex_unlock(&lock);
    return r;
}

static void log_trunc(int fd, int64_t size) {
    struct rec h = {0};
    h.kind = K_TRUNC;
    h.ino = fds[fd].ino;
    h.a = size;
    append(&h, 0, 0);
}

int ftruncate(int fd, off_t size) {
    ensure();
    if (!tracked_file(fd))
        return real_ftruncate(fd, size);
    pthread_mutex_lock(&lock);
    int r = real_ftruncate(fd, size);
    if (r == 0)
        log_trunc(fd, size);
    pthread_mutex_unlock(&lock);
    return r;
}

int ftruncate64(int fd, off64_t size) {
    ensure();
    if (!tracked_file(fd))
        return real_ftruncate64(fd, size);
    pthread_mutex_lock(&lock);
    int r = real_ftruncate64(fd, size);
    if (r == 0)
        log_trunc(fd, size);
    pthread_mutex_unlock(&lock);
    return r;
}

static void log_falloc(int fd, int mode, int64_t off, int64_t len) {
    struct rec h = {0};
    h.kind = K_FALLOC;
    h.target = (uint8_t)mode;
    h.ino = fds[fd].ino;
    h.a = off;
    h.b = len;
    append(&h, 0, 0);
}

int fallocate(int fd, int mode, off_t off, off_t len) {
    ensure();
    if (!tracked_file(fd))
        return real_fallocate(fd, mode, off, len);
    pthread_mutex_lock(&lock);
    int r = real_fallocate(fd, mode, off, len);
    if (r == 0)
        log_falloc(fd, mode, off, len);
    pthread_mutex_unlock(&lock);
    return r;
}

int fallocate64(int fd, int mode, off64_t off, off64_t len) {
    ensure();
    if (!tracked_file(fd))
        return real_fallocate64(fd, mode, off, len);
    pthread_mutex_lock(&lock);
    int r = real_fallocate64(fd, mode, off, len);
    if (r == 0)
        log_falloc(fd, mode, off, len);
    pthread_mutex_unlock(&lock);
    return r;
}

int posix_fallocate(int fd, off_t off, off_t len) {
    ensure();
    if (!tracked_file(fd))
        return real_posix_fallocate(fd, off, len);
    pthread_mutex_lock(&lock);
    int r = real_posix_fallocate(fd, off, len);
    if (r == 0)
        log_falloc(fd, 0, off, len);
    pthread_mutex_unlock(&lock);
    return r;
}

int posix_fallocate64(int fd, off64_t off, off64_t len) {
    ensure();
    if (!tracked_file(fd))
        return real_posix_fallocate64(fd, off, len);
    pthread_mutex_lock(&lock);
    int r = real_posix_fallocate64(fd, off, len);
    if (r == 0)
        log_falloc(fd, 0, off, len);
    pthread_mutex_unlock(&lock);
    return r;
}

/* A sync of a file or of the directory: begin, the real call unlocked, end. */
static int do_sync(int fd, int (*real)(int)) {
    ensure();
    if (!tracked(fd))
        return real(fd);
    if (no_dirsync && fds[fd].kind == FD_DIR)
        return 0;
    pthread_mutex_lock(&lock);
    struct rec h = {0};
    h.kind = K_SYNC_BEGIN;
    h.target = fds[fd].kind == FD_DIR;
    h.ino = fds[fd].ino;
    h.a = (int64_t)++serial;
    append(&h, 0, 0);
    pthread_mutex_unlock(&lock);
    int r = real(fd);
    int saved = errno;
    pthread_mutex_lock(&lock);
    h.kind = K_SYNC_END;
    h.b = r == 0 ? 0 : (saved ? saved : -1);
    append(&h, 0, 0);
    pthread_mutex_unlock(&lock);
    errno = saved;
    return r;
}

int fsync(int fd) { return do_sync(fd, real_fsync); }
int fdatasync(int fd) { return do_sync(fd, real_fdatasync); }

static int do_unlink(int dirfd, const char *path, int flags, int at) {
    char name[NAME_MAX + 1];
    int where = active ? locate(dirfd, path, name, sizeof name) : 0;
    if (where != 1 || ends_with(name, "-shm"))
        return at ? real_unlinkat(dirfd, path, flags) : real_unlink(path);
    pthread_mutex_lock(&lock);
    int r = at ? real_unlinkat(dirfd, path, flags) : real_unlink(path);
    if (r == 0) {
        int saved = errno;
        struct rec h = {0};
        h.kind = (flags & AT_REMOVEDIR) ? K_UNMODELLED : K_UNLINK;
        h.nlen = (uint32_t)strlen(name);
        append(&h, name, 0);
        errno = saved;
    }
    pthread_mutex_unlock(&lock);
    return r;
}

int unlink(const char *path) {
    ensure();
    return do_unlink(AT_FDCWD, path, 0, 0);
}

int unlinkat(int dirfd, const char *path, int flags) {
    ensure();
    return do_unlink(dirfd, path, flags, 1);
}

/* which: 0 rename, 1 renameat, 2 renameat2 */
static int do_rename(int which, int ofd, const char *old, int nfd, const char *new, unsigned flags) {
    ensure();
    char a[NAME_MAX + 1], b[NAME_MAX + 1];
    int wa = active ? locate(ofd, old, a, sizeof a) : 0;
    int wb = active ? locate(nfd, new, b, sizeof b) : 0;
    if (wa == 0 && wb == 0) {
        return which == 0 ? real_rename(old, new)
             : which == 1 ? real_renameat(ofd, old, nfd, new)
                          : real_renameat2(ofd, old, nfd, new, flags);
    }
    pthread_mutex_lock(&lock);
    int r = which == 0 ? real_rename(old, new)
          : which == 1 ? real_renameat(ofd, old, nfd, new)
                       : real_renameat2(ofd, old, nfd, new, flags);
    if (r == 0) {
        int saved = errno;
        char both[2 * NAME_MAX + 2];
        size_t la = wa == 1 ? strlen(a) : 0, lb = wb == 1 ? strlen(b) : 0;
        memcpy(both, wa == 1 ? a : "", la);
        both[la] = 0;
        memcpy(both + la + 1, wb == 1 ? b : "", lb);
        struct rec h = {0};
        /* In and out of the directory, exchanges: not modelled. */
        h.kind = (wa == 1 && wb == 1 && flags == 0) ? K_RENAME : K_UNMODELLED;
        h.nlen = (uint32_t)(la + 1 + lb);
        append(&h, both, 0);
        errno = saved;
    }
    pthread_mutex_unlock(&lock);
    return r;
}

int rename(const char *old, const char *new) { return do_rename(0, AT_FDCWD, old, AT_FDCWD, new, 0); }
int renameat(int ofd, const char *old, int nfd, const char *new) { return do_rename(1, ofd, old, nfd, new, 0); }
int renameat2(int ofd, const char *old, int nfd, const char *new, unsigned flags) {
    return do_rename(2, ofd, old, nfd, new, flags);
}

/* A duplicate of a watched descriptor is watched too. */
static int track_dup(int from, int to) {
    if (to >= 0 && to < MAX_FDS && from >= 0 && from < MAX_FDS) {
        fds[to] = fds[from];
    }
    return to;
}

int dup(int fd) {
    ensure();
    if (!active)
        return real_dup(fd);
    pthread_mutex_lock(&lock);
    int r = real_dup(fd);
    if (r >= 0)
        track_dup(fd, r);
    pthread_mutex_unlock(&lock);
    return r;
}

int dup2(int fd, int to) {
    ensure();
    if (!active)
        return real_dup2(fd, to);
    pthread_mutex_lock(&lock);
    int r = real_dup2(fd, to);
    if (r >= 0)
        track_dup(fd, r);
    pthread_mutex_unlock(&lock);
    return r;
}

int dup3(int fd, int to, int flags) {
    ensure();
    if (!active)
        return real_dup3(fd, to, flags);
    pthread_mutex_lock(&lock);
    int r = real_dup3(fd, to, flags);
    if (r >= 0)
        track_dup(fd, r);
    pthread_mutex_unlock(&lock);
    return r;
}
