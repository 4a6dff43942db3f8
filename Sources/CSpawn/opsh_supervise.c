#define _GNU_SOURCE
#include "opsh_supervise.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

// Everything below runs in a forked copy of a threaded process: only
// system calls (async-signal-safe), no malloc, no stdio, no locks.

// The supervisor's descriptors, at fixed numbers.
enum { CONTROL = 3, REPORT = 4, CHILD_OUT = 5, CHILD_ERR = 6, CGROUP_PROCS = 7, CGROUP_KILL = 8, FIRST_FREE = 9 };

/// `fork` without the atfork handlers (which may take locks another
/// thread held when opsh forked).
extern pid_t _Fork(void);

static void report(int kind, int value) {
    int32_t message[2] = { kind, value };
    ssize_t written;
    do { written = write(REPORT, message, sizeof message); } while (written < 0 && errno == EINTR);
}

/// Closes every descriptor from `first` on (close_range, or one by one
/// from /proc/self/fd on a kernel without it).
static void close_from(int first) {
    if (syscall(SYS_close_range, (unsigned)first, ~0U, 0) == 0) return;
    for (int fd = first; fd < 65536; fd++) close(fd);
}

/// Marks every descriptor from `first` on close-on-exec.
static void cloexec_from(int first) {
#ifndef CLOSE_RANGE_CLOEXEC
#define CLOSE_RANGE_CLOEXEC (1U << 2)
#endif
    if (syscall(SYS_close_range, (unsigned)first, ~0U, CLOSE_RANGE_CLOEXEC) == 0) return;
    for (int fd = first; fd < 65536; fd++) fcntl(fd, F_SETFD, FD_CLOEXEC);
}

static void default_signals(void) {
    struct sigaction action;
    memset(&action, 0, sizeof action);
    action.sa_handler = SIG_DFL;
    for (int signal = 1; signal < 65; signal++) {
        if (signal == SIGKILL || signal == SIGSTOP) continue;
        sigaction(signal, &action, NULL);
    }
}

// MARK: - The process table

#define MAX_PROCESSES 32768
static pid_t table_pid[MAX_PROCESSES];
static pid_t table_parent[MAX_PROCESSES];
static char table_descendant[MAX_PROCESSES];
static char table_zombie[MAX_PROCESSES];

/// `/proc/<pid>/stat`'s parent pid and whether it is a zombie; 0 when it is gone.
static int read_stat(pid_t pid, pid_t *parent, int *zombie) {
    char path[32] = "/proc/";
    char digits[16];
    int length = 0;
    for (pid_t rest = pid; rest > 0 && length < 15; rest /= 10) digits[length++] = (char)('0' + rest % 10);
    int at = 6;
    while (length > 0) path[at++] = digits[--length];
    memcpy(path + at, "/stat", 6);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 0;
    char text[512];
    ssize_t count = read(fd, text, sizeof text - 1);
    close(fd);
    if (count <= 0) return 0;
    text[count] = 0;
    // "pid (comm) S ppid …": the name may hold ')' and spaces, so the last ')'.
    char *close_paren = NULL;
    for (char *c = text; *c; c++) if (*c == ')') close_paren = c;
    if (!close_paren || close_paren[1] != ' ' || !close_paren[2]) return 0;
    *zombie = close_paren[2] == 'Z' || close_paren[2] == 'X';
    char *number = close_paren + 3;
    while (*number == ' ') number++;
    pid_t value = 0;
    while (*number >= '0' && *number <= '9') value = value * 10 + (*number++ - '0');
    *parent = value;
    return 1;
}

