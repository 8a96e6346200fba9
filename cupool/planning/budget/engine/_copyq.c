/* The planners' copy queue (cupool.planning.budget.engine.copies), compiled.
 *
 * CopyQueue keeps one FIFO copy engine's copies in issue order in six parallel arrays of
 * doubles: issue, length and due time of each copy, and three caches: its finish time, its
 * tolerance (how much later it may finish without any copy from it on missing its due
 * time) and the delay the copies behind it absorb. Every operation is the one of
 * copies.PythonCopyEngine with the same floating-point operations in the same order, so
 * that every answer and every cached value is bit for bit the Python one:
 *
 *   - max(a, b) and min(a, b) are Python's: the first argument unless the second compares
 *     greater (smaller), which decides ties such as 0.0 and -0.0 alike (py_max, py_min);
 *   - bisection is Python's bisect_right / bisect_left; the 1e-9 µs slack is the same double;
 *   - caches are updated by the same incremental walks (changed, tolerance_down), stopping
 *     where they stop.
 *
 * Where Python keeps its old lists, this queue updates its arrays in place: on an insertion
 * or removal at k every array is shifted at k first, so the old value of the copy now at j
 * is where the Python walks read it (old_f[j - shift]; old_after[j] below k, not yet
 * overwritten when read).
 *
 * set_aside and put_back: Python restores the caches it kept from before set_aside; this
 * queue inserts the copy again with the incremental walk of add, which computes the same
 * values (the walks give exactly what computing the caches afresh gives, and the queue is
 * the one from before), and then forgets the caches that were not computed before, so the
 * state is Python's in every case. Only queries may run between the two calls. Where both
 * caches were computed at set_aside, it logs the cached values its walk overwrites (and
 * the copy's own), and put_back, when the copy goes back to the place it left with the
 * queue unchanged since, writes them back instead of walking again: the arrays are then
 * bit for bit what they were before set_aside, as Python's restore leaves its lists.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stddef.h>
#include <string.h>

#define SLACK 1e-9 /* µs of rounding the on-time checks tolerate, as the Python code does */

typedef struct {
    PyObject_HEAD
    Py_ssize_t n, cap;
    double *issue, *length, *due; /* the copies, in issue order */
    double *finish, *tol, *after; /* caches; `after` is Python's _after */
    int finishes_valid;           /* Python: _finishes is not None */
    int tolerances_valid;         /* Python: _tol is not None (implies finishes_valid) */
    /* The undo log of the last set_aside (see the file's comment): the cached values its
     * walk overwrote, finish at [f_lo, f_lo + f_n) and tol, after at (t_hi - t_n, t_hi]
     * (indices with the copy out), the copy (issue, length, due, finish, tol, after) and
     * its index; valid while `logged` and no copy was added or removed since (`shifts`
     * is still `logged_at`). */
    double *log_finish, *log_tol, *log_after;
    Py_ssize_t log_cap, f_lo, f_n, t_hi, t_n, aside_k;
    double aside[6];
    int logged;
    unsigned long long shifts, logged_at; /* copies added or removed so far */
    int logging; /* the walk running now records what it overwrites */
} Queue;

/* Python's max(a, b) and min(a, b) for two floats. */
static inline double py_max(double a, double b) { return b > a ? b : a; }
static inline double py_min(double a, double b) { return b < a ? b : a; }

