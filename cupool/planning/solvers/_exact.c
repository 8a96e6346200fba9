/*
 * The hot loop of the `exact` solver: MiniMalloc's depth-first search for one
 * time component, in C. The twin of `PySearch` in exact_search.py, line for line:
 * same state, same visiting order, same node and backtrack counts. Read the
 * module docstring of exact.py for the algorithm and its pruning rules; this
 * file only adds memory management, and a jump over runs of sections already
 * marked affected (the same sections, in the same order, as marking each).
 *
 * search(sizes, widths, section_lo, section_hi, section_ptr, section_members,
 *        overlap_ptr, overlaps, capacity, heuristics, time_limit_s, max_nodes)
 *   -> (outcome, offsets or None, nodes, backtracks)
 *
 * Arguments are sequences of ints (see exact.Sweep), `heuristics` a sequence of
 * strings over the letters W, A, T, Z; `max_nodes` > 0 caps the nodes visited (0: no
 * cap). `outcome` is 0 found, 1 proved infeasible, 3 time or node limit reached. The GIL is released while searching; Ctrl-C is noticed
 * every 256 nodes and raises KeyboardInterrupt.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { FOUND = 0, NOT_FOUND = 1, ABORTED = 2, TIMEOUT = 3, INTERRUPTED = 4, NO_MEMORY = 5 };
#define CLOCK_EVERY 256
#define MAX_KEYS 8

typedef struct { int64_t offset; int64_t p; } Order;  /* p: index into the preorder */
typedef struct { int64_t index; int64_t value; } Change;  /* a value before a change */
typedef struct { int64_t keys[MAX_KEYS]; int64_t buffer; } PreorderItem;

typedef struct {
    int64_t n, num_sections;
    int64_t *sizes, *widths, *section_lo, *section_hi, *section_ptr, *section_members;
    int64_t *overlap_ptr, *overlaps;
    int64_t capacity;
    const char *heuristic;
    int num_keys;
    double deadline;
    PyThreadState *thread_state;
    /* search state */
    int64_t *assigned, *solution, *min_offset, *floor, *total, *cuts;
    int64_t nodes, backtracks, nodes_remaining, max_nodes;
    /* undo logs, used as stacks */
    Change *offset_log, *section_log;
    size_t offset_len, offset_cap, section_len, section_cap;
    /* scratch: sections whose floor may rise after one placement */
    int64_t *affected, affected_len;
    uint64_t *stamp, stamp_now;
    int64_t *run_end;  /* a section stamped now: every section in [s, run_end[s]) is too */
    int64_t *witness;  /* per section: a member last found at or below its floor (a hint) */
} Search;

static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int push_change(Change **log, size_t *len, size_t *cap, int64_t index, int64_t value) {
    if (*len == *cap) {
        size_t grown = *cap ? 2 * *cap : 1024;
        Change *moved = realloc(*log, grown * sizeof(Change));
        if (!moved) return -1;
        *log = moved;
        *cap = grown;
    }
    (*log)[*len].index = index;
    (*log)[*len].value = value;
    ++*len;
    return 0;
}

static int compare_orders(const void *a, const void *b) {
    const Order *x = a, *y = b;
    if (x->offset != y->offset) return x->offset < y->offset ? -1 : 1;
    return (x->p > y->p) - (x->p < y->p);
}

static int compare_preorder(const void *a, const void *b) {
    const PreorderItem *x = a, *y = b;
    for (int k = 0; k < MAX_KEYS; ++k)
        if (x->keys[k] != y->keys[k]) return x->keys[k] > y->keys[k] ? -1 : 1;
    return (x->buffer > y->buffer) - (x->buffer < y->buffer);
}

/* Raise the neighbours' minimum offsets and the sections' floors for buffer i at
 * `offset`, logging old values. Returns -1 when out of memory. */