/// Every process of the machine with its parent; their count.
static int read_table(void) {
    int directory = open("/proc", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (directory < 0) return 0;
    int count = 0;
    char buffer[8192];
    for (;;) {
        long read_bytes = syscall(SYS_getdents64, directory, buffer, sizeof buffer);
        if (read_bytes <= 0) break;
        for (long offset = 0; offset < read_bytes;) {
            struct dirent64 *entry = (struct dirent64 *)(buffer + offset);
            offset += entry->d_reclen;
            pid_t pid = 0;
            const char *name = entry->d_name;
            if (*name < '1' || *name > '9') continue;
            while (*name >= '0' && *name <= '9') pid = pid * 10 + (*name++ - '0');
            if (*name || count >= MAX_PROCESSES) continue;
            pid_t parent;
            int zombie;
            if (!read_stat(pid, &parent, &zombie)) continue;
            table_pid[count] = pid;
            table_parent[count] = parent;
            table_zombie[count] = (char)zombie;
            table_descendant[count] = 0;
            count++;
        }
    }
    close(directory);
    return count;
}

/// Marks the supervisor's descendants in a table of `count` processes;
/// how many there are.
static int mark_descendants(int count) {
    pid_t self = getpid();
    int marked = 0;
    for (int changed = 1; changed;) {
        changed = 0;
        for (int index = 0; index < count; index++) {
            if (table_descendant[index]) continue;
            pid_t parent = table_parent[index];
            int below = parent == self;
            for (int other = 0; !below && other < count; other++) {
                below = table_descendant[other] && table_pid[other] == parent;
            }
            if (below) {
                table_descendant[index] = 1;
                marked++;
                changed = 1;
            }
        }
    }
    return marked;
}

/// Sends `signal` to every live descendant; how many it found.
static int signal_descendants(int signal) {
    int count = read_table();
    mark_descendants(count);
    int found = 0;
    for (int index = 0; index < count; index++) {
        if (!table_descendant[index] || table_zombie[index]) continue;
        found++;
        kill(table_pid[index], signal);
    }
    return found;
}

// MARK: - The supervisor

static pid_t child = -1;
static int child_reported = 0;

/// Reaps every child that ended (orphans of the tree come to the
/// subreaper); reports the child's end. Returns -1 once there is no child at all.
static int reap(void) {
    for (;;) {
        int status;
        pid_t pid = waitpid(-1, &status, WNOHANG);
        if (pid > 0) {
            if (pid == child && !child_reported) {
                child_reported = 1;
                report(OPSH_SUPERVISED_EXITED, status);
            }
            continue;
        }
        if (pid < 0 && errno == EINTR) continue;
        return pid < 0 ? -1 : 0;
    }
}

/// Kills every descendant until none is left, reports it and exits.
static void kill_everything(void) __attribute__((noreturn));
static void kill_everything(void) {
    if (fcntl(CGROUP_KILL, F_GETFD) >= 0) {
        ssize_t written;
        do { written = write(CGROUP_KILL, "1", 1); } while (written < 0 && errno == EINTR);
    }
    for (;;) {
        int alive = signal_descendants(SIGKILL);
        int children = reap();
        if (alive == 0 && children < 0) break;
        poll(NULL, 0, 5);
    }
    report(OPSH_SUPERVISED_GONE, 0);
    _exit(0);
}

static void supervise(const char *path, char *const argv[], char *const envp[], const char *directory) __attribute__((noreturn));
static void supervise(const char *path, char *const argv[], char *const envp[], const char *directory) {
    // Its own process group: Ctrl-C at opsh's terminal reaches neither it
    // nor (with its own group, below) the child.
    setpgid(0, 0);
    default_signals();
    struct sigaction ignore;
    memset(&ignore, 0, sizeof ignore);
    ignore.sa_handler = SIG_IGN;
    sigaction(SIGPIPE, &ignore, NULL);
    int null = open("/dev/null", O_RDWR | O_CLOEXEC);
    if (null >= 0) {
        dup2(null, 0);
        dup2(null, 1);
        dup2(null, 2);
    }
    prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
    // A forked copy of opsh holds opsh's environment (a database password,
    // the operator's tokens): its /proc/PID/environ must not be readable by
    // the child it supervises (same user; the child execs, which makes it
    // dumpable again).
    prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);

    sigset_t childSignals;
    sigemptyset(&childSignals);
    sigaddset(&childSignals, SIGCHLD);
    sigprocmask(SIG_SETMASK, &childSignals, NULL);
    int signals = signalfd(-1, &childSignals, SFD_CLOEXEC | SFD_NONBLOCK);

    int exec_status[2];
    if (pipe2(exec_status, O_CLOEXEC) != 0) {
        report(OPSH_SUPERVISED_EXEC_FAILED, errno);
        kill_everything();
    }
    child = _Fork();
    if (child == 0) {
        setpgid(0, 0);
        if (fcntl(CGROUP_PROCS, F_GETFD) >= 0) {
            ssize_t written;
            do { written = write(CGROUP_PROCS, "0", 1); } while (written < 0 && errno == EINTR);
        }
        dup2(CHILD_OUT, 1);
        dup2(CHILD_ERR, 2);
        int failure[2] = { 0, 0 };
        if (directory && chdir(directory) != 0) {
            failure[0] = OPSH_SUPERVISED_CHDIR_FAILED;
            failure[1] = errno;
        } else {
            default_signals();
            sigset_t none;
            sigemptyset(&none);
            sigprocmask(SIG_SETMASK, &none, NULL);
            cloexec_from(3);
            execve(path, argv, envp);
            failure[0] = OPSH_SUPERVISED_EXEC_FAILED;
            failure[1] = errno;
        }
        ssize_t ignored = write(exec_status[1], failure, sizeof failure);
        (void)ignored;
        _exit(127);
    }
    close(exec_status[1]);
    // The child has them: the supervisor must not keep its output open.
    close(CHILD_OUT);
    close(CHILD_ERR);
    close(CGROUP_PROCS);
    if (child < 0) {
        report(OPSH_SUPERVISED_EXEC_FAILED, errno);
        kill_everything();
    }
    int failure[2] = { 0, 0 };
    ssize_t count;
    do { count = read(exec_status[0], failure, sizeof failure); } while (count < 0 && errno == EINTR);
    close(exec_status[0]);
    if (count == (ssize_t)sizeof failure) {
        report(failure[0], failure[1]);
    } else {
        report(OPSH_SUPERVISED_STARTED, child);
    }

    struct pollfd waiting[2] = { { CONTROL, POLLIN, 0 }, { signals, POLLIN, 0 } };
    for (;;) {
        reap();
        int ready = poll(waiting, signals >= 0 ? 2 : 1, signals >= 0 ? -1 : 50);
        if (ready < 0 && errno != EINTR) kill_everything();
        if (signals >= 0 && (waiting[1].revents & POLLIN)) {
            struct signalfd_siginfo info;
            while (read(signals, &info, sizeof info) > 0) {}
        }
        if (waiting[0].revents) {
            char command = 0;
            ssize_t got = read(CONTROL, &command, 1);
            if (got < 0 && errno == EINTR) continue;
            // opsh ended (the pipe's end), or asked: nothing may outlive it.
            if (got <= 0 || command == OPSH_SUPERVISOR_KILL) kill_everything();
            if (command == OPSH_SUPERVISOR_TERMINATE) signal_descendants(SIGTERM);
        }
    }
}