/* Python's bisect_right (right = 1) and bisect_left (right = 0) over the issue times. */
static inline Py_ssize_t bisect(const Queue *q, double x, int right) {
    Py_ssize_t lo = 0, hi = q->n;
    while (lo < hi) {
        Py_ssize_t mid = (lo + hi) / 2;
        if (right ? !(x < q->issue[mid]) : q->issue[mid] < x) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}
#define bisect_right(q, x) bisect((q), (x), 1)
#define bisect_left(q, x) bisect((q), (x), 0)

static int reserve(Queue *q, Py_ssize_t need) {
    if (need <= q->cap) return 0;
    Py_ssize_t cap = q->cap ? 2 * q->cap : 64;
    if (cap < need) cap = need;
    double **arrays[] = {&q->issue, &q->length, &q->due, &q->finish, &q->tol, &q->after,
                         &q->log_finish, &q->log_tol, &q->log_after};
    for (size_t i = 0; i < 9; i++) {
        double *grown = PyMem_Realloc(*arrays[i], (size_t)cap * sizeof(double));
        if (!grown) { PyErr_NoMemory(); return -1; }
        *arrays[i] = grown;
    }
    q->cap = cap;
    return 0;
}

/* Opens slot k in every array (by = 1; the caller fills issue, length, due) or closes it
 * (by = -1), moving what is behind it. */
static int shift_at(Queue *q, Py_ssize_t k, int by) {
    if (by > 0 && reserve(q, q->n + 1)) return -1;
    Py_ssize_t from = by > 0 ? k : k + 1;
    size_t bytes = (size_t)(q->n - from) * sizeof(double);
    double *arrays[] = {q->issue, q->length, q->due, q->finish, q->tol, q->after};
    for (size_t i = 0; i < 6; i++) memmove(arrays[i] + from + by, arrays[i] + from, bytes);
    q->n += by;
    q->shifts++;
    return 0;
}
#define open_slot(q, k) shift_at((q), (k), 1)
#define close_slot(q, k) shift_at((q), (k), -1)

/* finishes(): FIFO in issue order, a copy starting once the engine is free and issued. */
static void ensure_finishes(Queue *q) {
    if (q->finishes_valid) return;
    double free_at = 0.0;
    for (Py_ssize_t j = 0; j < q->n; j++) {
        free_at = py_max(free_at, q->issue[j]) + q->length[j];
        q->finish[j] = free_at;
    }
    q->finishes_valid = 1;
}

/* _tolerance_down: fills tol and after from copy j down to copy 0. Below stop_below the
 * arrays still hold the old values, so the walk stops where the delay reaching a copy is
 * what reached it before (stop_below = 0: a walk afresh, which never stops early). */
static void tolerance_down(Queue *q, Py_ssize_t j, double after, Py_ssize_t stop_below) {
    const double *finish = q->finish, *issue = q->issue, *due = q->due;
    double *tol = q->tol, *afters = q->after;
    if (q->logging) {
        q->t_hi = j;
        q->t_n = 0;
    }
    while (j >= 0) {
        if (j < stop_below && afters[j] == after) return;
        if (q->logging) {
            q->log_tol[q->t_n] = tol[j];
            q->log_after[q->t_n++] = afters[j];
        }
        afters[j] = after;
        tol[j] = py_min(due[j] - finish[j], after);
        double before = j ? finish[j - 1] : 0.0;
        double start = py_max(before, issue[j]);
        double idle = start - before;
        if (j) after = idle + tol[j];
        j--;
    }
}

/* _tolerance(): the tolerances, computed afresh when not cached. */
static void ensure_tolerances(Queue *q) {
    ensure_finishes(q);
    if (q->tolerances_valid) return;
    tolerance_down(q, q->n - 1, INFINITY, 0);
    q->tolerances_valid = 1;
}

/* _changed: the caches after copy k was inserted (every array already opened at k) or the
 * copy at k removed (every array already closed at k). */
static void changed(Queue *q, Py_ssize_t k, int inserted) {
    if (!q->finishes_valid) {
        q->tolerances_valid = 0;
        return;
    }
    Py_ssize_t n = q->n, resync = n;
    double *finish = q->finish;
    double free_at = k ? finish[k - 1] : 0.0;
    q->f_lo = k;
    q->f_n = 0;
    q->t_n = 0;
    for (Py_ssize_t j = k; j < n; j++) {
        free_at = py_max(free_at, q->issue[j]) + q->length[j];
        /* finish[j] holds the old finish of the copy now at j until it is written */
        if ((j > k || !inserted) && finish[j] == free_at) {
            resync = j;
            break;
        }
        if (q->logging) q->log_finish[q->f_n++] = finish[j];
        finish[j] = free_at;
    }
    if (!q->tolerances_valid) return;
    Py_ssize_t j = resync - 1;
    double incoming = INFINITY;
    if (resync < n && j >= 0) {
        double idle = py_max(finish[j], q->issue[resync]) - finish[j];
        incoming = idle + q->tol[resync];
    }
    tolerance_down(q, j, incoming, k);
}

static void insert_at(Queue *q, Py_ssize_t k, double issue, double length, double due) {
    q->issue[k] = issue;
    q->length[k] = length;
    q->due[k] = due;
    changed(q, k, 1);
}

static int add_copy(Queue *q, double issue, double length, double due) {
    Py_ssize_t k = bisect_right(q, issue);
    if (open_slot(q, k)) return -1;
    insert_at(q, k, issue, length, due);
    return 0;
}

static double finish_if_added(Queue *q, double issue, double length) {
    Py_ssize_t k = bisect_right(q, issue);
    ensure_finishes(q);
    double free_at = k ? q->finish[k - 1] : 0.0;
    return py_max(free_at, issue) + length;
}

/* A copy that would be added: its place k, its finish, and the delay it pushes onto the
 * copy now at k (0 when k == n); what fits and lateness both start from. */
typedef struct {
    Py_ssize_t k;
    double finish, delay;
} Probe;

static Probe probe(Queue *q, double issue, double length) {
    Probe p = {bisect_right(q, issue), 0.0, 0.0};
    ensure_finishes(q);
    double before = p.k ? q->finish[p.k - 1] : 0.0;
    p.finish = py_max(before, issue) + length;
    if (p.k < q->n) {
        double old_start = py_max(before, q->issue[p.k]);
        p.delay = py_max(0.0, py_max(p.finish, q->issue[p.k]) - old_start);
    }
    return p;
}

static int fits(Queue *q, double issue, double length, double due) {
    Probe p = probe(q, issue, length);
    if (p.finish > due + SLACK) return 0;
    if (p.k == q->n) return 1;
    ensure_tolerances(q);
    return p.delay <= q->tol[p.k] + SLACK;
}

static inline int as_double(PyObject *o, double *out) {
    *out = PyFloat_CheckExact(o) ? PyFloat_AS_DOUBLE(o) : PyFloat_AsDouble(o);
    return (*out == -1.0 && PyErr_Occurred()) ? -1 : 0;
}

/* Reads the float arguments `names[0..count)` of method `method`, positional or by
 * keyword; those from `required` on are optional and keep the value already in `out`. */
static int read_doubles(PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames,
                        const char *method, const char *const *names, int count,
                        int required, double *out) {
    int given[8] = {0};
    Py_ssize_t all = nargs + (kwnames ? PyTuple_GET_SIZE(kwnames) : 0);
    for (Py_ssize_t i = 0; i < all; i++) {
        int at = i < count ? (int)i : count;
        if (i >= nargs) {
            PyObject *name = PyTuple_GET_ITEM(kwnames, i - nargs);
            for (at = 0; at < count && PyUnicode_CompareWithASCIIString(name, names[at]); at++) {}
        }
        if (at == count || given[at]) {
            PyErr_Format(PyExc_TypeError, "%s(): argument %zd is extra, unknown or repeated",
                         method, i + 1);
            return -1;
        }
        if (as_double(args[i], &out[at])) return -1;
        given[at] = 1;
    }
    for (int i = 0; i < required; i++) {
        if (!given[i]) {
            PyErr_Format(PyExc_TypeError, "%s() missing argument '%s'", method, names[i]);
            return -1;
        }
    }
    return 0;
}

static const char *const ISSUE_LENGTH[] = {"issue", "length"};
static const char *const ISSUE_LENGTH_DUE[] = {"issue", "length", "due"};
static const char *const ISSUE_LENGTH_END[] = {"issue", "length", "end"};

/* A QueuedCopy's three numbers (its fields issue_us, length_us, due_us), and the fields
 * themselves (new references) when `fields` is not NULL. */
static int read_copy(PyObject *copy, PyObject **fields, double *values) {
    static const char *const names[] = {"issue_us", "length_us", "due_us"};
    for (int i = 0; i < 3; i++) {
        PyObject *field = PyObject_GetAttrString(copy, names[i]);
        int failed = !field || as_double(field, &values[i]);
        if (fields && !failed) fields[i] = field;
        else Py_XDECREF(field);
        if (failed) {
            for (int j = 0; fields && j < i; j++) Py_DECREF(fields[j]);
            return -1;
        }
    }
    return 0;
}

static PyObject *list_of(const double *values, Py_ssize_t n) {
    PyObject *list = PyList_New(n);
    if (!list) return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = PyFloat_FromDouble(values[i]);
        if (!item) { Py_DECREF(list); return NULL; }
        PyList_SET_ITEM(list, i, item);
    }
    return list;
}

