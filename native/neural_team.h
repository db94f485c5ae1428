/* The persistent worker team (see neural_team.c). Callers hold the API lock. */
#ifndef NEURAL_TEAM_H
#define NEURAL_TEAM_H

typedef void (*neural_job_fn)(void *ctx, int tid);

/* (Re)start the team with n threads including the caller (0 = online CPUs); returns the size. */
int neural_team_resize(int n);
int neural_team_size(void);
void neural_team_set_spin(int us);
/* Run fn(ctx, tid) on every thread (the caller is tid 0); returns when all have finished. */
void neural_team_run(neural_job_fn fn, void *ctx);
/* neural_team_run in two halves: start wakes the workers on fn (the caller does not take part yet), join runs
   fn(ctx, 0) on the caller and waits for all. Between them the caller may do other work; jobs that hand out chunks
   dynamically (neural_next_chunk) give the workers the chunks it would have taken. */
void neural_team_start(neural_job_fn fn, void *ctx);
void neural_team_join(void);
/* Atomic fetch-and-increment used to hand out chunks dynamically. */
long neural_next_chunk(volatile long *counter);

#endif
