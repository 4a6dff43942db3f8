#ifndef OPSH_SUPERVISE_H
#define OPSH_SUPERVISE_H

#include <stdint.h>
#include <sys/types.h>

/// A child process under a supervisor of its own, so that nothing it
/// starts outlives it (ARCHITECTURE.md, "Build runners and the queue").
///
/// opsh forks the supervisor (no exec: a few hundred lines of C that make
/// only system calls, as a forked copy of a threaded process must); the
/// supervisor makes itself a child subreaper (PR_SET_CHILD_SUBREAPER: every
/// process the child starts stays its descendant, `setsid` and double
/// forks included) and forks the child, which execs. The supervisor then
/// only waits: for the child to exit (reported to opsh) and for opsh to
/// say "terminate" (SIGTERM to every descendant) or "kill" (SIGKILL to
/// every descendant until none is left, then exit). opsh gone (the
/// control pipe at its end: exit, a crash, SIGKILL) counts as "kill".
///
/// Descendants are found in /proc by their parent pids. With a cgroup
/// (v2; `cgroup_procs_fd` and `cgroup_kill_fd` open for writing), the
/// child enters it before it execs, and "kill" writes `cgroup.kill`
/// first: every process of the cgroup dies at once, however fast it forks.

/// What the supervisor reports on its report pipe, 8 bytes each:
/// `{int32 kind, int32 value}`.
enum {
    /// The child execed; value: its pid.
    OPSH_SUPERVISED_STARTED = 1,
    /// The child could not exec; value: errno.
    OPSH_SUPERVISED_EXEC_FAILED = 2,
    /// The child could not enter its working directory; value: errno.
    OPSH_SUPERVISED_CHDIR_FAILED = 3,
    /// The child exited; value: its wait status.
    OPSH_SUPERVISED_EXITED = 4,
    /// Every descendant is gone (after "kill"); the supervisor exits next.
    OPSH_SUPERVISED_GONE = 5,
};

/// What opsh writes on the control pipe, one byte each.
#define OPSH_SUPERVISOR_TERMINATE 'T'
#define OPSH_SUPERVISOR_KILL 'K'

typedef struct opsh_supervised {
    /// The supervisor (opsh reaps it after OPSH_SUPERVISED_GONE).
    pid_t supervisor;
    /// opsh's end of the control channel (a socket, close-on-exec:
    /// write with MSG_NOSIGNAL).
    int control;
    /// Read end of the report pipe (close-on-exec).
    int report;
} opsh_supervised;

/// Starts `path` with `argv` and `envp` (NULL-terminated, made before the
/// call) under a supervisor. The child's stdin is /dev/null, its stdout
/// and stderr `stdout_fd` and `stderr_fd` (the caller closes its copies
/// after the call), its working directory `directory` (NULL: opsh's), its
/// own process group, every signal at its default and unblocked. Returns
/// 0, or the errno of the failed pipe or fork.
int opsh_supervise(const char *path, char *const argv[], char *const envp[], const char *directory,
                   int stdout_fd, int stderr_fd, int cgroup_procs_fd, int cgroup_kill_fd,
                   opsh_supervised *supervised);

#endif