/* A list of floats read into `out` (n items); -1 with an exception if it is not one. */
static int read_list(PyObject *list, Py_ssize_t n, double *out) {
    if (!PyList_Check(list) || PyList_GET_SIZE(list) != n) {
        PyErr_SetString(PyExc_ValueError, "CopyQueue state: expected lists of equal length");
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++)
        if (as_double(PyList_GET_ITEM(list, i), &out[i])) return -1;
    return 0;
}

static int read_index(PyObject *o, Py_ssize_t *out) {
    *out = PyLong_AsSsize_t(o);
    return (*out == -1 && PyErr_Occurred()) ? -1 : 0;
}

/* starts[i] as a double, for a list `starts`; -1 with IndexError outside it. */
static int start_at(PyObject *starts, Py_ssize_t i, double *out) {
    if (i < 0 || i >= PyList_GET_SIZE(starts)) {
        PyErr_SetString(PyExc_IndexError, "list index out of range");
        return -1;
    }
    return as_double(PyList_GET_ITEM(starts, i), out);
}

static PyObject *Queue_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
    if (PyTuple_GET_SIZE(args) || (kwargs && PyDict_GET_SIZE(kwargs))) {
        PyErr_SetString(PyExc_TypeError, "CopyQueue() takes no arguments");
        return NULL;
    }
    Queue *q = (Queue *)type->tp_alloc(type, 0);
    if (!q) return NULL;
    q->finishes_valid = q->tolerances_valid = 1; /* an empty queue: [] and [] */
    return (PyObject *)q;
}

