/* Every SLIP_* environment variable, one row each: the parser (env.c), `slipstream config --doc`
 * and `--markdown` (docs/CONFIG.md's tables) all come from this list.
 *
 * To add a variable: add one row X(NAME, KIND, SECTION, fields...) below (NAME without "SLIP_"),
 * read it with slip_env__get(SLIP_ENV_NAME, ...) (numbers, booleans, enum indexes) or
 * slip_env__text() (lists, text), then regenerate docs/CONFIG.md's tables with
 * `build/slipstream config --markdown` (tests/system/test_config.py checks they agree).
 * Fields: .min/.max (INT, DURATION: the range, in .unit for a duration; LIST: how many items),
 * .unit ("us" or "ms", DURATION), .choices ("a,b,c", ENUM: slip_env__get gives the index),
 * .flags (SLIP_ENV_POW2), .def (the default as it would be written; NULL: unset, described by
 * .def_doc), .doc (one line). */
#ifndef SLIP_BASE_ENV_VARS_H
#define SLIP_BASE_ENV_VARS_H

#define SLIP_ENV_VARS(X) \
    X(FRAME_SIZE, INT, STACK, .min = 2048, .max = 4096, .flags = SLIP_ENV_POW2, .def = "4096", \
      .doc = "UMEM frame size") \
    X(RING_SIZE, INT, STACK, .min = 64, .max = 16384, .flags = SLIP_ENV_POW2, .def = "2048", \
      .doc = "size of each AF_XDP ring (RX, TX, fill, completion)") \
    X(BURST, INT, STACK, .min = 1, .max = 256, .def = "64", \
      .doc = "frames taken from a ring per poll") \
    X(BIND, ENUM, STACK, .choices = "auto,copy,zerocopy", .def = "auto", \
      .doc = "AF_XDP bind: auto (zero-copy if the driver allows, else copy), copy, zerocopy (fail if refused)") \
    X(XDP_MODE, ENUM, STACK, .choices = "auto,native,generic", .def = "auto", \
      .doc = "XDP attach: auto (native, else generic with a warning), native (fail without driver support), generic") \
    X(BUSY_POLL, DURATION, STACK, .min = 0, .max = 1000000, .unit = "us", .def = "0", \
      .doc = "busy polling per AF_XDP socket (SO_BUSY_POLL with SO_PREFER_BUSY_POLL); 0: off") \
    X(BUSY_POLL_BUDGET, INT, STACK, .min = 1, .max = 1024, .def = "64", \
      .doc = "SO_BUSY_POLL_BUDGET") \
    X(MAX_CONNS, INT, STACK, .min = 16, .max = 16777216, .def = "131072", \
      .doc = "TCP connections one stack holds at once, listeners and TIME_WAIT included; memory grows with the connections in use (up to 4.9 KiB each in the stack, struct tcp_conn, plus the kernel socket behind each accepted fd), not with this number: it sizes address space only") \
    X(MAX_UDP, INT, STACK, .min = 16, .max = 4194304, .def = "8192", \
      .doc = "UDP sockets one stack holds at once (address space, not memory)") \
    X(TCP_CC, ENUM, STACK, .choices = "kernel,cubic,reno,bbr", .def = "kernel", \
      .doc = "congestion control of the stack's TCP connections unless TCP_CONGESTION picks another: kernel (as net.ipv4.tcp_congestion_control of the program's network namespace, read as the other TCP sysctls are; an algorithm the stack does not have gives cubic), cubic (RFC 9438), reno (RFC 5681), bbr (BBR version 1, paced)") \
    X(LOG, ENUM, STACK, .choices = "error,warn,info,debug", .def = "warn", \
      .doc = "the least severe messages printed") \
    X(IFACES, LIST, POSIX, .min = 1, .max = 4, \
      .def_doc = "the interfaces that are up with an IPv4 address, never lo", \
      .doc = "comma-separated interfaces to accelerate (--iface)") \
    X(STRICT, BOOL, POSIX, .def = "0", \
      .doc = "1: fail instead of falling back to the kernel, also on a bad SLIP_* value (--strict)") \
    X(SPIN_USEC, DURATION, POSIX, .min = 0, .max = 10000000, .unit = "us", .def = "0", \
      .doc = "how long a blocking call, epoll_wait, poll or select spins (polling the stack, the kernel fds every 16th round) before it sleeps; a signal handler that runs meanwhile ends the wait with EINTR (latency profile)") \
    X(SHARE, BOOL, POSIX, .def = "1", \
      .doc = "0: neither open a stack in the group other programs on the same interfaces opened nor serve ours (the interfaces then take one program)") \
    X(STACK_NAME, TEXT, POSIX, .def_doc = "run-PID (slipstream run sets it: a stack per program); unset under a bare LD_PRELOAD: a stack per process", \
      .doc = "processes started with the same name share one stack, as Onload's EF_NAME (slipstream run --name); at most 31 characters of [A-Za-z0-9._-]") \
    X(WORKER_STACKS, BOOL, POSIX, .def = "1", \
      .doc = "a fork child holding nothing of its parent's stack but SO_REUSEPORT listeners moves to a stack of its own before it drops root (set*id) or at its first accept, epoll_ctl or poll/select on one (a stack per worker: nginx reuseport)") \
    X(THREAD_STACKS, BOOL, POSIX, .def = "1", \
      .doc = "a thread that listens on a SO_REUSEPORT address and port another thread of its process (or another process of its stack) already listens on gets a stack of its own: that listener, the connections it accepts and the sockets the thread opens afterwards live there (a stack per thread)") \
    X(EXIT_LINGER_MS, DURATION, POSIX, .min = 0, .max = 600000, .unit = "ms", .def = "2000", \
      .doc = "how long the last process of a stack keeps delivering written data at exit (and the stack's guardian, after every process was killed, what they had closed)") \
    X(IO_URING, BOOL, POSIX, .def = "0", \
      .doc = "1: let the program create io_uring instances; by default io_uring_setup fails with ENOSYS (one warning line): socket work submitted through io_uring would bypass the stack, and libuv and others fall back to epoll") \
    X(GUARD, TEXT, POSIX, .def_doc = "the slipstream binary (slipstream run sets it to itself), else the one next to the library", \
      .doc = "the program started as the stack's guardian (slipstream guard), which resets the connections of a stack whose processes all died; 0: no guardian") \
    X(RAISE_NOFILE, BOOL, POSIX, .def = "1", \
      .doc = "0: slipstream run leaves the soft RLIMIT_NOFILE as it is (1: raised to the hard limit, as servers with many connections need)") \
    X(PRELOAD_LIB, TEXT, POSIX, .def_doc = "libslipstream.so next to the slipstream binary", \
      .doc = "the library slipstream run preloads") \
    X(DUMP_AT_EXIT, BOOL, POSIX, .def = "0", \
      .doc = "1: print the stack's counters and connections to stderr when the program exits (diagnostics)") \
    X(EPOLL_ALL_MS, DURATION, POSIX, .min = 1, .max = 3600000, .unit = "ms", .def = "100", \
      .doc = "how often epoll_wait looks at every member of a set, not only those with an event since it last looked (a safety net; tests set it high so that an event found only by it shows as late)") \
    X(NO_PROGRESS_THREAD, BOOL, POSIX, .def = "0", \
      .doc = "1: no progress thread (tests only: nothing then polls the stack while every thread computes or sleeps elsewhere)") \
    X(BLOCK, BOOL, POSIX, .def = "0", \
      .doc = "1: the block path: reads and writes of files and block devices opened with O_DIRECT (pread/pwrite and their vector forms, read/write at the file offset, libaio) go through io_uring rings of the library instead of a syscall each (--block)") \
    X(BLOCK_SQPOLL, BOOL, POSIX, .def = "0", \
      .doc = "1: the block path's rings share one kernel submission thread per process (SQPOLL), which polls for new requests for SLIP_BLOCK_SQ_IDLE_MS before it sleeps and costs that CPU (a win only with a core to spare: docs/PERFORMANCE.md); 0: one io_uring_enter per request") \
    X(BLOCK_SQ_IDLE_MS, DURATION, POSIX, .min = 1, .max = 10000, .unit = "ms", .def = "2", \
      .doc = "how long the block path's submission thread polls without work before it sleeps") \
    X(BLOCK_SQ_CPU, INT, POSIX, .min = 0, .max = 4096, .def = "4096", \
      .doc = "the CPU the block path's submission thread is pinned to (SLIP_BLOCK_SQPOLL=1); 4096: not pinned") \
    X(BLOCK_SPIN_USEC, DURATION, POSIX, .min = 0, .max = 1000000, .unit = "us", .def = "0", \
      .doc = "how long a block-path call spins on its completion queue in user space before it sleeps in io_uring_enter (0 without SQPOLL: submit and wait in one io_uring_enter)") \
    X(BLOCK_PROBE, BOOL, POSIX, .def = "1", \
      .doc = "1: a bio-based device (zram, no blk-mq queue in sysfs: it completes in the submitting thread) stays with the kernel from the first call; on any other device the first 128 block-path calls alternate between the kernel's own call and the engine, timed, and the device stays with the kernel when the engine is not 5 % faster") \
    X(BLOCK_FIXED_FILES, BOOL, POSIX, .def = "1", \
      .doc = "1: each thread's block-path ring registers the files it serves (io_uring fixed files: no file lookup per request; a close unregisters them first)") \
    X(BLOCK_BOUNCE, BOOL, POSIX, .def = "0", \
      .doc = "1: a block-path read or write of up to 128 KiB whose buffer the kernel would take as it is goes through a registered buffer of the thread's ring (one copy instead of pinning the caller's pages; a bad buffer pointer then faults in the program instead of giving EFAULT)") \
    X(BLOCK_IOPOLL, INT, POSIX, .min = 0, .max = 2, .def = "1", \
      .doc = "1: block-path requests on a device whose queue polls for completions (sysfs queue/io_poll = 1: NVMe or virtio-blk with poll queues) go to a polled ring of the thread (IORING_SETUP_IOPOLL: the waiting thread polls the device instead of sleeping until an interrupt); 0: never; 2: on every device (tests: a device without poll queues then completes by interrupt while the caller polls, a file system without polling answers EOPNOTSUPP and the device goes back to interrupts)") \
    X(BLOCK_SENDFILE, BOOL, POSIX, .def = "1", \
      .doc = "1 (with SLIP_BLOCK=1): sendfile from a file that can do O_DIRECT to an accelerated TCP socket reads the file straight into the stack's packet frames, what the page cache holds from there (one copy) and the rest with O_DIRECT through the block engine (none), instead of through a buffer (two copies); 0: through a buffer, as without the block path") \
    X(ATTACH, TEXT, INTERNAL, .doc = "the stack a process inherits across exec and posix_spawn") \
    X(FDS, TEXT, INTERNAL, .doc = "the accelerated fds a process inherits with SLIP_ATTACH") \
    X(KFDS, TEXT, INTERNAL, .doc = "the port-reservation sockets a process inherits with SLIP_ATTACH (the only fd numbers from shared memory it will close)") \
    X(FAULT_DROP, INT, FAULT, .min = 0, .max = 1000000, .def = "0", \
      .doc = "drop received frames, parts per million") \
    X(FAULT_DUP, INT, FAULT, .min = 0, .max = 1000000, .def = "0", \
      .doc = "deliver received frames twice, ppm") \
    X(FAULT_REORDER, INT, FAULT, .min = 0, .max = 1000000, .def = "0", \
      .doc = "hold a frame back until 3 later frames passed it (or 2 ms), ppm") \
    X(FAULT_SEED, INT, FAULT, .min = 0, .max = UINT64_MAX, .def = "1", \
      .doc = "PRNG seed (0 is taken as 1)")

#endif
