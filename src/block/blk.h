/* The block engine: file and block-device I/O done through io_uring rings this library owns
 * (raw syscalls, no liburing), so an unmodified program's O_DIRECT pread/pwrite and libaio calls
 * need no syscall of their own when the submission-queue thread (SQPOLL) is awake. Synchronous
 * calls use one ring per thread (no lock); a libaio context gets a ring of its own. Internally
 * every function returns a negative errno; the POSIX layer (src/preload/file.c, aio.c) sets errno. */
#ifndef SLIP_BLOCK_BLK_H
#define SLIP_BLOCK_BLK_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>
#include <sys/uio.h>

/* Why an operation went to the kernel instead of the engine: counted per reason. */
enum blk_pass {
    BLK_PASS_NOT_DIRECT,    /* opened without O_DIRECT (buffered I/O is not served) */
    BLK_PASS_NOT_FILE,      /* not a regular file or block device (pipe, socket, tty...) */
    BLK_PASS_INLINE,        /* the probe found the kernel's own call as fast on this device (zram and
                             * others that complete inline; any device where the engine does not win) */
    BLK_PASS_NO_RING,       /* io_uring unavailable or the ring could not be made */
    BLK_PASS_UNSUPPORTED,   /* an argument the engine does not map (flags, sizes, iovec count) */
    BLK_PASS_FILE_OFFSET,   /* read/write at the file offset: io_uring does not keep f_pos as the kernel's
                             * read(2) does for O_DIRECT (an async write leaves it behind) */
    BLK_PASS_COUNT
};

/* Counters of one process, in a small shared file (/dev/shm/slipstream-blk.<pid>) that
 * `slipstream stat` reads while the process runs. Written only by that process. */
#define BLK_STATS_MAGIC 0x736c626bu     /* "slbk" */
struct blk_stats {
    uint32_t magic, version;
    int32_t pid, sqpoll;                /* sqpoll: 1 when the rings use a SQPOLL thread */
    uint64_t submitted;                 /* operations given to the engine */
    uint64_t completed;                 /* completions reaped */
    uint64_t polled;                    /* waits that ended while spinning in user space */
    uint64_t slept;                     /* waits that slept in io_uring_enter */
    uint64_t sq_wakeups;                /* SQPOLL thread woken with a syscall */
    uint64_t rings;                     /* rings created */
    uint64_t aio_submitted, aio_completed;      /* of which through libaio contexts */
    uint64_t probes_kernel_ns, probes_engine_ns; /* step-aside probe totals */
    uint64_t passed[BLK_PASS_COUNT];
    uint64_t fixed_file_ops;            /* operations on a registered file */
    uint64_t bounced_ops;               /* operations through a ring's registered bounce buffer */
    uint64_t iopoll_ops;                /* operations on a polled ring (IOPOLL) */
    uint64_t iopoll_refused;            /* devices whose files refused polling (EOPNOTSUPP): back to interrupts */
    /* sendfile to an accelerated TCP socket (src/preload/fsend.c): calls taken, O_DIRECT reads
     * straight into the stack's frames, page-cache reads into them, bytes queued from frames
     * (of which from the page cache), calls left to the copying path. */
    uint64_t sendfile_calls, sendfile_reads, sendfile_cached_reads, sendfile_bytes, sendfile_cached_bytes;
    uint64_t sendfile_declined;
    uint64_t sendfile_twins;            /* O_DIRECT descriptors opened for it (files not in the cache) */
    uint64_t splice_bytes;              /* splice pipe -> accelerated TCP socket, read into frames */
    uint64_t sendfile_copied_bytes;     /* sendfile bytes the copying path sent (a call under the
                                         * frames' threshold, a declined file, the path off) */
};

struct blk_config {
    bool sendfile;          /* sendfile to an accelerated TCP socket reads into the stack's frames */
    bool sqpoll;
    int sq_idle_ms;
    int sq_cpu;             /* -1: not pinned */
    int spin_usec;
    bool probe;             /* measure per device and step aside where the kernel is faster */
    bool fixed_files;       /* register the files a thread's ring serves (no fget/fput per request) */
    bool bounce;            /* copy through a registered buffer of the ring (no page pinning per request) */
    int iopoll;             /* 0: never; 1: devices whose queue polls (sysfs io_poll); 2: every device */
};

/* Once per process, before any other call. */
void blk__configure(const struct blk_config *cfg);
const struct blk_config *blk__config(void);
/* This process's counters (mapped on first use; a static fallback if the file cannot be made). */
struct blk_stats *blk__stats(void);
void blk__count_pass(enum blk_pass why);
/* One process's counters as two lines of text (slipstream stat --block, SLIP_DUMP_AT_EXIT). */
void blk__stats_print(const struct blk_stats *s, FILE *f);
/* Whether this process made counters of its own (not a fork or vfork child that did no I/O:
 * a vfork child shares its parent's memory and must change nothing in it). */
