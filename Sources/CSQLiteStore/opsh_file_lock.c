#define _GNU_SOURCE
#include "opsh_file_lock.h"
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/file.h>

static struct flock range(short type, long long start, long long length) {
    struct flock lock;
    memset(&lock, 0, sizeof lock);
    lock.l_type = type;
    lock.l_whence = SEEK_SET;
    lock.l_start = (off_t)start;
    lock.l_len = (off_t)length;
    return lock;
}

int opsh_file_lock_conflicts(int descriptor, long long start, long long length) {
    struct flock probe = range(F_WRLCK, start, length);
    if (fcntl(descriptor, F_OFD_GETLK, &probe) != 0) return -1;
    return probe.l_type != F_UNLCK;
}

int opsh_file_lock_take(int descriptor, int exclusive, long long start, long long length) {
    struct flock lock = range(exclusive ? F_WRLCK : F_RDLCK, start, length);
    if (fcntl(descriptor, F_OFD_SETLK, &lock) == 0) return 0;
    return errno == EAGAIN || errno == EACCES ? 1 : -1;
}

void opsh_file_lock_release(int descriptor, long long start, long long length) {
    struct flock lock = range(F_UNLCK, start, length);
    fcntl(descriptor, F_OFD_SETLK, &lock);
}

int opsh_file_flock_held(int descriptor) {
    if (flock(descriptor, LOCK_EX | LOCK_NB) == 0) {
        flock(descriptor, LOCK_UN);
        return 0;
    }
    return errno == EWOULDBLOCK;
}