static int place(Search *S, int64_t i, int64_t offset, int *hatless) {
    const int64_t top = offset + S->sizes[i];
    *hatless = 1;
    ++S->stamp_now;
    S->affected_len = 0;
    for (int64_t k = S->overlap_ptr[i]; k < S->overlap_ptr[i + 1]; ++k) {
        const int64_t j = S->overlaps[k];
        if (S->assigned[j] >= 0) continue;
        *hatless = 0;
        if (S->min_offset[j] >= top) continue;
        if (push_change(&S->offset_log, &S->offset_len, &S->offset_cap, j, S->min_offset[j]))
            return -1;
        S->min_offset[j] = top;
        /* the sections of j not yet affected, in order; runs already stamped are
         * jumped over (each section of [lo, hi) is stamped by the end of the loop) */
        const int64_t hi = S->section_hi[j];
        for (int64_t s = S->section_lo[j]; s < hi;) {
            if (S->stamp[s] == S->stamp_now) {
                s = S->run_end[s];
                continue;
            }
            S->stamp[s] = S->stamp_now;
            S->run_end[s] = hi;
            S->affected[S->affected_len++] = s++;
        }
    }
    for (int64_t s = S->section_lo[i]; s < S->section_hi[i]; ++s) {
        if (push_change(&S->section_log, &S->section_len, &S->section_cap, s, S->floor[s]))
            return -1;
        S->floor[s] = top;
        S->total[s] -= S->sizes[i];
    }
    for (int64_t a = 0; a < S->affected_len; ++a) {
        const int64_t s = S->affected[a];
        /* the floor rises to the lowest min offset of the unplaced members, when that is
         * above it: a member at or below the floor settles it (no rise), so the scan
         * stops there */
        const int64_t floor = S->floor[s];
        const int64_t w = S->witness[s];
        if (w >= 0 && S->assigned[w] < 0 && S->min_offset[w] <= floor) continue;
        int64_t lowest = INT64_MAX;
        for (int64_t k = S->section_ptr[s]; k < S->section_ptr[s + 1]; ++k) {
            const int64_t j = S->section_members[k];
            if (S->assigned[j] >= 0) continue;
            if (S->min_offset[j] <= floor) {
                S->witness[s] = j;
                lowest = INT64_MAX;
                break;
            }
            if (S->min_offset[j] < lowest) lowest = S->min_offset[j];
        }
        if (lowest != INT64_MAX && floor < lowest) {
            if (push_change(&S->section_log, &S->section_len, &S->section_cap, s, S->floor[s]))
                return -1;
            S->floor[s] = lowest;
        }
    }
    return 0;
}

static void unplace(Search *S, int64_t i, size_t offset_mark, size_t section_mark) {
    while (S->section_len > section_mark) {
        const Change *c = &S->section_log[--S->section_len];
        S->floor[c->index] = c->value;
    }
    for (int64_t s = S->section_lo[i]; s < S->section_hi[i]; ++s) S->total[s] += S->sizes[i];
    while (S->offset_len > offset_mark) {
        const Change *c = &S->offset_log[--S->offset_len];
        S->min_offset[c->index] = c->value;
    }
    S->assigned[i] = -1;
}

static int check(const Search *S, int64_t lo, int64_t hi, int64_t offset) {
    for (int64_t s = lo; s < hi; ++s) {
        const int64_t floor = S->floor[s] > offset ? S->floor[s] : offset;
        if (floor + S->total[s] > S->capacity) return 0;
    }
    return 1;
}

static int sub_solve(Search *S, const int64_t *buffers, int64_t nb, int64_t lo, int64_t hi);

static int search(Search *S, const int64_t *buffers, int64_t nb, int64_t lo, int64_t hi,
                  const int64_t *preorder, const Order *parent, int64_t parent_len,
                  int64_t min_offset, int64_t min_p);

