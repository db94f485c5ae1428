/*
 * The persistent worker team and CPU feature detection.
 *
 * The caller of a job is worker 0; n-1 threads wait between jobs, spinning for a settable time
 * and then sleeping on a condition variable, so a decode call costs no thread start. Jobs are
 * serialized by the API lock in neural_experts.c. Workers adopt the caller's MXCSR (rounding,
 * FTZ/DAZ) at every job so that thread placement cannot change the arithmetic.
 */
#include "neural_team.h"

#include "neural_experts.h"
#include "neural_platform.h"

static struct {
    int n;          /* threads including the caller */
    int workers;    /* started worker threads (n - 1 once running) */
    long start_gen; /* generation the workers start from */
    volatile long gen, done, stop;
    neural_job_fn fn;
    void *ctx;
    unsigned csr;
    volatile long spin_us;
    nthread th[NEURAL_MAX_THREADS];
} team = {1, 0, 0, 0, 0, 0, 0, 0, 0, 200, {0}};

static nmutex team_m = NMUTEX_INIT;
static ncond team_cv = NCOND_INIT;

static void apply_csr(void) {
#if NEURAL_X86
    unsigned want = team.csr & ~0x3Fu; /* ignore the sticky exception flags */
    if ((_mm_getcsr() & ~0x3Fu) != want) _mm_setcsr(want);
#endif
}

static void worker_main(int tid) {
    long seen = team.start_gen;
    for (;;) {
        long g;
        unsigned spins = 0;
        double t0 = -1.0;
        while ((g = a_load(&team.gen)) == seen) {
            if (a_load(&team.stop)) return;
            cpu_relax();
            if ((++spins & 63) == 0) {
                double t = now_us();
                if (t0 < 0) {
                    t0 = t;
                } else if (t - t0 > (double)a_load(&team.spin_us)) {
                    nm_lock(&team_m);
                    while (a_load(&team.gen) == seen && !a_load(&team.stop)) nc_wait(&team_cv, &team_m);
                    nm_unlock(&team_m);
                    t0 = -1.0;
                }
                if ((spins & 1023) == 0) thread_yield(); /* polite when threads outnumber cores */
            }
        }
        seen = g;
        if (a_load(&team.stop)) return;
        apply_csr();
        team.fn(team.ctx, tid);
        a_add(&team.done, 1);
    }
}

static void team_stop(void) {
    if (team.workers == 0) return;
    nm_lock(&team_m);
    a_store(&team.stop, 1);
    nc_broadcast(&team_cv);
    nm_unlock(&team_m);
    for (int i = 0; i < team.workers; i++) thread_join(team.th[i]);
    team.workers = 0;
    a_store(&team.stop, 0);
}

int neural_team_resize(int n) {
    if (n <= 0) n = online_cpus();
    if (n > NEURAL_MAX_THREADS) n = NEURAL_MAX_THREADS;
    if (n == team.n && team.workers == n - 1) return n;
    team_stop();
    team.start_gen = a_load(&team.gen);
    team.n = 1;
    for (int i = 1; i < n; i++) {
        if (thread_start(&team.th[i - 1], worker_main, i) != 0) break;
        team.workers = i;
        team.n = i + 1;
    }
    return team.n;
}

int neural_team_size(void) { return team.n; }

void neural_team_set_spin(int us) { a_store(&team.spin_us, us < 0 ? 0 : us); }

void neural_team_start(neural_job_fn fn, void *ctx) {
    team.fn = fn;
    team.ctx = ctx;
    if (team.n <= 1) return;
#if NEURAL_X86
    team.csr = _mm_getcsr();
#endif
    a_store(&team.done, 0);
    nm_lock(&team_m);
    a_add(&team.gen, 1);
    nc_broadcast(&team_cv);
    nm_unlock(&team_m);
}

void neural_team_join(void) {
    team.fn(team.ctx, 0);
    if (team.n <= 1) return;
    unsigned spins = 0;
    while (a_load(&team.done) < team.n - 1) {
        cpu_relax();
        if ((++spins & 255) == 0) thread_yield();
    }
}

void neural_team_run(neural_job_fn fn, void *ctx) {
    neural_team_start(fn, ctx);
    neural_team_join();
}

long neural_next_chunk(volatile long *counter) { return a_add(counter, 1); }

/* ---- CPU features ---- */
static int features = -1;

int neural_cpu_features(void) {
    if (features >= 0) return features;
    int f = 0;
#if NEURAL_X86
    unsigned r[4];
    cpuid_ex(0, 0, r);
    unsigned maxleaf = r[0];
    if (r[1] == 0x68747541u && r[3] == 0x69746E65u && r[2] == 0x444D4163u) f |= NEURAL_CPU_AMD; /* AuthenticAMD */
    cpuid_ex(1, 0, r);
    int osxsave = (r[2] >> 27) & 1, avx = (r[2] >> 28) & 1, fma = (r[2] >> 12) & 1;
    if (osxsave && avx && maxleaf >= 7) {
        uint64_t xcr0 = xgetbv0();
        int os_avx = (xcr0 & 0x6) == 0x6, os_avx512 = (xcr0 & 0xE6) == 0xE6;
        cpuid_ex(7, 0, r);
        unsigned b = r[1], c = r[2];
        int avx2 = (b >> 5) & 1;
        int f512 = (b >> 16) & 1, dq = (b >> 17) & 1, bw = (b >> 30) & 1, vl = (b >> 31) & 1;
        if (os_avx && avx2 && fma) f |= NEURAL_CPU_AVX2;
        if (os_avx512 && (f & NEURAL_CPU_AVX2) && f512 && dq && bw && vl) {
            f |= NEURAL_CPU_AVX512;
            if ((c >> 1) & 1) f |= NEURAL_CPU_VBMI;
            unsigned r1[4];
            cpuid_ex(7, 1, r1);
            if ((r1[0] >> 5) & 1) f |= NEURAL_CPU_BF16;
        }
    }
#endif
    features = f;
    return f;
}
