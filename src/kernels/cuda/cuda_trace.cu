// cuda_trace: turning the kernels' own events on and off, and fetching them
// (cuda_trace.cuh says what is recorded; model/cuda_trace.c makes the table).
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>

#include "kernels/cuda/cuda.h"
#include "kernels/cuda/cuda_trace.cuh"

// Each instrumented file's own __constant__ pointer (LILAC_TRACE_TU).
extern "C" int lilac_cuda_trace_set_ops(const struct lilac_trace_dev *d);
extern "C" int lilac_cuda_trace_set_quant(const struct lilac_trace_dev *d);
extern "C" int lilac_cuda_trace_set_mma(const struct lilac_trace_dev *d);

static lilac_trace_dev g_dev; // the buffer while a trace runs

// The launch notes (cuda.h): a count and the last grids, per thread (the step is built by one).
#define NOTE_RING LILAC_CUDA_LAUNCH_NOTES
static thread_local unsigned long t_notes;
static thread_local unsigned t_note_ring[NOTE_RING];

extern "C" void lilac_cuda_launch_note(unsigned blocks)
{
    t_note_ring[t_notes % NOTE_RING] = blocks;
    t_notes++;
}

extern "C" unsigned long lilac_cuda_launch_notes(unsigned *last, int n)
{
    n = n < 0 ? 0 : n > NOTE_RING ? NOTE_RING : n;
    if ((unsigned long)n > t_notes)
        n = (int)t_notes;
    for (int i = 0; i < n; i++)
        last[i] = t_note_ring[(t_notes - (unsigned long)n + (unsigned long)i) % NOTE_RING];
    return t_notes;
}

static int fail(cudaError_t e, const char *what, char *msg, size_t cap)
{
    if (msg && cap)
        snprintf(msg, cap, "%s: %s", what, cudaGetErrorString(e));
    return -1;
}

static int set_all(const lilac_trace_dev *d)
{
    return lilac_cuda_trace_set_ops(d) | lilac_cuda_trace_set_quant(d) | lilac_cuda_trace_set_mma(d);
}

extern "C" int lilac_cuda_trace_begin(size_t cap, char *msg, size_t mcap)
{
    cudaError_t e = cudaDeviceSynchronize(); // nothing in flight sees a half-set pointer
    if (e != cudaSuccess)
        return fail(e, "trace: synchronize", msg, mcap);
    if (g_dev.ev)
        return fail(cudaErrorInvalidValue, "trace: already on", msg, mcap);
    if (cap < 1 || cap > 0xffffffffu)
        return fail(cudaErrorInvalidValue, "trace: buffer size", msg, mcap);
    lilac_trace_dev d = {};
    if ((e = cudaMalloc((void **)&d.ev, cap * sizeof(lilac_trace_ev))) != cudaSuccess)
        return fail(e, "trace: buffer", msg, mcap);
    // every slot's kind 0xFF until a block writes it (a block takes a slot a kind, and may not write them all)
    if ((e = cudaMemset(d.ev, 0xFF, cap * sizeof(lilac_trace_ev))) != cudaSuccess) {
        cudaFree(d.ev);
        return fail(e, "trace: buffer", msg, mcap);
    }
    if ((e = cudaMalloc((void **)&d.n, sizeof(unsigned))) != cudaSuccess ||
        (e = cudaMemset(d.n, 0, sizeof(unsigned))) != cudaSuccess) {
        cudaFree(d.ev);
        cudaFree(d.n);
        return fail(e, "trace: counter", msg, mcap);
    }
    d.cap = (unsigned)cap;
    g_dev = d;
    // the copies to the symbols may return before they land: synchronize before the traced kernels
    if (set_all(&d) || (e = cudaDeviceSynchronize()) != cudaSuccess) {
        lilac_trace_dev off = {};
        set_all(&off);
        cudaDeviceSynchronize();
        cudaFree(d.ev);
        cudaFree(d.n);
        g_dev = off;
        return fail(e != cudaSuccess ? e : cudaErrorInvalidSymbol, "trace: turning it on", msg, mcap);
    }
    return 0;
}

extern "C" int lilac_cuda_trace_end(struct lilac_trace_ev **ev, size_t *n, uint64_t *dropped, char *msg,
                                    size_t mcap)
{
    *ev = NULL, *n = 0, *dropped = 0;
    if (!g_dev.ev)
        return fail(cudaErrorInvalidValue, "trace: not on", msg, mcap);
    cudaError_t e = cudaDeviceSynchronize();
    const lilac_trace_dev d = g_dev, off = {};
    const int off_err = set_all(&off);
    cudaError_t e2 = cudaDeviceSynchronize();
    g_dev = off;
    unsigned taken = 0;
    if (e == cudaSuccess)
        e = e2;
    if (e == cudaSuccess)
        e = cudaMemcpy(&taken, d.n, sizeof taken, cudaMemcpyDeviceToHost);
    const size_t got = taken < d.cap ? taken : d.cap;
    lilac_trace_ev *h = (lilac_trace_ev *)malloc((got ? got : 1) * sizeof *h);
    if (e == cudaSuccess && !h)
        e = cudaErrorMemoryAllocation;
    if (e == cudaSuccess && got)
        e = cudaMemcpy(h, d.ev, got * sizeof *h, cudaMemcpyDeviceToHost);
    cudaFree(d.ev);
    cudaFree(d.n);
    if (e != cudaSuccess || off_err) {
        free(h);
        return fail(e != cudaSuccess ? e : cudaErrorInvalidSymbol, "trace: fetching the events", msg, mcap);
    }
    size_t kept = 0; // the slots blocks wrote, in order
    for (size_t i = 0; i < got; i++)
        if (h[i].kind < LILAC_TRACE_KINDS)
            h[kept++] = h[i];
    *ev = h, *n = kept, *dropped = taken - got;
    return 0;
}