/* Continue after placing buffer i; split into parts when no buffer crosses a boundary. */
static int decompose(Search *S, const int64_t *buffers, int64_t nb, int64_t lo, int64_t hi,
                     const int64_t *preorder, const Order *ordering, int64_t m,
                     int64_t offset, int64_t p, int64_t i) {
    S->solution[i] = S->assigned[i];
    int64_t *cutpoints = malloc((size_t)(S->section_hi[i] - S->section_lo[i] + 2) * sizeof(int64_t));
    if (!cutpoints) return NO_MEMORY;
    int64_t nc = 0;
    cutpoints[nc++] = lo;
    for (int64_t s = S->section_lo[i]; s < S->section_hi[i] - 1; ++s)
        if (--S->cuts[s] == 0) cutpoints[nc++] = s + 1;
    int outcome;
    if (nc == 1) {
        outcome = search(S, buffers, nb, lo, hi, preorder, ordering, m, offset, p);
    } else {
        cutpoints[nc++] = hi;
        outcome = FOUND;
        int64_t *part = malloc((size_t)nb * sizeof(int64_t));
        if (!part) outcome = NO_MEMORY;
        for (int64_t c = 1; part && c < nc; ++c) {
            int64_t np = 0;
            for (int64_t k = 0; k < nb; ++k) {
                const int64_t j = buffers[k];
                if (S->assigned[j] < 0 && S->section_hi[j] > cutpoints[c - 1] &&
                    cutpoints[c] > S->section_lo[j])
                    part[np++] = j;
            }
            if (!np) continue;
            outcome = sub_solve(S, part, np, cutpoints[c - 1], cutpoints[c]);
            if (outcome != FOUND) break;
        }
        free(part);
    }
    for (int64_t s = S->section_lo[i]; s < S->section_hi[i] - 1; ++s) ++S->cuts[s];
    free(cutpoints);
    return outcome;
}

static int search(Search *S, const int64_t *buffers, int64_t nb, int64_t lo, int64_t hi,
                  const int64_t *preorder, const Order *parent, int64_t parent_len,
                  int64_t min_offset, int64_t min_p) {
    if (S->nodes_remaining <= 0) return ABORTED;
    --S->nodes_remaining;
    ++S->nodes;
    if (S->max_nodes > 0 && S->nodes > S->max_nodes) return TIMEOUT;
    if (S->nodes % CLOCK_EVERY == 0) {
        if (now_seconds() > S->deadline) return TIMEOUT;
        PyEval_RestoreThread(S->thread_state);
        const int interrupted = PyErr_CheckSignals();
        S->thread_state = PyEval_SaveThread();
        if (interrupted) return INTERRUPTED;
    }
    /* The unassigned buffers by (min offset, preorder index). The parent's list is
     * sorted; entries whose min offset did not change stay sorted ("kept"), the others
     * ("moved") are sorted apart and merged in. */
    Order *block = malloc((size_t)(3 * parent_len + 1) * sizeof(Order));
    if (!block) return NO_MEMORY;
    Order *ordering = block, *kept = block + parent_len, *moved = block + 2 * parent_len;
    int64_t nk = 0, nm = 0;
    for (int64_t k = 0; k < parent_len; ++k) {
        const int64_t i = preorder[parent[k].p];
        if (S->assigned[i] >= 0) continue;
        Order o = {S->min_offset[i], parent[k].p};
        if (o.offset == parent[k].offset) kept[nk++] = o;
        else moved[nm++] = o;
    }
    qsort(moved, (size_t)nm, sizeof(Order), compare_orders);
    int64_t m = 0;
    for (int64_t a = 0, b = 0; a < nk || b < nm;)
        ordering[m++] = (b == nm || (a < nk && compare_orders(&kept[a], &moved[b]) < 0))
                            ? kept[a++] : moved[b++];
    if (m == 0) {
        for (int64_t k = 0; k < nb; ++k) S->solution[buffers[k]] = S->assigned[buffers[k]];
        free(block);
        return FOUND;
    }
    int64_t min_height = INT64_MAX;
    for (int64_t k = 0; k < m; ++k) {
        const int64_t height = ordering[k].offset + S->sizes[preorder[ordering[k].p]];
        if (height < min_height) min_height = height;
    }
    for (int64_t k = 0; k < m; ++k) {
        const int64_t offset = ordering[k].offset, p = ordering[k].p;
        if (offset < min_offset || (offset == min_offset && p < min_p)) continue;
        if (offset >= min_height) continue;
        const int64_t i = preorder[p];
        S->assigned[i] = offset;
        const size_t offset_mark = S->offset_len, section_mark = S->section_len;
        int hatless;
        int outcome = NOT_FOUND;
        if (place(S, i, offset, &hatless)) outcome = NO_MEMORY;
        else if (check(S, lo, hi, offset))
            outcome = decompose(S, buffers, nb, lo, hi, preorder, ordering, m, offset, p, i);
        unplace(S, i, offset_mark, section_mark);
        if (outcome != NOT_FOUND) {
            free(block);
            return outcome;
        }
        if (hatless) break;
    }
    ++S->backtracks;
    free(block);
    return NOT_FOUND;
}

