/* The searched streaming member's estimate of one kept set, compiled: the twin of
 * cupool.planning.budget.stream's _streamed_live, weight_layout (with _earliest_fit and
 * _tail_prefetches) and layout_iteration_us, run in that order on the same doubles.
 *
 * estimate(live, sizes, first, last, ids, streamed, start_us, durations, budget, fill,
 *          latency_us, bytes_per_us, engines, tails) -> float
 *
 * live: the bytes resident at each op with every weight kept (int64, n ops). The weights
 * are given in the order weight_layout streams them (by first use, then id): sizes,
 * first and last use, ids (int64 each) and `streamed` (int64, nonzero: streamed, else
 * kept). start_us and durations are the ops' estimated start times and durations
 * (float64, n each). A copy takes latency_us + size / bytes_per_us (the cost model's
 * copy_us, with bytes_per_us = gbps * 1e3 computed by the caller), on `engines` FIFO
 * engines. Returns infinity when the streamed weights alone leave an op over `budget`,
 * else the estimated iteration time (µs).
 *
 * Every value is computed by the same double operations in the same order as the Python
 * (the resident bytes are integers, exact in doubles; the limit and the times round the
 * same way: no fused multiply-add, see setup.py), so the estimates are equal, not close.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../../_int64_arg.h"

static int get_float64(PyObject *obj, Arg *arg, const char *name) {
    if (PyObject_GetBuffer(obj, &arg->view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) return -1;
    arg->held = 1;
    const char *f = arg->view.format;
    if (arg->view.itemsize != 8 || !f || (strcmp(f, "d") && strcmp(f, "<d") && strcmp(f, "=d"))) {
        PyErr_Format(PyExc_TypeError, "%s must be a C-contiguous float64 array", name);
        return -1;
    }
    return 0;
}

/* _earliest_fit: the earliest op t in [low, high] from which `size` more bytes fit
 * `limit` at every op of [t, high). */
static Py_ssize_t earliest_fit(const double *live, Py_ssize_t low, Py_ssize_t high,
                               double size, double limit) {
    for (Py_ssize_t k = high - 1; k >= low; --k)
        if (live[k] + size > limit) return k + 1;
    return low;
}

typedef struct { int64_t trigger, id, due, size; } Copy;

static int compare_copies(const void *a, const void *b) {
    const Copy *x = a, *y = b;
    if (x->trigger != y->trigger) return x->trigger < y->trigger ? -1 : 1;
    return (x->id > y->id) - (x->id < y->id);
}

static double copy_us(int64_t size, double latency_us, double bytes_per_us) {
    return latency_us + (double)size / bytes_per_us;
}

/* The estimate, on arrays already checked; -1.0 when out of memory. */
static double estimate(Py_ssize_t n, const int64_t *live_in, Py_ssize_t w,
                       const int64_t *sizes, const int64_t *first, const int64_t *last,
                       const int64_t *ids, const int64_t *streamed, const double *start_us,
                       const double *durations, int64_t budget, double fill,
                       double latency_us, double bytes_per_us, Py_ssize_t engines, int tails) {
    double *live = malloc((size_t)(n + 1) * sizeof(double));
    double *delta = calloc((size_t)(n + 1), sizeof(double));
    double *landed = calloc((size_t)(n > 0 ? n : 1), sizeof(double));
    double *engine_free = calloc((size_t)engines, sizeof(double));
    int64_t *trigger = malloc((size_t)(w > 0 ? w : 1) * sizeof(int64_t));
    int64_t *tail = malloc((size_t)(w > 0 ? w : 1) * sizeof(int64_t));
    Copy *copies = malloc((size_t)(w > 0 ? w : 1) * sizeof(Copy));
    double result = -1.0;
    if (!live || !delta || !landed || !engine_free || !trigger || !tail || !copies) goto done;

    /* _streamed_live: the kept weights' bytes everywhere, the streamed ones' only from
     * their first use to their last */
    int64_t total = 0;
    for (Py_ssize_t b = 0; b < w; ++b) {
        if (!streamed[b]) continue;
        total += sizes[b];
        delta[first[b]] += (double)sizes[b];
        delta[last[b] + 1] -= (double)sizes[b];
    }
    double running = 0.0, highest = 0.0, lowest = INFINITY;
    for (Py_ssize_t i = 0; i < n; ++i) {
        running += delta[i];
        live[i] = ((double)live_in[i] - (double)total) + running;
        if (live[i] > highest) highest = live[i];
        if (live[i] < lowest) lowest = live[i];
    }
    if (highest > (double)budget) {
        result = INFINITY;
        goto done;
    }

    /* weight_layout: each streamed weight's trigger, the earliest from which its bytes fit
     * the limit up to its first use, never before the previous weight's */
    const double base = lowest;
    const double limit = base + fill * ((double)budget - base);
    int64_t floor = 0, latest = -1;
    for (Py_ssize_t b = 0; b < w; ++b) {
        tail[b] = -1;
        if (!streamed[b]) continue;
        const double size = (double)sizes[b];
        const int64_t at = earliest_fit(live, floor, first[b], size, limit);
        for (int64_t k = at; k < first[b]; ++k) live[k] += size;
        trigger[b] = floor = at;
        if (at > latest) latest = at;
    }

    /* _tail_prefetches: a weight whose prefetch inside the iteration is shorter than its
     * copy is copied in the previous iteration's tail instead, where its bytes fit */
    if (tails) {
        int64_t tail_floor = (latest >= 0 ? latest : 0) + 1;
        for (Py_ssize_t b = 0; b < w; ++b) {
            if (!streamed[b]) continue;
            const double size = (double)sizes[b];
            const double ahead = start_us[first[b]] - start_us[trigger[b]];
            if (ahead >= copy_us(sizes[b], latency_us, bytes_per_us)) continue;
            for (int64_t k = trigger[b]; k < first[b]; ++k) live[k] -= size;
            int64_t low = last[b] + 2 > tail_floor ? last[b] + 2 : tail_floor;
            if (low > n) low = n;
            const int64_t start = earliest_fit(live, low, n, size, limit);
            double head = 0.0;
            for (int64_t k = 0; k < first[b]; ++k)
                if (live[k] > head) head = live[k];
            if (start < n && head + size <= limit) {
                for (int64_t k = 0; k < first[b]; ++k) live[k] += size;
                for (int64_t k = start; k < n; ++k) live[k] += size;
                tail[b] = tail_floor = start;
            } else {
                for (int64_t k = trigger[b]; k < first[b]; ++k) live[k] += size;
            }
        }
    }

    /* layout_iteration_us: the copies join FIFO engines at their trigger op (by buffer id
     * among one op's), each op waits for the copies due at it */
    Py_ssize_t m = 0;
    for (Py_ssize_t b = 0; b < w; ++b) {
        if (!streamed[b]) continue;
        if (tail[b] >= 0) copies[m] = (Copy){tail[b], ids[b], n - 1, sizes[b]};
        else copies[m] = (Copy){trigger[b], ids[b], first[b], sizes[b]};
        ++m;
    }
    qsort(copies, (size_t)m, sizeof(Copy), compare_copies);
    double now = 0.0, last_copy = 0.0;
    Py_ssize_t next = 0;
    for (Py_ssize_t i = 0; i < n; ++i) {
        for (; next < m && copies[next].trigger == i; ++next) {
            Py_ssize_t e = 0;  /* the engine free first (heapq's pop: the least value) */
            for (Py_ssize_t k = 1; k < engines; ++k)
                if (engine_free[k] < engine_free[e]) e = k;
            const double begin = engine_free[e] >= now ? engine_free[e] : now;
            const double end = begin + copy_us(copies[next].size, latency_us, bytes_per_us);
            engine_free[e] = end;
            const int64_t due = copies[next].due;
            if (end > landed[due]) landed[due] = end;
            if (end > last_copy) last_copy = end;
        }
        now = (now >= landed[i] ? now : landed[i]) + durations[i];
    }
    result = now >= last_copy ? now : last_copy;
done:
    free(live); free(delta); free(landed); free(engine_free);
    free(trigger); free(tail); free(copies);
    return result;
}