/// Moves `fd` to `target` through a copy above every target (so that no
/// move overwrites a descriptor still to be moved); -1 stays closed.
static int park(int fd) {
    return fd < 0 ? -1 : fcntl(fd, F_DUPFD, 100);
}

int opsh_supervise(const char *path, char *const argv[], char *const envp[], const char *directory,
                   int stdout_fd, int stderr_fd, int cgroup_procs_fd, int cgroup_kill_fd,
                   opsh_supervised *supervised) {
    // The control channel is a socket pair, so that opsh's writes to a
    // supervisor that has exited fail with EPIPE (MSG_NOSIGNAL) instead of
    // killing opsh with SIGPIPE.
    int control[2], reports[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, control) != 0) return errno;
    if (pipe2(reports, O_CLOEXEC) != 0) {
        int error = errno;
        close(control[0]);
        close(control[1]);
        return error;
    }
    pid_t pid = _Fork();
    if (pid < 0) {
        int error = errno;
        close(control[0]); close(control[1]); close(reports[0]); close(reports[1]);
        return error;
    }
    if (pid == 0) {
        int parked[6] = { park(control[0]), park(reports[1]), park(stdout_fd), park(stderr_fd),
                          park(cgroup_procs_fd), park(cgroup_kill_fd) };
        for (int index = 0; index < 6; index++) {
            if (parked[index] >= 0) dup2(parked[index], CONTROL + index);
            else close(CONTROL + index);
        }
        close_from(FIRST_FREE);
        supervise(path, argv, envp, directory);
    }
    close(control[0]);
    close(reports[1]);
    supervised->supervisor = pid;
    supervised->control = control[1];
    supervised->report = reports[0];
    return 0;
}