static void Queue_dealloc(Queue *q) {
    double *arrays[] = {q->issue, q->length, q->due, q->finish, q->tol, q->after,
                        q->log_finish, q->log_tol, q->log_after};
    for (size_t i = 0; i < 9; i++) PyMem_Free(arrays[i]);
    Py_TYPE(q)->tp_free((PyObject *)q);
}

static PyObject *Queue_add(Queue *q, PyObject *const *args, Py_ssize_t nargs,
                           PyObject *kwnames) {
    double v[3] = {0.0, 0.0, INFINITY};
    if (read_doubles(args, nargs, kwnames, "add", ISSUE_LENGTH_DUE, 3, 2, v)) return NULL;
    if (add_copy(q, v[0], v[1], v[2])) return NULL;
    Py_RETURN_NONE;
}

/* Where remove finds a copy (v: issue, length, due): the first from bisect_left(issue) on
 * with its length and due (n if none). */
static Py_ssize_t find_copy(const Queue *q, const double *v) {
    Py_ssize_t k = bisect_left(q, v[0]);
    while (k < q->n && !(q->length[k] == v[1] && q->due[k] == v[2])) k++;
    return k;
}

static PyObject *Queue_remove(Queue *q, PyObject *copy) {
    PyObject *fields[3];
    double v[3];
    if (read_copy(copy, fields, v)) return NULL;
    Py_ssize_t k = find_copy(q, v);
    int found = k < q->n;
    if (found) {
        close_slot(q, k);
        changed(q, k, 0);
    } else {
        PyErr_Format(PyExc_ValueError, "no copy issued at %S us for %S us due %S us",
                     fields[0], fields[1], fields[2]);
    }
    for (int i = 0; i < 3; i++) Py_DECREF(fields[i]);
    return found ? Py_NewRef(Py_None) : NULL;
}

/* _set_aside(copy) -> (index, caches): removes the copy as set_aside does; `caches` says
 * which caches were computed before (0 none, 1 the finishes, 2 finishes and tolerances). */
static PyObject *Queue_set_aside(Queue *q, PyObject *copy) {
    double v[3];
    if (read_copy(copy, NULL, v)) return NULL;
    int caches = q->finishes_valid + (q->finishes_valid && q->tolerances_valid);
    Py_ssize_t k = find_copy(q, v);
    if (k == q->n) {
        PyErr_SetString(PyExc_IndexError, "list index out of range");
        return NULL;
    }
    double own[6] = {v[0], v[1], v[2], q->finish[k], q->tol[k], q->after[k]};
    close_slot(q, k);
    q->logging = caches == 2;
    changed(q, k, 0);
    q->logging = 0;
    q->logged = caches == 2;
    if (q->logged) {
        memcpy(q->aside, own, sizeof(own));
        q->aside_k = k;
        q->logged_at = q->shifts;
    }
    return Py_BuildValue("(ni)", k, caches);
}

