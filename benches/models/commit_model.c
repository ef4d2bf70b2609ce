/*
 * A model of the journal's durable commit on the disk at hand, without the journal: a batch of
 * BATCH bytes written with `pwrite` and made durable, N times, with or without a thread that
 * writes and syncs zeros ahead of the writes (the engine's filler, `engine/src/write/filler.rs`:
 * 1 MiB at a time, 2 MiB ahead). It answers "would this way of syncing pay?" before the engine
 * is changed (docs/PERFORMANCE.md, "Where the time goes").
 *
 * Not part of the build or of CI. Needs liburing (Debian: liburing-dev):
 *
 *   gcc -O2 -o /tmp/commit_model benches/models/commit_model.c -luring -lpthread
 *   /tmp/commit_model MODE BATCH N FILE [CPU_US [PARTS]]
 *
 * CPU_US (default 0): microseconds of CPU work spun before each batch's write, as the engine's
 * preparing and staging; PARTS (mode 6, default 1). MODE:
 *   0  into a file zero-filled and synced before the clock (the comparison's bound)
 *   1  the filler ahead; `fdatasync` per batch (the engine today)
 *   2  the filler ahead; io_uring's IORING_OP_FSYNC (DATASYNC) limited to the batch's bytes
 *   3  no filler, the file extended by each write; `fdatasync`
 *   4  no filler; the range-limited io_uring sync
 *   5  as 1 (the name docs/PERFORMANCE.md quotes it by with CPU_US)
 *   6  as 5, the batch in PARTS parts: each part's work, its write, and its sync started
 *      through io_uring while the next part's work is done (the sync before waited for first)
 *   7  as 5, the filler writing its zeros without syncing them: a chunk is ready for frames
 *      once a commit's `fdatasync` that began after the chunk's write has ended
 *   8  as 5, the filler writing and syncing a batch's length of zeros (not 1 MiB) each time
 *      a commit's sync ends, while the next batch's CPU work runs
 *   9  as 5, the filler writing its zeros with O_DIRECT (no copy into the page cache) into a
 *      file sized up front (`ftruncate`), then asking for the chunk to be read into the page
 *      cache (`posix_fadvise` WILLNEED), so that the frames' writes find their pages there
 *  10  as 0 (zero-filled before the clock), the frames written with O_DIRECT | O_DSYNC from
 *      whole pages (the last, partial page written again by the next batch), no `fdatasync`
 *  11  as 10, with the filler ahead writing its zeros with O_DIRECT (no page cache at all)
 *
 * Prints the mean time per batch, its p50, p99 and max, the mean wait for the filler, and the
 * filler thread's CPU time per batch.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <liburing.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define CHUNK (1L << 20)
#define AHEAD (2L << 20)

static int fd;
static _Atomic long written_end = 0; /* the writes' end */
static _Atomic long zero_end = 0;    /* the end of the zeros written and synced */
static _Atomic long zero_written = 0; /* the end of the zeros written (mode 7) */
static int piggyback = 0;             /* mode 7: the commits' syncs make the zeros durable */
static long paced = 0;                /* mode 8: the zeros' piece, written after each commit */
static _Atomic long commits = 0;      /* mode 8: commits ended */
static int direct_fd = -1;            /* modes 9, 11: the file opened with O_DIRECT */
static int read_back = 0;             /* mode 9: the zeros are read into the page cache */
static _Atomic double filler_cpu_us = 0; /* the filler thread's CPU time */
static _Atomic int stop = 0;

