#ifndef OPSH_SPAWN_H
#define OPSH_SPAWN_H

#include <spawn.h>
#include "opsh_supervise.h"

/// The GNU extensions a child process needs that Swift's Glibc module does
/// not import. Linked, not looked up with dlsym: a static opsh has no
/// dynamic symbol table to look them up in.

/// posix_spawn_file_actions_addchdir_np: the child starts in `path`.
int opsh_spawn_addchdir(posix_spawn_file_actions_t *actions, const char *path);

/// pipe2(fds, O_CLOEXEC): a pipe whose both ends are close-on-exec from
/// the start (no window in which another thread's child inherits them).
int opsh_pipe_cloexec(int fds[2]);

#endif