/* _put_back(copy, index, caches): the copy back at `index` (see the file's comment). */
static PyObject *Queue_put_back(Queue *q, PyObject *args) {
    PyObject *copy;
    double v[3];
    Py_ssize_t k, caches;
    if (!PyArg_ParseTuple(args, "Onn:_put_back", &copy, &k, &caches)) return NULL;
    if (read_copy(copy, NULL, v)) return NULL;
    if (k < 0) {
        PyErr_Format(PyExc_ValueError, "put_back: index (=%zd) must be >= 0", k);
        return NULL;
    }
    int logged = q->logged && q->logged_at == q->shifts && caches == 2 && k == q->aside_k &&
                 q->aside[0] == v[0] && q->aside[1] == v[1] && q->aside[2] == v[2] &&
                 q->finishes_valid && q->tolerances_valid;
    q->logged = 0;
    if (k < q->n && q->issue[k] == v[0]) {
        if (add_copy(q, v[0], v[1], v[2])) return NULL;
        Py_RETURN_NONE;
    }
    if (logged && k <= q->n) { /* back where it was: the values from before, logged */
        Py_ssize_t f_lo = q->f_lo, f_n = q->f_n, t_hi = q->t_hi, t_n = q->t_n;
        if (open_slot(q, k)) return NULL;
        q->issue[k] = v[0];
        q->length[k] = v[1];
        q->due[k] = v[2];
        q->finish[k] = q->aside[3];
        q->tol[k] = q->aside[4];
        q->after[k] = q->aside[5];
        for (Py_ssize_t i = 0; i < f_n; i++) q->finish[f_lo + i + 1] = q->log_finish[i];
        for (Py_ssize_t i = 0; i < t_n; i++) {
            Py_ssize_t j = t_hi - i;
            if (j >= k) j++;
            q->tol[j] = q->log_tol[i];
            q->after[j] = q->log_after[i];
        }
        Py_RETURN_NONE;
    }
    if (k > q->n) k = q->n;
    if (open_slot(q, k)) return NULL;
    insert_at(q, k, v[0], v[1], v[2]);
    if (caches < 2) q->tolerances_valid = 0;
    if (caches < 1) q->finishes_valid = 0;
    Py_RETURN_NONE;
}

static PyObject *Queue_finishes(Queue *q, PyObject *Py_UNUSED(ignored)) {
    ensure_finishes(q);
    return list_of(q->finish, q->n);
}

static PyObject *Queue_tolerances(Queue *q, PyObject *Py_UNUSED(ignored)) {
    ensure_tolerances(q);
    return list_of(q->tol, q->n);
}

static PyObject *Queue_finish_if_added(Queue *q, PyObject *const *args, Py_ssize_t nargs,
                                       PyObject *kwnames) {
    double v[2];
    if (read_doubles(args, nargs, kwnames, "finish_if_added", ISSUE_LENGTH, 2, 2, v))
        return NULL;
    return PyFloat_FromDouble(finish_if_added(q, v[0], v[1]));
}

static PyObject *Queue_fits(Queue *q, PyObject *const *args, Py_ssize_t nargs,
                            PyObject *kwnames) {
    double v[3];
    if (read_doubles(args, nargs, kwnames, "fits", ISSUE_LENGTH_DUE, 3, 3, v)) return NULL;
    return PyBool_FromLong(fits(q, v[0], v[1], v[2]));
}

static PyObject *Queue_lateness(Queue *q, PyObject *const *args, Py_ssize_t nargs,
                                PyObject *kwnames) {
    double v[3];
    if (read_doubles(args, nargs, kwnames, "lateness", ISSUE_LENGTH_DUE, 3, 3, v))
        return NULL;
    Probe p = probe(q, v[0], v[1]);
    double late = py_max(0.0, p.finish - v[2]);
    if (p.k < q->n) {
        ensure_tolerances(q);
        late += py_max(0.0, p.delay - py_max(q->tol[p.k], 0.0));
    }
    return PyFloat_FromDouble(late);
}

static PyObject *Queue_end_growth(Queue *q, PyObject *const *args, Py_ssize_t nargs,
                                  PyObject *kwnames) {
    double v[3];
    if (read_doubles(args, nargs, kwnames, "end_growth", ISSUE_LENGTH_END, 3, 3, v))
        return NULL;
    double issue = v[0], length = v[1], end = v[2];
    ensure_finishes(q);
    double before = py_max(end, q->n ? q->finish[q->n - 1] : 0.0);
    double free_at = finish_if_added(q, issue, length);
    for (Py_ssize_t j = bisect_right(q, issue); j < q->n; j++)
        free_at = py_max(free_at, q->issue[j]) + q->length[j];
    return PyFloat_FromDouble(py_max(0.0, free_at - before));
}