static int sub_solve(Search *S, const int64_t *buffers, int64_t nb, int64_t lo, int64_t hi) {
    PreorderItem *items = calloc((size_t)nb, sizeof(PreorderItem));
    int64_t *preorder = malloc((size_t)nb * sizeof(int64_t));
    Order *ordering = malloc((size_t)nb * sizeof(Order));
    int outcome = NO_MEMORY;
    if (items && preorder && ordering) {
        for (int64_t k = 0; k < nb; ++k) {
            const int64_t i = buffers[k];
            int64_t total = INT64_MIN;
            for (int64_t s = S->section_lo[i]; s < S->section_hi[i]; ++s)
                if (S->total[s] > total) total = S->total[s];
            for (int key = 0; key < S->num_keys; ++key) {
                switch (S->heuristic[key]) {
                    case 'W': items[k].keys[key] = S->widths[i]; break;
                    case 'A': items[k].keys[key] = S->sizes[i] * S->widths[i]; break;
                    case 'T': items[k].keys[key] = total; break;
                    default: items[k].keys[key] = S->sizes[i]; break;  /* 'Z' */
                }
            }
            items[k].buffer = i;
        }
        qsort(items, (size_t)nb, sizeof(PreorderItem), compare_preorder);
        for (int64_t k = 0; k < nb; ++k) {
            preorder[k] = items[k].buffer;
            ordering[k].offset = 0;
            ordering[k].p = k;
        }
        outcome = search(S, buffers, nb, lo, hi, preorder, ordering, nb, 0, 0);
    }
    free(items);
    free(preorder);
    free(ordering);
    return outcome;
}

/* Copy a sequence of ints into a new int64 array; `expected` < 0 accepts any length. */
static int64_t *read_ints(PyObject *sequence, Py_ssize_t expected, const char *name,
                          Py_ssize_t *length) {
    PyObject *fast = PySequence_Fast(sequence, name);
    if (!fast) return NULL;
    const Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
    if (expected >= 0 && n != expected) {
        PyErr_Format(PyExc_ValueError, "%s has %zd items, expected %zd", name, n, expected);
        Py_DECREF(fast);
        return NULL;
    }
    int64_t *values = malloc((size_t)(n + 1) * sizeof(int64_t));
    if (!values) {
        Py_DECREF(fast);
        PyErr_NoMemory();
        return NULL;
    }
    for (Py_ssize_t k = 0; k < n; ++k) {
        values[k] = PyLong_AsLongLong(PySequence_Fast_GET_ITEM(fast, k));
        if (values[k] == -1 && PyErr_Occurred()) {
            free(values);
            Py_DECREF(fast);
            return NULL;
        }
    }
    Py_DECREF(fast);
    if (length) *length = n;
    return values;
}

static int check_ranges(const Search *S) {
    for (int64_t i = 0; i < S->n; ++i) {
        if (S->sizes[i] <= 0 || S->widths[i] <= 0 || S->sizes[i] > INT64_MAX / S->widths[i] ||
            S->section_lo[i] < 0 || S->section_lo[i] >= S->section_hi[i] ||
            S->section_hi[i] > S->num_sections || S->overlap_ptr[i] > S->overlap_ptr[i + 1]) {
            PyErr_Format(PyExc_ValueError, "buffer %lld: inconsistent sweep data (size=%lld, "
                         "width=%lld, sections [%lld, %lld))", (long long)i,
                         (long long)S->sizes[i], (long long)S->widths[i],
                         (long long)S->section_lo[i], (long long)S->section_hi[i]);
            return -1;
        }
    }
    for (int64_t s = 0; s < S->num_sections; ++s)
        if (S->section_ptr[s] > S->section_ptr[s + 1]) {
            PyErr_Format(PyExc_ValueError, "section_ptr decreases at section %lld", (long long)s);
            return -1;
        }
    return 0;
}