static double now_us(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

static void die(const char *what) {
  perror(what);
  exit(1);
}

static double thread_cpu_us(void) {
  struct timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

static void *filler(void *arg) {
  (void)arg;
  char *zeros;
  if (posix_memalign((void **)&zeros, 4096, CHUNK) != 0) die("posix_memalign");
  memset(zeros, 0, CHUNK);
  int out = direct_fd >= 0 ? direct_fd : fd; /* modes 9, 11: the zeros with O_DIRECT */
  long piece = paced ? paced : CHUNK;
  long seen = 0; /* mode 8: the commits the filler has followed */
  while (!stop) {
    long end = piggyback ? zero_written : zero_end;
    if (end >= written_end + AHEAD && !(paced && commits != seen)) {
      usleep(paced ? 20 : 50);
      continue;
    }
    seen = commits;
    if (pwrite(out, zeros, piece, end) != piece) die("the filler's pwrite");
    if (piggyback) {
      zero_written = end + piece;
      continue;
    }
    if (fdatasync(out) != 0) die("the filler's fdatasync");
    if (read_back && posix_fadvise(fd, end, piece, POSIX_FADV_WILLNEED) != 0)
      die("posix_fadvise");
    zero_end = end + piece;
  }
  free(zeros);
  filler_cpu_us = thread_cpu_us();
  return NULL;
}

static void spin(double us) {
  double end = now_us() + us;
  while (now_us() < end) {
  }
}

/* Starts a sync of [at, at + len) through the ring (len 0: the whole file). */
static void start_sync(struct io_uring *ring, long at, long len) {
  struct io_uring_sqe *sqe = io_uring_get_sqe(ring);
  io_uring_prep_fsync(sqe, fd, IORING_FSYNC_DATASYNC);
  sqe->off = at;
  sqe->len = len;
  if (io_uring_submit(ring) != 1) die("io_uring_submit");
}

static void wait_sync(struct io_uring *ring) {
  struct io_uring_cqe *cqe;
  if (io_uring_wait_cqe(ring, &cqe) != 0) die("io_uring_wait_cqe");
  if (cqe->res < 0) {
    fprintf(stderr, "the ring's sync failed: %s\n", strerror(-cqe->res));
    exit(1);
  }
  io_uring_cqe_seen(ring, cqe);
}

static int by_value(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
  if (argc < 5) {
    fprintf(stderr, "usage: %s MODE BATCH N FILE [CPU_US [PARTS]]\n", argv[0]);
    return 2;
  }
  int mode = atoi(argv[1]);
  long batch = atol(argv[2]);
  int n = atoi(argv[3]);
  double cpu = argc > 5 ? atof(argv[5]) : 0;
  int parts = argc > 6 ? atoi(argv[6]) : 1;
  if (mode < 0 || mode > 11 || batch <= 0 || n <= 0 || parts <= 0) {
    fprintf(stderr, "bad arguments\n");
    return 2;
  }
  fd = open(argv[4], O_CREAT | O_TRUNC | O_RDWR, 0644);
  if (fd < 0) die("open");
  /* The frames: page-aligned and a page longer on each side, for the O_DIRECT writes. */
  char *frames;
  if (posix_memalign((void **)&frames, 4096, batch + 8192) != 0) die("posix_memalign");
  memset(frames, 0xA5, batch + 8192);
  struct io_uring ring;
  if (io_uring_queue_init(8, &ring, 0) != 0) die("io_uring_queue_init");
  int dsync_fd = -1;
  if (mode == 0 || mode == 10) {
    char *zeros = calloc(1, CHUNK);
    for (long at = 0; at < batch * (long)n + CHUNK; at += CHUNK)
      if (pwrite(fd, zeros, CHUNK, at) != CHUNK) die("pwrite of the zeros");
    if (fsync(fd) != 0) die("fsync");
    free(zeros);
  }
  if (mode == 9 && ftruncate(fd, batch * (long)n + AHEAD + CHUNK) != 0) die("ftruncate");
  if (mode == 9 || mode == 11) {
    direct_fd = open(argv[4], O_RDWR | O_DIRECT);
    if (direct_fd < 0) die("open with O_DIRECT");
  }
  read_back = mode == 9;
  if (mode == 10 || mode == 11) {
    dsync_fd = open(argv[4], O_RDWR | O_DIRECT | O_DSYNC);
    if (dsync_fd < 0) die("open with O_DIRECT | O_DSYNC");
  }
  int filling = mode == 1 || mode == 2 || (mode >= 5 && mode <= 9) || mode == 11;
  piggyback = mode == 7;
  paced = mode == 8 ? batch : 0;
  pthread_t thread;
  if (filling) {
    pthread_create(&thread, NULL, filler, NULL);
    if (piggyback) {
      while (zero_written < AHEAD) usleep(100);
      if (fdatasync(fd) != 0) die("fdatasync");
      zero_end = zero_written;
    }
    while (zero_end < AHEAD) usleep(100);
  }
  double *latencies = malloc(sizeof(double) * n);
  double waits = 0;
  double start = now_us();
  long at = 0;
  for (int i = 0; i < n; i++) {
    double t = now_us();
    if (mode == 6) {
      long piece = batch / parts, off = at;
      int pending = 0;
      for (int p = 0; p < parts; p++) {
        long len = p == parts - 1 ? batch - piece * (parts - 1) : piece;
        spin(cpu / parts);
        double w = now_us();
        while (filling && zero_end < off + len) {
        }
        waits += now_us() - w;
        if (pending) wait_sync(&ring);
        if (pwrite(fd, frames, len, off) != len) die("pwrite");
        start_sync(&ring, 0, 0);
        pending = 1;
        off += len;
      }
      wait_sync(&ring);
    } else {
      spin(cpu);
      /* The pages written with O_DIRECT (10, 11): the batch's, rounded out to whole pages. */
      long from = at & ~4095L, to = (at + batch + 4095) & ~4095L;
      int direct = mode == 10 || mode == 11;
      double w = now_us();
      while (filling && zero_end < (direct ? to : at + batch)) {
      }
      waits += now_us() - w;
      if (direct) {
        if (pwrite(dsync_fd, frames, to - from, from) != to - from) die("O_DIRECT pwrite");
      } else if (pwrite(fd, frames, batch, at) != batch) {
        die("pwrite");
      }
      if (direct) {
        /* O_DSYNC: durable when the write returns. */
      } else if (mode == 2 || mode == 4) {
        start_sync(&ring, at, batch);
        wait_sync(&ring);
      } else {
        long zeros = zero_written; /* written before the sync begins: durable after it */
        if (fdatasync(fd) != 0) die("fdatasync");
        if (piggyback && zeros > zero_end) zero_end = zeros;
      }
    }
    at += batch;
    written_end = at;
    commits++;
    latencies[i] = now_us() - t;
  }
  double elapsed = now_us() - start;
  stop = 1;
  if (filling) pthread_join(thread, NULL);
  qsort(latencies, n, sizeof(double), by_value);
  printf("mode %d batch %ld cpu %.0f parts %d: mean %.1f us p50 %.1f p99 %.1f max %.1f, "
         "waits for zeros %.1f us a batch, filler CPU %.1f us a batch\n",
         mode, batch, cpu, parts, elapsed / n, latencies[n / 2], latencies[n * 99 / 100],
         latencies[n - 1], waits / n, filler_cpu_us / n);
  return 0;
}