/* The arguments (starts: list, i, j, length, due) of first_late and latest_fitting. */
static int read_scan(PyObject *const *args, Py_ssize_t nargs, Py_ssize_t *i, Py_ssize_t *j,
                     double *length_due) {
    if (nargs != 5 || !PyList_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError, "expected (starts: list, int, int, length, due)");
        return -1;
    }
    return (read_index(args[1], i) || read_index(args[2], j)
            || as_double(args[3], &length_due[0]) || as_double(args[4], &length_due[1])) ? -1 : 0;
}

/* first_late(starts, lo, hi, length, due): bisection over [lo, hi) for the first i whose
 * copy issued at starts[i] finishes after due + SLACK. */
static PyObject *Queue_first_late(Queue *q, PyObject *const *args, Py_ssize_t nargs) {
    Py_ssize_t lo, hi;
    double v[2];
    if (read_scan(args, nargs, &lo, &hi, v)) return NULL;
    double length = v[0], due = v[1];
    PyObject *starts = args[0];
    ensure_finishes(q);
    while (lo < hi) {
        Py_ssize_t mid = (lo + hi) / 2;
        double issue;
        if (start_at(starts, mid, &issue)) return NULL;
        Py_ssize_t k = bisect_right(q, issue);
        if (py_max(k ? q->finish[k - 1] : 0.0, issue) + length <= due + SLACK) lo = mid + 1;
        else hi = mid;
    }
    return PyLong_FromSsize_t(lo);
}

/* latest_fitting(starts, low, top, length, due): the largest i in [low, top] whose copy
 * issued at starts[i] fits, else None. */
static PyObject *Queue_latest_fitting(Queue *q, PyObject *const *args, Py_ssize_t nargs) {
    Py_ssize_t low, top;
    double v[2];
    if (read_scan(args, nargs, &low, &top, v)) return NULL;
    for (Py_ssize_t i = top; i >= low; i--) {
        double issue;
        if (start_at(args[0], i, &issue)) return NULL;
        if (fits(q, issue, v[0], v[1])) return PyLong_FromSsize_t(i);
    }
    Py_RETURN_NONE;
}

static PyObject *cached_list(const Queue *q, const double *values, int valid) {
    return valid ? list_of(values, q->n) : Py_NewRef(Py_None);
}

/* __getstate__: (issues, lengths, dues, finishes or None, tolerances or None, absorbed
 * delays or None), the caches as they are (None: not computed). */
static PyObject *Queue_getstate(Queue *q, PyObject *Py_UNUSED(ignored)) {
    int tolerances = q->finishes_valid && q->tolerances_valid;
    return Py_BuildValue("(NNNNNN)", list_of(q->issue, q->n), list_of(q->length, q->n),
                         list_of(q->due, q->n), cached_list(q, q->finish, q->finishes_valid),
                         cached_list(q, q->tol, tolerances), cached_list(q, q->after, tolerances));
}

/* __setstate__: the queue from a __getstate__ tuple (finishes may be None; tolerances and
 * absorbed delays are both None or both lists, and only with the finishes). */
static PyObject *Queue_setstate(Queue *q, PyObject *state) {
    if (!PyTuple_Check(state) || PyTuple_GET_SIZE(state) != 6
        || !PyList_Check(PyTuple_GET_ITEM(state, 0))) {
        PyErr_SetString(PyExc_ValueError, "CopyQueue state: expected a 6-tuple of lists");
        return NULL;
    }
    PyObject *finishes = PyTuple_GET_ITEM(state, 3), *tol = PyTuple_GET_ITEM(state, 4),
             *after = PyTuple_GET_ITEM(state, 5);
    if ((tol == Py_None) != (after == Py_None) || (finishes == Py_None && tol != Py_None)) {
        PyErr_SetString(PyExc_ValueError,
                        "CopyQueue state: tolerances need finishes and absorbed delays");
        return NULL;
    }
    Py_ssize_t n = PyList_GET_SIZE(PyTuple_GET_ITEM(state, 0));
    if (reserve(q, n)) return NULL;
    q->n = 0;
    q->finishes_valid = q->tolerances_valid = 0;
    double *arrays[] = {q->issue, q->length, q->due, q->finish, q->tol, q->after};
    for (int i = 0; i < 6; i++) {
        PyObject *item = PyTuple_GET_ITEM(state, i);
        if (item != Py_None && read_list(item, n, arrays[i])) return NULL;
    }
    q->n = n;
    q->shifts++;
    q->logged = 0;
    q->finishes_valid = finishes != Py_None;
    q->tolerances_valid = tol != Py_None;
    Py_RETURN_NONE;
}