bool blk__stats_mine(void);
/* exit: remove this process's counters file. */
void blk__stats_unlink(void);

enum blk_op { BLK_OP_READ, BLK_OP_WRITE };

/* This process's pid, kept without a syscall per call (a fork child asks again: MADV_WIPEONFORK). */
pid_t blk__pid(void);

/* What the POSIX layer knows of an fd it gives the engine: gen changes whenever the fd number is
 * opened anew (a ring's registered-file slot is reused only for the same gen); mem_align is the
 * O_DIRECT buffer alignment the kernel demands for it (statx's dio_mem_align; 0: unknown, then
 * no bounce buffer, since a bounce would hide the kernel's EINVAL for a misaligned buffer). */
struct blk_file {
    int fd;
    uint32_t gen;
    uint32_t mem_align;
    bool iopoll;            /* on this thread's polled ring (IORING_SETUP_IOPOLL); -EOPNOTSUPP back
                             * when the file cannot be polled (nothing was done: retry without) */
};

/* Synchronous read/write on this thread's ring at offset off (>= 0: io_uring's -1 does not keep
 * the file offset as read(2) does, see src/preload/file.c). rw_flags are
 * preadv2's RWF_*. The result as the kernel's call would give it: bytes, or -errno. */
ssize_t blk__rw(int fd, enum blk_op op, const struct iovec *iov, int n, int64_t off, int rw_flags);
/* The same for an fd the POSIX layer described: a registered file (when gen != 0 and the fd
 * number fits the ring's table) and the ring's registered bounce buffer where allowed. */
ssize_t blk__rw_file(const struct blk_file *f, enum blk_op op, const struct iovec *iov, int n, int64_t off,
                     int rw_flags);
/* fd is being closed (or stops being the engine's): every ring of this process drops its
 * registered file, so the kernel's close really lets the file go. */
void blk__file_forget(int fd);

/* Step-aside decision for the device behind fd (st_dev of a file, st_rdev of a block device):
 * BLK_ROUTE_KERNEL when probing showed the kernel's own call to be as fast (inline devices). */
enum blk_route { BLK_ROUTE_PROBE_KERNEL, BLK_ROUTE_PROBE_ENGINE, BLK_ROUTE_ENGINE, BLK_ROUTE_KERNEL };
enum blk_route blk__route(uint64_t dev);
/* Whether requests on dev go to a polled ring (SLIP_BLOCK_IOPOLL; the device's queue/io_poll in
 * sysfs), and marking a device whose files refused polling. */
bool blk__dev_iopoll(uint64_t dev);
void blk__dev_iopoll_off(uint64_t dev);
/* One probe sample of ns nanoseconds taken by the given route. */
void blk__probe_note(uint64_t dev, enum blk_route how, uint64_t ns);

/* An asynchronous ring (one per libaio context): entries sized at least n. */
struct blk_ring;
int blk_ring__new(struct blk_ring **out, unsigned n);
void blk_ring__free(struct blk_ring *r);
/* Queues one operation (not yet submitted); -EAGAIN when the ring is full. opcode is an
 * IORING_OP_*; addr/len as io_uring takes them. */
int blk_ring__queue(struct blk_ring *r, uint8_t opcode, int fd, uint64_t addr, uint32_t len,
                    int64_t off, int rw_flags, uint64_t user_data);
/* Submits what was queued (a syscall only without SQPOLL or with its thread asleep). */
int blk_ring__submit(struct blk_ring *r);
/* Takes up to max completions; waits (spin, then sleep) until at least min arrived or timeout_ns
 * passed (< 0: no limit). Returns how many, or -errno (-EINTR when a signal ended the sleep). */
struct blk_cqe { uint64_t user_data; int32_t res; };
int blk_ring__reap(struct blk_ring *r, struct blk_cqe *out, int min, int max, int64_t timeout_ns);
/* Operations submitted and not yet reaped. */
unsigned blk_ring__inflight(const struct blk_ring *r);

/* The program is closing fd (close, close_range, dup2/dup3 over it): if it is one of this
 * process's rings, the ring moves to another fd number first, so the program's close does what
 * it asked and the ring goes on. Cheap when fd is not one (a mask of ring fd numbers). */
void blk__fd_closing(int fd);

/* fork child: forget the parent's rings (never touch them) and counters. */
void blk__atfork_child(void);
/* exit: wait for every operation in flight on this process's rings; unmap the counters file. */
void blk__at_exit(void);

#endif
