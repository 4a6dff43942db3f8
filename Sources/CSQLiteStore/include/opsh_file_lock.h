// Advisory locks on files, for Store's Swift (which cannot call fcntl's
// F_OFD_* commands or flock(2) by name): Linux's open file description
// ("OFD") locks belong to the open file, not to the process, so no other
// descriptor the process opens or closes on the same file (SQLite's own,
// say) releases them, and they go when the process ends, also when it is
// killed. Byte ranges: `length` 0 means "to the end of the file".
#pragma once

/// Whether another open file holds a lock on [start, start + length) that
/// a write lock there would conflict with (any lock, read or write, POSIX
/// or OFD): 1 yes, 0 no, -1 on error (errno).
int opsh_file_lock_conflicts(int descriptor, long long start, long long length);

/// Takes an OFD lock on [start, start + length) without waiting, a write
/// lock when `exclusive` (the descriptor must be open for writing), else a
/// read lock: 0 taken, 1 another open file holds a conflicting one,
/// -1 on error (errno).
int opsh_file_lock_take(int descriptor, int exclusive, long long start, long long length);

/// Releases this open file's OFD lock on [start, start + length).
void opsh_file_lock_release(int descriptor, long long start, long long length);

/// Whether another open file holds a flock(2) lock on the file (tried
/// with a non-blocking exclusive flock, released at once): 1 yes, 0 no.
int opsh_file_flock_held(int descriptor);