/* issues, lengths, dues: `closure` is the offset of the array's pointer in Queue. */
static PyObject *Queue_column(Queue *q, void *closure) {
    return list_of(*(double **)((char *)q + (size_t)closure), q->n);
}

#define FAST_KW (METH_FASTCALL | METH_KEYWORDS)

static PyMethodDef Queue_methods[] = {
    {"add", (PyCFunction)(void (*)(void))Queue_add, FAST_KW,
     "add(issue, length, due=inf): queue a copy behind those issued at or before `issue`."},
    {"remove", (PyCFunction)Queue_remove, METH_O,
     "remove(copy): take back a copy added with these numbers (ValueError if none)."},
    {"_set_aside", (PyCFunction)Queue_set_aside, METH_O,
     "_set_aside(copy) -> (index, caches computed: 0, 1 finishes, 2 and tolerances)"},
    {"_put_back", (PyCFunction)Queue_put_back, METH_VARARGS,
     "_put_back(copy, index, caches): undo _set_aside."},
    {"finishes", (PyCFunction)Queue_finishes, METH_NOARGS,
     "finishes() -> list: every queued copy's finish time (a new list)."},
    {"tolerances", (PyCFunction)Queue_tolerances, METH_NOARGS,
     "tolerances() -> list: how much later each copy may finish (a new list)."},
    {"finish_if_added", (PyCFunction)(void (*)(void))Queue_finish_if_added, FAST_KW,
     "finish_if_added(issue, length) -> float"},
    {"fits", (PyCFunction)(void (*)(void))Queue_fits, FAST_KW,
     "fits(issue, length, due) -> bool"},
    {"lateness", (PyCFunction)(void (*)(void))Queue_lateness, FAST_KW,
     "lateness(issue, length, due) -> float"},
    {"end_growth", (PyCFunction)(void (*)(void))Queue_end_growth, FAST_KW,
     "end_growth(issue, length, end) -> float"},
    {"first_late", (PyCFunction)(void (*)(void))Queue_first_late, METH_FASTCALL,
     "first_late(starts, lo, hi, length, due) -> int"},
    {"latest_fitting", (PyCFunction)(void (*)(void))Queue_latest_fitting, METH_FASTCALL,
     "latest_fitting(starts, low, top, length, due) -> int | None"},
    {"__getstate__", (PyCFunction)Queue_getstate, METH_NOARGS,
     "(issues, lengths, dues, finishes, tolerances, absorbed); None: not computed."},
    {"__setstate__", (PyCFunction)Queue_setstate, METH_O, "the queue from __getstate__."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef Queue_getset[] = {
    {"issues", (getter)Queue_column, NULL, "issue times in queue order (a new list)",
     (void *)offsetof(Queue, issue)},
    {"lengths", (getter)Queue_column, NULL, "copy lengths in queue order (a new list)",
     (void *)offsetof(Queue, length)},
    {"dues", (getter)Queue_column, NULL, "due times in queue order (a new list)",
     (void *)offsetof(Queue, due)},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject QueueType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "cupool.planning.budget.engine._copyq.CopyQueue",
    .tp_doc = "One FIFO copy engine's queue (see cupool.planning.budget.engine.copies).",
    .tp_basicsize = sizeof(Queue),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_new = Queue_new,
    .tp_dealloc = (destructor)Queue_dealloc,
    .tp_methods = Queue_methods,
    .tp_getset = Queue_getset,
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "_copyq",
    .m_doc = "Compiled copy queue of cupool.planning.budget.engine.copies (identical answers).",
    .m_size = -1,
};

PyMODINIT_FUNC PyInit__copyq(void) {
    PyObject *m = PyModule_Create(&module);
    if (m && PyModule_AddType(m, &QueueType) < 0) Py_CLEAR(m);
    return m;
}