static int check_members(const int64_t *values, Py_ssize_t count, int64_t n, const char *name) {
    for (Py_ssize_t k = 0; k < count; ++k)
        if (values[k] < 0 || values[k] >= n) {
            PyErr_Format(PyExc_ValueError, "%s[%zd] (=%lld) must be in [0, %lld)", name, k,
                         (long long)values[k], (long long)n);
            return -1;
        }
    return 0;
}

static PyObject *py_search(PyObject *self, PyObject *args) {
    PyObject *o_sizes, *o_widths, *o_lo, *o_hi, *o_sptr, *o_smem, *o_optr, *o_ovl, *o_heur;
    long long capacity;
    double time_limit_s;
    long long max_nodes = 0;
    if (!PyArg_ParseTuple(args, "OOOOOOOOLOd|L", &o_sizes, &o_widths, &o_lo, &o_hi, &o_sptr,
                          &o_smem, &o_optr, &o_ovl, &capacity, &o_heur, &time_limit_s,
                          &max_nodes))
        return NULL;
    Search S;
    memset(&S, 0, sizeof S);
    PyObject *result = NULL, *heuristics = NULL;
    Py_ssize_t n = 0, sptr_len = 0, smem_len = 0, ovl_len = 0;
    S.sizes = read_ints(o_sizes, -1, "sizes", &n);
    S.n = n;
    if (S.sizes) S.widths = read_ints(o_widths, n, "widths", NULL);
    if (S.widths) S.section_lo = read_ints(o_lo, n, "section_lo", NULL);
    if (S.section_lo) S.section_hi = read_ints(o_hi, n, "section_hi", NULL);
    if (S.section_hi) S.section_ptr = read_ints(o_sptr, -1, "section_ptr", &sptr_len);
    if (S.section_ptr) S.section_members = read_ints(o_smem, -1, "section_members", &smem_len);
    if (S.section_members) S.overlap_ptr = read_ints(o_optr, n + 1, "overlap_ptr", NULL);
    if (S.overlap_ptr) S.overlaps = read_ints(o_ovl, -1, "overlaps", &ovl_len);
    if (!S.overlaps) goto done;
    S.num_sections = sptr_len - 1;
    if (S.num_sections < 0 || check_ranges(&S) ||
        S.section_ptr[0] != 0 || S.section_ptr[S.num_sections] != smem_len ||
        S.overlap_ptr[0] != 0 || S.overlap_ptr[n] != ovl_len ||
        check_members(S.section_members, smem_len, n, "section_members") ||
        check_members(S.overlaps, ovl_len, n, "overlaps")) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_ValueError, "CSR pointers do not match their member lists");
        goto done;
    }
    heuristics = PySequence_Fast(o_heur, "heuristics");
    if (!heuristics) goto done;
    const Py_ssize_t num_heuristics = PySequence_Fast_GET_SIZE(heuristics);
    if (num_heuristics < 1) {
        PyErr_SetString(PyExc_ValueError, "heuristics must not be empty");
        goto done;
    }
    for (Py_ssize_t h = 0; h < num_heuristics; ++h) {
        const char *text = PyUnicode_AsUTF8(PySequence_Fast_GET_ITEM(heuristics, h));
        if (!text) goto done;
        if (strlen(text) > MAX_KEYS || strspn(text, "WATZ") != strlen(text)) {
            PyErr_Format(PyExc_ValueError, "heuristic %R: at most %d of the letters W, A, T, Z",
                         PySequence_Fast_GET_ITEM(heuristics, h), MAX_KEYS);
            goto done;
        }
    }
    const char **letters = malloc((size_t)num_heuristics * sizeof(char *));
    if (!letters) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t h = 0; h < num_heuristics; ++h)
        letters[h] = PyUnicode_AsUTF8(PySequence_Fast_GET_ITEM(heuristics, h));
    const size_t ns = (size_t)(S.num_sections > 0 ? S.num_sections : 1);
    S.assigned = malloc((size_t)(n + 1) * sizeof(int64_t));
    S.solution = malloc((size_t)(n + 1) * sizeof(int64_t));
    S.min_offset = calloc((size_t)(n + 1), sizeof(int64_t));
    S.floor = calloc(ns, sizeof(int64_t));
    S.total = calloc(ns, sizeof(int64_t));
    S.cuts = calloc(ns, sizeof(int64_t));
    S.affected = malloc(ns * sizeof(int64_t));
    S.stamp = calloc(ns, sizeof(uint64_t));
    S.run_end = malloc(ns * sizeof(int64_t));
    S.witness = malloc(ns * sizeof(int64_t));
    int64_t *all = malloc((size_t)(n + 1) * sizeof(int64_t));
    if (!S.assigned || !S.solution || !S.min_offset || !S.floor || !S.total || !S.cuts ||
        !S.affected || !S.stamp || !S.run_end || !S.witness || !all) {
        free(all);
        free(letters);
        PyErr_NoMemory();
        goto done;
    }
    for (size_t s = 0; s < ns; ++s) S.witness[s] = -1;
    for (int64_t i = 0; i < n; ++i) {
        S.assigned[i] = S.solution[i] = -1;
        all[i] = i;
        for (int64_t s = S.section_lo[i]; s < S.section_hi[i]; ++s) S.total[s] += S.sizes[i];
        for (int64_t s = S.section_lo[i]; s < S.section_hi[i] - 1; ++s) ++S.cuts[s];
    }
    S.capacity = capacity;
    S.max_nodes = max_nodes;
    S.deadline = now_seconds() + time_limit_s;
    int outcome = ABORTED;
    int64_t limit = n > 0 ? n : 1;
    S.thread_state = PyEval_SaveThread();
    while (outcome == ABORTED) {
        limit = limit < INT64_MAX / 2 ? 2 * limit : INT64_MAX;
        for (Py_ssize_t h = 0; h < num_heuristics && outcome == ABORTED; ++h) {
            S.heuristic = letters[h];
            S.num_keys = (int)strlen(S.heuristic);
            S.nodes_remaining = limit;
            outcome = sub_solve(&S, all, n, 0, S.num_sections);
        }
    }
    PyEval_RestoreThread(S.thread_state);
    free(all);
    free(letters);
    if (outcome == INTERRUPTED) goto done;
    if (outcome == NO_MEMORY) {
        PyErr_NoMemory();
        goto done;
    }
    PyObject *offsets = Py_None;
    Py_INCREF(offsets);
    if (outcome == FOUND) {
        Py_DECREF(offsets);
        offsets = PyList_New(n);
        if (!offsets) goto done;
        for (Py_ssize_t i = 0; i < n; ++i) {
            PyObject *value = PyLong_FromLongLong(S.solution[i]);
            if (!value) {
                Py_DECREF(offsets);
                goto done;
            }
            PyList_SET_ITEM(offsets, i, value);
        }
    }
    result = Py_BuildValue("iNLL", outcome, offsets, (long long)S.nodes,
                           (long long)S.backtracks);
done:
    Py_XDECREF(heuristics);
    free(S.sizes); free(S.widths); free(S.section_lo); free(S.section_hi);
    free(S.section_ptr); free(S.section_members); free(S.overlap_ptr); free(S.overlaps);
    free(S.assigned); free(S.solution); free(S.min_offset); free(S.floor); free(S.total);
    free(S.cuts); free(S.affected); free(S.stamp);
    free(S.run_end); free(S.witness); free(S.offset_log); free(S.section_log);
    return result;
}

static PyMethodDef methods[] = {
    {"search", py_search, METH_VARARGS,
     "search(sizes, widths, section_lo, section_hi, section_ptr, section_members, "
     "overlap_ptr, overlaps, capacity, heuristics, time_limit_s, max_nodes=0) -> "
     "(outcome, offsets or None, nodes, backtracks)\n\n"
     "MiniMalloc's depth-first search over one time component (see exact.py)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_exact",
    "Compiled search of cupool's exact solver; identical results to the Python path.",
    -1, methods,
};

PyMODINIT_FUNC PyInit__exact(void) { return PyModule_Create(&module); }
