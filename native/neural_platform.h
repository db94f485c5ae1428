/* Threads, locks, atomics, clocks and CPUID for POSIX and Windows (MSVC or MinGW). */
#ifndef NEURAL_PLATFORM_H
#define NEURAL_PLATFORM_H

#include <stdint.h>
#include <stdlib.h>

#include "neural_internal.h"

#ifdef _WIN32
#ifndef WIN32_LEAN_AND_MEAN
#define WIN32_LEAN_AND_MEAN
#endif
#include <malloc.h>
#include <windows.h>
#else
#include <pthread.h>
#include <sched.h>
#include <time.h>
#include <unistd.h>
#endif

#if NEURAL_X86
#include <immintrin.h>
#if defined(_MSC_VER)
#include <intrin.h>
#else
#include <cpuid.h>
#endif
#endif

/* ---- atomics on `volatile long` (acquire loads, release stores, full-barrier adds) ---- */
#if defined(_MSC_VER) && !defined(__clang__)
static inline long a_load(volatile long *p) { return _InterlockedOr(p, 0); }
static inline void a_store(volatile long *p, long v) { _InterlockedExchange(p, v); }
static inline long a_add(volatile long *p, long v) { return _InterlockedExchangeAdd(p, v); }
#else
static inline long a_load(volatile long *p) { return __atomic_load_n(p, __ATOMIC_ACQUIRE); }
static inline void a_store(volatile long *p, long v) { __atomic_store_n(p, v, __ATOMIC_RELEASE); }
static inline long a_add(volatile long *p, long v) { return __atomic_fetch_add(p, v, __ATOMIC_ACQ_REL); }
#endif

static inline void cpu_relax(void) {
#if NEURAL_X86
    _mm_pause();
#endif
}

/* ---- locks, condition variables, threads, clock ---- */
#ifdef _WIN32
typedef SRWLOCK nmutex;
typedef CONDITION_VARIABLE ncond;
typedef HANDLE nthread;
#define NMUTEX_INIT SRWLOCK_INIT
#define NCOND_INIT CONDITION_VARIABLE_INIT
static inline void nm_lock(nmutex *m) { AcquireSRWLockExclusive(m); }
static inline void nm_unlock(nmutex *m) { ReleaseSRWLockExclusive(m); }
static inline void nc_wait(ncond *c, nmutex *m) { SleepConditionVariableSRW(c, m, INFINITE, 0); }
static inline void nc_broadcast(ncond *c) { WakeAllConditionVariable(c); }
static inline void thread_yield(void) { SwitchToThread(); }
static inline double now_us(void) {
    LARGE_INTEGER f, c;
    QueryPerformanceFrequency(&f);
    QueryPerformanceCounter(&c);
    return (double)c.QuadPart * 1e6 / (double)f.QuadPart;
}
static inline int online_cpus(void) {
    SYSTEM_INFO si;
    GetSystemInfo(&si);
    return (int)si.dwNumberOfProcessors;
}
static inline void *aligned_alloc64(size_t n) { return _aligned_malloc(n, 64); }
static inline void aligned_free64(void *p) { _aligned_free(p); }
typedef void (*nthread_fn)(int);
struct nthread_arg { nthread_fn fn; int arg; };
static DWORD WINAPI nthread_entry(LPVOID p) {
    struct nthread_arg a = *(struct nthread_arg *)p;
    free(p);
    a.fn(a.arg);
    return 0;
}
static inline int thread_start(nthread *t, nthread_fn fn, int arg) {
    struct nthread_arg *a = (struct nthread_arg *)malloc(sizeof *a);
    if (!a) return -1;
    a->fn = fn;
    a->arg = arg;
    *t = CreateThread(NULL, 0, nthread_entry, a, 0, NULL);
    if (!*t) { free(a); return -1; }
    return 0;
}
static inline void thread_join(nthread t) {
    WaitForSingleObject(t, INFINITE);
    CloseHandle(t);
}
#else
typedef pthread_mutex_t nmutex;
typedef pthread_cond_t ncond;
typedef pthread_t nthread;
#define NMUTEX_INIT PTHREAD_MUTEX_INITIALIZER
#define NCOND_INIT PTHREAD_COND_INITIALIZER
static inline void nm_lock(nmutex *m) { pthread_mutex_lock(m); }
static inline void nm_unlock(nmutex *m) { pthread_mutex_unlock(m); }
static inline void nc_wait(ncond *c, nmutex *m) { pthread_cond_wait(c, m); }
static inline void nc_broadcast(ncond *c) { pthread_cond_broadcast(c); }
static inline void thread_yield(void) { sched_yield(); }
static inline double now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec * 1e-3;
}
static inline int online_cpus(void) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}
static inline void *aligned_alloc64(size_t n) {
    void *p = NULL;
    return posix_memalign(&p, 64, n ? n : 64) == 0 ? p : NULL;
}
static inline void aligned_free64(void *p) { free(p); }
typedef void (*nthread_fn)(int);
struct nthread_arg { nthread_fn fn; int arg; };
static void *nthread_entry(void *p) {
    struct nthread_arg a = *(struct nthread_arg *)p;
    free(p);
    a.fn(a.arg);
    return NULL;
}
static inline int thread_start(nthread *t, nthread_fn fn, int arg) {
    struct nthread_arg *a = (struct nthread_arg *)malloc(sizeof *a);
    if (!a) return -1;
    a->fn = fn;
    a->arg = arg;
    if (pthread_create(t, NULL, nthread_entry, a) != 0) { free(a); return -1; }
    return 0;
}
static inline void thread_join(nthread t) { pthread_join(t, NULL); }
#endif

/* ---- CPUID ---- */
#if NEURAL_X86
static inline void cpuid_ex(unsigned leaf, unsigned sub, unsigned r[4]) {
#if defined(_MSC_VER)
    int v[4];
    __cpuidex(v, (int)leaf, (int)sub);
    for (int i = 0; i < 4; i++) r[i] = (unsigned)v[i];
#else
    __cpuid_count(leaf, sub, r[0], r[1], r[2], r[3]);
#endif
}
static inline uint64_t xgetbv0(void) {
#if defined(_MSC_VER)
    return _xgetbv(0);
#else
    unsigned a, d;
    __asm__ volatile("xgetbv" : "=a"(a), "=d"(d) : "c"(0));
    return ((uint64_t)d << 32) | a;
#endif
}
#endif

#endif
