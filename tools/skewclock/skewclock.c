/*
 * skewclock: a preload library that puts a process's wall clock TESTBED_CLOCK_SKEW_S
 * seconds off (positive: fast), for the fault matrix's node with a wrong clock
 * (node-image/node_agent/skew.py).
 *
 * Why not libfaketime: Debian bookworm's 0.9.10 breaks Python 3.11, whose time.sleep
 * is clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME): with the monotonic clock left
 * alone it passes the kernel a negative time (EINVAL; libfaketime issue #426), and
 * with it faked, threading's sem_clockwait never returns (#390). A wrong wall clock
 * changes only the wall clock, so this shifts CLOCK_REALTIME (and its coarse variant)
 * as clock_gettime, gettimeofday, time and timespec_get return it, and nothing else:
 * the monotonic clock, sleeps and timeouts are the kernel's.
 *
 * Only calls made through the C library's exported functions are shifted (Python,
 * iperf3, Rust's std, D-ITG all use them); the kernel's own timestamps (packet
 * capture, file times) are not. The real time is read with the raw system call, so
 * the library needs nothing newer from the C library than syscall() and getenv().
 *
 *   cc -O2 -shared -fPIC -o libskewclock.so skewclock.c
 *   TESTBED_CLOCK_SKEW_S=300 LD_PRELOAD=./libskewclock.so date
 */
#define _GNU_SOURCE
#include <stdlib.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static long long skew_ns;

__attribute__((constructor)) static void skewclock_init(void) {
    const char *text = getenv("TESTBED_CLOCK_SKEW_S");
    if (text != NULL) {
        double s = strtod(text, NULL);
        if (s > -86400.0 * 3650 && s < 86400.0 * 3650) {
            skew_ns = (long long)(s * 1e9);
        }
    }
}

static void shift(struct timespec *ts) {
    long long ns = (long long)ts->tv_nsec + skew_ns % 1000000000LL;
    ts->tv_sec += (time_t)(skew_ns / 1000000000LL);
    if (ns < 0) {
        ns += 1000000000LL;
        ts->tv_sec -= 1;
    } else if (ns >= 1000000000LL) {
        ns -= 1000000000LL;
        ts->tv_sec += 1;
    }
    ts->tv_nsec = (long)ns;
}

int clock_gettime(clockid_t clock, struct timespec *ts) {
    long r = syscall(SYS_clock_gettime, clock, ts);
    if (r == 0 && (clock == CLOCK_REALTIME || clock == CLOCK_REALTIME_COARSE)) {
        shift(ts);
    }
    return (int)r;
}

int gettimeofday(struct timeval *restrict tv, void *restrict tz) {
    (void)tz;
    struct timespec ts;
    int r = clock_gettime(CLOCK_REALTIME, &ts);
    if (r == 0) {
        tv->tv_sec = ts.tv_sec;
        tv->tv_usec = ts.tv_nsec / 1000;
    }
    return r;
}

time_t time(time_t *out) {
    struct timespec ts;
    if (clock_gettime(CLOCK_REALTIME, &ts) != 0) {
        return (time_t)-1;
    }
    if (out != NULL) {
        *out = ts.tv_sec;
    }
    return ts.tv_sec;
}

int timespec_get(struct timespec *ts, int base) {
    if (base != TIME_UTC || clock_gettime(CLOCK_REALTIME, ts) != 0) {
        return 0;
    }
    return base;
}