static PyObject *py_estimate(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *o[8];
    long long budget;
    double fill, latency_us, bytes_per_us;
    Py_ssize_t engines;
    int tails;
    if (!PyArg_ParseTuple(args, "OOOOOOOOLdddnp", &o[0], &o[1], &o[2], &o[3], &o[4], &o[5],
                          &o[6], &o[7], &budget, &fill, &latency_us, &bytes_per_us, &engines,
                          &tails))
        return NULL;
    static const char *names[8] = {"live", "sizes", "first", "last", "ids", "streamed",
                                   "start_us", "durations"};
    Arg a[8];
    memset(a, 0, sizeof a);
    PyObject *result = NULL;
    for (int k = 0; k < 8; ++k) {
        if ((k < 6 ? get_int64(o[k], &a[k], 0, names[k]) : get_float64(o[k], &a[k], names[k])) < 0)
            goto done;
    }
    const Py_ssize_t n = a[0].view.len / 8, w = a[1].view.len / 8;
    for (int k = 2; k < 6; ++k) {
        if (a[k].view.len / 8 != w) {
            PyErr_Format(PyExc_ValueError, "%s has %zd entries, sizes %zd", names[k],
                         a[k].view.len / 8, w);
            goto done;
        }
    }
    for (int k = 6; k < 8; ++k) {
        if (a[k].view.len / 8 < n) {
            PyErr_Format(PyExc_ValueError, "%s has %zd entries, live %zd", names[k],
                         a[k].view.len / 8, n);
            goto done;
        }
    }
    if (engines < 1) {
        PyErr_Format(PyExc_ValueError, "engines (=%zd) must be >= 1", engines);
        goto done;
    }
    const int64_t *first = a[2].view.buf, *last = a[3].view.buf;
    for (Py_ssize_t b = 0; b < w; ++b) {
        if (first[b] < 0 || last[b] < first[b] || last[b] >= n) {
            PyErr_Format(PyExc_ValueError, "weight %zd uses ops [%lld, %lld], outside [0, %zd)",
                         b, (long long)first[b], (long long)last[b], n);
            goto done;
        }
    }
    double value;
    Py_BEGIN_ALLOW_THREADS
    value = estimate(n, a[0].view.buf, w, a[1].view.buf, first, last, a[4].view.buf,
                     a[5].view.buf, a[6].view.buf, a[7].view.buf, (int64_t)budget, fill,
                     latency_us, bytes_per_us, engines, tails);
    Py_END_ALLOW_THREADS
    if (value == -1.0) PyErr_NoMemory();
    else result = PyFloat_FromDouble(value);
done:
    for (int k = 0; k < 8; ++k)
        if (a[k].held) PyBuffer_Release(&a[k].view);
    return result;
}

static PyMethodDef methods[] = {
    {"estimate", py_estimate, METH_VARARGS,
     "estimate(live, sizes, first, last, ids, streamed, start_us, durations, budget, fill, "
     "latency_us, bytes_per_us, engines, tails) -> float: the searched member's estimate."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_stream",
    "The searched streaming member's estimate of a kept set, compiled.", -1, methods,
};

PyMODINIT_FUNC PyInit__stream(void) { return PyModule_Create(&module); }
