/*
 * The staging copy (neural_copy_stream: non-temporal stores) against memcpy, from a memory-mapped
 * file as the prompt path packs experts, for source/destination offsets that hit the two slow
 * cases it avoids: a destination not on a 64-byte line (partial write-combining lines) and a
 * destination just above the source modulo 4 KiB (4K aliasing). One thread, GB/s per CPU-second,
 * best of 3. Linux/POSIX only (a lab tool).
 *
 *   cc -O2 -std=gnu11 -pthread -Inative bench/kernel/copy_align.c native/neural_experts.c \
 *      native/neural_isa.c native/neural_team.c -lm -o copy-align
 *   ./copy-align [MIB] [FILE]      (FILE: a file of >= MIB MiB + 4 KiB to map; default: one is written in /tmp)
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "neural_experts.h"

static double cpu_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

int main(int argc, char **argv) {
    size_t n = (size_t)(argc > 1 ? atof(argv[1]) : 128) << 20;
    const char *path = argc > 2 ? argv[2] : "/tmp/neural-copy-align.bin";
    int made = argc <= 2;
    if (made) {
        FILE *f = fopen(path, "wb");
        if (!f) return perror(path), 1;
        char *blk = malloc(1 << 20);
        for (size_t i = 0; i < (1 << 20); i++) blk[i] = (char)(i * 2654435761u >> 13);
        for (size_t w = 0; w < n + (1 << 20); w += 1 << 20) fwrite(blk, 1, 1 << 20, f);
        fclose(f);
        free(blk);
    }
    int fd = open(path, O_RDONLY);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) || (size_t)st.st_size < n + 4096) return fprintf(stderr, "%s too small\n", path), 1;
    const char *src = mmap(NULL, n + 4096, PROT_READ, MAP_SHARED, fd, 0);
    char *dst = aligned_alloc(4096, n + 8192);
    if (src == MAP_FAILED || !dst) return perror("map"), 1;
    memcpy(dst, src, n); /* fault both in: first touch is not what is measured */
    const int so[] = {0, 0, 0, 5, 5, 48, 48}, dof[] = {0, 16, 21, 0, 16, 0, 16};
    for (int c = 0; c < 7; c++) {
        double best_nt = 0, best_mc = 0;
        for (int r = 0; r < 3; r++) {
            double t = cpu_now();
            neural_copy_stream(dst + dof[c], src + so[c], n);
            t = cpu_now() - t;
            best_nt = n / t > best_nt ? n / t : best_nt;
            t = cpu_now();
            memcpy(dst + dof[c], src + so[c], n);
            t = cpu_now() - t;
            best_mc = n / t > best_mc ? n / t : best_mc;
        }
        if (memcmp(dst + dof[c], src + so[c], n)) return fprintf(stderr, "copy differs\n"), 1;
        printf("src+%-2d dst+%-2d (dst-src mod 4096 = %4d): copy_stream %5.2f  memcpy %5.2f GB/s per CPU-second\n",
               so[c], dof[c], (dof[c] - so[c] + 4096) % 4096, best_nt / 1e9, best_mc / 1e9);
    }
    munmap((void *)src, n + 4096);
    close(fd);
    free(dst);
    if (made) unlink(path);
    return 0;
}
